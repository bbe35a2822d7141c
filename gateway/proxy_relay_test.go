package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
)

func TestBackendURL(t *testing.T) {
	tests := []struct{ backend, in, want string }{
		{"http://b:8000", "/v1/chat/completions", "http://b:8000/v1/chat/completions"},
		{"http://b:8000/", "/v1/models?x=1", "http://b:8000/v1/models?x=1"},
		{"http://b:8000/vllm", "/v1/models", "http://b:8000/vllm/v1/models"},
		{"http://b:8000/vllm/", "/v1/models", "http://b:8000/vllm/v1/models"},
		{"http://b:8000/vllm?k=v", "/v1/models", "http://b:8000/vllm/v1/models?k=v"},
		{"http://b:8000/vllm?k=v", "/v1/models?x=1", "http://b:8000/vllm/v1/models?k=v&x=1"},
		{"http://b:8000/a%2Fb", "/v1/responses/r%2F1", "http://b:8000/a%2Fb/v1/responses/r%2F1"},
		{"https://b", "/v1/responses/r%2F1", "https://b/v1/responses/r%2F1"},
		{"http://b:8000", "/v1/models?", "http://b:8000/v1/models?"},
		{"http://b:8000/vllm?k=v", "/v1/models?", "http://b:8000/vllm/v1/models?k=v"},
	}
	for _, tt := range tests {
		b, _ := url.Parse(tt.backend)
		in, _ := url.ParseRequestURI(tt.in)
		if got := backendURL(b, in).String(); got != tt.want {
			t.Errorf("backend %s, request %s: %s, want %s", tt.backend, tt.in, got, tt.want)
		}
	}
}

