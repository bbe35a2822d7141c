package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
)

// TestDeclaredLengthsCostNothing: 400 connections each declare an 8 MiB
// body and send one byte. Memory follows the bytes received (the gateway
// used to allocate each declared length up front: 3.2 GB here), and every
// connection is answered 408 and closed at read_body_timeout, while
// other clients are served.
func TestDeclaredLengthsCostNothing(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	tg := startGateway(t, func(c *config.Config) {
		c.ReadBodyTimeout = config.Duration(2 * time.Second)
	}, fb.URL)
	addr := rawGateway(t, tg)
	const conns = 400
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	head := "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 8388608\r\n\r\n{"
	var wg sync.WaitGroup
	type answer struct {
		status int
		closed bool
		err    error
	}
	answers := make(chan answer, conns)
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			br := bufio.NewReader(c)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			_, err = br.ReadByte() // the server closes: EOF
			answers <- answer{status: res.StatusCode, closed: err == io.EOF}
		})
	}
	// Every handler is now waiting for its body, each holding its first
	// buffer.
	eventually(t, "every body read to start", func() bool { return tg.bodies.used.Load() == conns*firstBodyBuffer })
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	if grew := int64(during.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("heap grew %d MiB for %d one-byte bodies, want at most 64", grew>>20, conns)
	}
	// Another client is served meanwhile.
	if res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`); res.StatusCode != 200 {
		t.Errorf("a normal request: %d", res.StatusCode)
	} else {
		readBodyT(t, res)
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil || a.status != http.StatusRequestTimeout || !a.closed {
			t.Fatalf("a slow body: status %d closed %v err %v, want 408 and closed", a.status, a.closed, a.err)
		}
	}
	if used := tg.bodies.used.Load(); used != 0 {
		t.Errorf("%d body bytes still held after every request ended", used)
	}
	if reqs, _ := fb.requests(); len(reqs) != 1 {
		t.Errorf("the backend received %d requests, want only the normal one", len(reqs))
	}
}

// TestBodyBudgetSheds: with max_body_bytes_in_flight reached by bodies
// still arriving, a new body is answered 503 server_busy (Retry-After,
// closed) instead of being buffered; once they end, bodies are read again.
func TestBodyBudgetSheds(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	tg := startGateway(t, func(c *config.Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxBodyBytesInFlight = 64 << 10
	}, fb.URL)
	addr := rawGateway(t, tg)
	// Four slow bodies fill the budget with their first buffers.
	head := "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"
	var slow []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, head)
		slow = append(slow, c)
	}
	eventually(t, "the budget to fill", func() bool { return tg.bodies.used.Load() == 4*firstBodyBuffer })
	res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
	body := readBodyT(t, res)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || !strings.Contains(body, `"server_busy"`) {
		t.Fatalf("with the budget full: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	for _, c := range slow {
		c.Close()
	}
	eventually(t, "the budget to empty", func() bool { return tg.bodies.used.Load() == 0 })
	res = tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
	if readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("after the slow bodies left: %d", res.StatusCode)
	}
}
