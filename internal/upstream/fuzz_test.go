package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// pipeBackend is a backend on an in-memory connection that answers any
// request with answer's bytes and then closes.
type pipeBackend struct {
	answer []byte
	wg     sync.WaitGroup
}

func (b *pipeBackend) dial(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer server.Close()
		req, err := http.ReadRequest(bufio.NewReader(server))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		server.Write(b.answer)
	}()
	return client, nil
}

// FuzzTransportMatchesNetHTTP: whatever a backend answers, this
// transport's client sees what net/http's sees (status, headers,
// framing, body, trailers, errors by kind).
func FuzzTransportMatchesNetHTTP(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTrailer: X-Done\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n0\r\nX-Done: yes\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"HTTP/1.1 999 Odd\r\nX: a\r\n b\r\n\r\n",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, answer string) {
		send := func(rt http.RoundTripper) outcome {
			req, _ := http.NewRequest(http.MethodPost, "http://backend:8000/v1/completions", strings.NewReader(`{"prompt":"x"}`))
			return exchange(rt, req)
		}
		ref, own := &pipeBackend{answer: []byte(answer)}, &pipeBackend{answer: []byte(answer)}
		nt := netHTTP()
		nt.DialContext = ref.dial
		// The same reader size as net/http's (4 KiB): bufio's ReadLine
		// cannot tell a head line that fills its buffer exactly and then
		// meets the end from one cut short, so a line of a multiple of
		// the buffer's size ends in "unexpected EOF" where a line that
		// fits gives "malformed HTTP response". That is bufio's boundary
		// (net/http's own, at 4 KiB), not a difference between the two
		// clients, and comparing them at one size leaves it out.
		ot := &Transport{DialContext: own.dial, ReadBufferSize: 4 << 10}
		want, got := send(nt), send(ot)
		nt.CloseIdleConnections()
		ot.CloseIdleConnections()
		ref.wg.Wait()
		own.wg.Wait()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("answer %q: client saw\n%+v\nnet/http\n%+v", answer, got, want)
		}
	})
}