func TestUpstreamHeader(t *testing.T) {
	b, _ := url.Parse("http://b:8000")
	tests := []struct {
		name string
		in   http.Header
		tls  bool
		key  string
		want http.Header // besides X-Request-Id
	}{
		{
			name: "end-to-end headers pass, the hop is stated",
			in:   http.Header{"Content-Type": {"application/json"}, "User-Agent": {"sdk/1"}, "Traceparent": {"00-x"}},
			want: http.Header{"Content-Type": {"application/json"}, "User-Agent": {"sdk/1"}, "Traceparent": {"00-x"},
				"X-Forwarded-For": {"10.0.0.7"}, "X-Forwarded-Host": {"gw"}, "X-Forwarded-Proto": {"http"}},
		},
		{
			name: "credentials, hop-by-hop, Connection-named and forwarding claims stay",
			in: http.Header{"Authorization": {"Bearer c"}, "Cookie": {"k=v"}, "X-Api-Key": {"c"}, "Proxy-Authorization": {"c"},
				"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"v"}, "Keep-Alive": {"timeout=5"}, "Upgrade": {"h2c"},
				"Transfer-Encoding": {"chunked"}, "Te": {"gzip"}, "Trailer": {"X"}, "X-Forwarded-For": {"6.6.6.6"},
				"Forwarded": {"for=6.6.6.6"}, "X-Real-Ip": {"6.6.6.6"}, "X-Maitred-Priority": {"high"}, "Expect": {"100-continue"},
				"User-Agent": {"sdk/1"}},
			tls: true,
			key: "backend-key",
			want: http.Header{"User-Agent": {"sdk/1"}, "Authorization": {"Bearer backend-key"},
				"X-Forwarded-For": {"10.0.0.7"}, "X-Forwarded-Host": {"gw"}, "X-Forwarded-Proto": {"https"}},
		},
		{
			name: "a User-Agent the Connection header names goes, and none is Go's either",
			in:   http.Header{"Connection": {"User-Agent"}, "User-Agent": {"sdk/1"}},
			want: http.Header{"User-Agent": {""},
				"X-Forwarded-For": {"10.0.0.7"}, "X-Forwarded-Host": {"gw"}, "X-Forwarded-Proto": {"http"}},
		},
		{
			name: "TE trailers passes; no User-Agent stays none",
			in:   http.Header{"Te": {"gzip, Trailers;q=1"}},
			want: http.Header{"Te": {"trailers"}, "User-Agent": {""},
				"X-Forwarded-For": {"10.0.0.7"}, "X-Forwarded-Host": {"gw"}, "X-Forwarded-Proto": {"http"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &http.Request{Header: tt.in, RemoteAddr: "10.0.0.7:5555", Host: "gw"}
			if tt.tls {
				in.TLS = &tls.ConnectionState{}
			}
			a := &attempt{backend: &fleet.Backend{URL: b, Key: tt.key}}
			h := upstreamHeader(in, a)
			if id := h["X-Request-Id"]; len(id) != 1 || id[0] != a.upstreamID || len(a.upstreamID) != 32 {
				t.Errorf("X-Request-Id %q, attempt's %q", id, a.upstreamID)
			}
			delete(h, "X-Request-Id")
			if len(h) != len(tt.want) {
				t.Errorf("got %v\nwant %v", h, tt.want)
			}
			for k, vs := range tt.want {
				if !slices.Equal(h[k], vs) {
					t.Errorf("%s: %q, want %q", k, h[k], vs)
				}
			}
		})
	}
}

func TestDropHopByHop(t *testing.T) {
	h := http.Header{"Connection": {"close, X-Conn-Only"}, "X-Conn-Only": {"1"}, "Keep-Alive": {"timeout=5"},
		"Transfer-Encoding": {"chunked"}, "Content-Type": {"application/json"}, "X-Backend": {"yes"}}
	dropHopByHop(h)
	if len(h) != 2 || h.Get("Content-Type") == "" || h.Get("X-Backend") == "" {
		t.Errorf("left %v", h)
	}
}

// TestReusedConnectionClosedBeforeAnswer: a request written on a pooled
// keep-alive connection that the backend closes without a byte of answer
// was never taken up (the keep-alive race: the backend closed the idle
// connection as the request went out), so another backend may take it;
// the same on a fresh connection is the backend failing the request.
func TestReusedConnectionClosedBeforeAnswer(t *testing.T) {
	// The backend answers the first request on each connection and closes
	// it on reading the second; with answerFirst false it closes at once.
	backend := func(answerFirst bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					br := bufio.NewReader(c)
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if !answerFirst {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					if req, err = http.ReadRequest(br); err == nil {
						io.Copy(io.Discard, req.Body)
					}
				}()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	tr := NewTransport(config.Default())
	defer tr.CloseIdleConnections()
	type tried struct {
		proxyErr   error
		reusedIdle bool
	}
	send := func(base string) tried {
		a := &attempt{}
		req, _ := http.NewRequestWithContext(a.traceConn(context.Background()), http.MethodPost, base+"/v1/completions",
			strings.NewReader(`{"model":"m","prompt":"hi"}`))
		res, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		return tried{err, a.reusedIdle}
	}

	base := backend(true)
	if a := send(base); a.proxyErr != nil || a.reusedIdle {
		t.Fatalf("first request: err %v, reused %v", a.proxyErr, a.reusedIdle)
	}
	a := send(base)
	if a.proxyErr == nil || !a.reusedIdle || !neverSent(a.proxyErr, a.reusedIdle) {
		t.Errorf("second request on the pooled connection: err %v, reused %v, never sent %v; want an error, reused, never sent",
			a.proxyErr, a.reusedIdle, neverSent(a.proxyErr, a.reusedIdle))
	}

	a = send(backend(false))
	if a.proxyErr == nil || a.reusedIdle || neverSent(a.proxyErr, a.reusedIdle) {
		t.Errorf("fresh connection closed unanswered: err %v, reused %v, never sent %v; want an error the backend's",
			a.proxyErr, a.reusedIdle, neverSent(a.proxyErr, a.reusedIdle))
	}
}

// TestRelayPassesTrailersAndDropsHopByHop: a backend's answer reaches the
// client with its end-to-end headers and its trailers, without the
// headers of its own connection (nor those its Connection header names).
func TestRelayPassesTrailersAndDropsHopByHop(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Connection", "X-Conn-Only")
		w.Header().Set("X-Conn-Only", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Backend", "yes")
		io.WriteString(w, `{"choices":[]}`)
		w.(http.Flusher).Flush() // chunked: the trailer follows the body
		w.Header().Set("X-Checksum", "abc")
	})
	tg := startGateway(t, nil, fb.URL)
	res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`)
	body := readBodyT(t, res)
	if res.StatusCode != 200 || body != `{"choices":[]}` {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	if got := res.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer X-Checksum %q, want abc (trailers %v)", got, res.Trailer)
	}
	if res.Header.Get("X-Backend") != "yes" || res.Header.Get("X-Conn-Only") != "" || res.Header.Get("Keep-Alive") != "" {
		t.Errorf("headers %v", res.Header)
	}
}

// awaitingBody is a stream body (as the usage meter over a stream's
// guard): awaitData calls onAwait, Read returns its pieces one at a time.
type awaitingBody struct {
	chunks
	onAwait func()
	awaits  int
}

func (b *awaitingBody) awaitData() bool {
	b.awaits++
	b.onAwait()
	return true
}

// The copy gives its buffer back before it waits on a stream's next
// bytes, so that an open stream between events holds none; an answer
// that cannot wait so keeps one buffer for its whole copy.
func TestCopyAnswerWaitsOnAStreamHoldingNoBuffer(t *testing.T) {
	bufs := newBufferPool(64)
	body := &awaitingBody{chunks: chunks{pieces: []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}, err: io.EOF}}
	var heldAtWait []int64
	body.onAwait = func() { heldAtWait = append(heldAtWait, bufs.held.Load()) }
	rec := httptest.NewRecorder()
	if err := copyAnswer(rec, body, bufs); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.Body.String(), "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"; got != want {
		t.Fatalf("copied %q, want %q", got, want)
	}
	if body.awaits != 4 { // before each event and before the end
		t.Fatalf("awaitData called %d times, want 4", body.awaits)
	}
	for i, h := range heldAtWait {
		if h != 0 {
			t.Errorf("wait %d: %d copy buffers held, want none", i, h)
		}
	}
	if h := bufs.held.Load(); h != 0 {
		t.Errorf("after the copy %d buffers held, want none", h)
	}

	// A plain body: one buffer, held while it is read.
	var heldAtRead []int64
	plain := &probedBody{chunks: chunks{pieces: []string{"{\"a\":", "1}"}, err: io.EOF}}
	plain.probe = func([]byte) { heldAtRead = append(heldAtRead, bufs.held.Load()) }
	if err := copyAnswer(httptest.NewRecorder(), plain, bufs); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(heldAtRead, []int64{1, 1, 1}) || bufs.held.Load() != 0 {
		t.Errorf("plain body: buffers held at each read %v, after %d; want 1 each and 0 after", heldAtRead, bufs.held.Load())
	}
}

// flushProbe is a ResponseWriter that calls onFlush at each flush.
type flushProbe struct {
	*httptest.ResponseRecorder
	onFlush func()
}

func (f *flushProbe) Flush() { f.onFlush(); f.ResponseRecorder.Flush() }

// TestCopyAnswerFlushesAStreamHoldingNoBuffer: a stream's flush may wait on
// the client (over HTTP/2, on its connection's writer, which thousands of
// streams share); the copy gives its buffer back before it.
func TestCopyAnswerFlushesAStreamHoldingNoBuffer(t *testing.T) {
	bufs := newBufferPool(64)
	body := &awaitingBody{chunks: chunks{pieces: []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"}, err: io.EOF}}
	body.onAwait = func() {}
	var heldAtFlush []int64
	w := &flushProbe{ResponseRecorder: httptest.NewRecorder()}
	w.onFlush = func() { heldAtFlush = append(heldAtFlush, bufs.held.Load()) }
	if err := copyAnswer(w, body, bufs); err != nil {
		t.Fatal(err)
	}
	if got, want := w.Body.String(), "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"; got != want {
		t.Fatalf("copied %q, want %q", got, want)
	}
	if !slices.Equal(heldAtFlush, []int64{0, 0, 0}) {
		t.Errorf("copy buffers held at each flush: %v, want none at each of 3", heldAtFlush)
	}
}

// An open stream holds no copy of its request: once the answer's headers
// came, the body (and the door's parse of it) is let go, however long the
// answer then streams. Six streams of 2 MB requests are held open, each
// after its first event; the heap must not hold their bodies.
func TestOpenStreamsHoldNoRequestBody(t *testing.T) {
	const streams, size = 6, 2 << 20
	release := make(chan struct{})
	var sent sync.WaitGroup
	sent.Add(streams)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		sent.Done()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	fb.forget = true // the backend keeps nothing it read
	tg := startGateway(t, nil, fb.URL)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"user":"` + strings.Repeat("u", size) + `"}`

	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	var answers []*http.Response
	for range streams {
		res := tg.post(t, "/v1/chat/completions", body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", res.StatusCode, readBodyT(t, res))
		}
		answers = append(answers, res)
	}
	sent.Wait()
	for _, res := range answers { // each client has its first event
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first event: %q, %v", line, err)
		}
	}
	grew := heap() - before
	close(release)
	for _, res := range answers {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	if grew > streams*size/2 {
		t.Errorf("the heap grew %d KiB with %d open streams of %d KiB requests: their bodies are held", grew>>10, streams, size>>10)
	}
}
