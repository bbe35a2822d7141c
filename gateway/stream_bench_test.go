package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// streamEvent is a chat stream chunk as vLLM writes it: one token.
const streamEvent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n"

// BenchmarkStreamEvent measures one event of an open stream: the backend
// writes an event once the client has read the one before (so that each
// hop reads one event at a time, as a replica's slow streams come), and
// ns/op and allocs/op are per event through the whole chain: backend,
// maitred (its relay: the backend read, the stream guard, the usage
// meter, the write to the client and its flush) and client. "direct" is
// the same stream from the backend itself (HTTP/1.1), the floor;
// "maitred" has its clients over h2c, as the streams dimension of
// `go run ./bench -scenario scale` reaches it. With -cpu 1, ns/op is the
// CPU the chain spends per event.
func BenchmarkStreamEvent(b *testing.B) {
	streams := make(chan chan struct{}, 1)
	backend := newFakeBackend(b, "m", func(w http.ResponseWriter, r *http.Request) {
		next := <-streams
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		rc.Flush()
		for range next {
			io.WriteString(w, streamEvent)
			rc.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	gw := serveH2C(b, backend.URL, nil)
	bare := bareH2CProxy(b, backend.URL)
	body := `{"model":"m","messages":[{"role":"user","content":"Count."}],"stream":true}`
	for _, p := range []struct {
		name, url string
		client    *http.Client
	}{{"direct", backend.URL, &http.Client{}}, {"maitred", gw.url, gw.client}, {"bare", bare, gw.client}} {
		b.Run(p.name, func(b *testing.B) {
			next := make(chan struct{})
			streams <- next
			res, err := p.client.Post(p.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != 200 {
				b.Fatalf("status %d", res.StatusCode)
			}
			r := bufio.NewReader(res.Body)
			ev := make([]byte, 0, 2*len(streamEvent))
			b.ReportAllocs()
			for b.Loop() {
				next <- struct{}{}
				if err := readEvent(r, ev); err != nil {
					b.Fatal(err)
				}
			}
			close(next)
			rest, _ := io.ReadAll(r)
			if !bytes.Equal(rest, []byte("data: [DONE]\n\n")) {
				b.Fatalf("the stream ended with %q", rest)
			}
		})
	}
}

// bareH2CProxy serves a plain httputil.ReverseProxy to backend, over
// HTTP/1.1 and h2c, flushing every write, and returns its URL.
func bareH2CProxy(b *testing.B, backend string) string {
	u, err := url.Parse(backend)
	if err != nil {
		b.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	srv := httptest.NewUnstartedServer(rp)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	b.Cleanup(srv.Close)
	return srv.URL
}

// readEvent reads one SSE event (up to its blank line) from r into ev's
// storage, checking it is streamEvent.
func readEvent(r *bufio.Reader, ev []byte) error {
	ev = ev[:0]
	for !bytes.HasSuffix(ev, []byte("\n\n")) {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		ev = append(ev, line...)
	}
	if string(ev) != streamEvent {
		return io.ErrUnexpectedEOF
	}
	return nil
}
