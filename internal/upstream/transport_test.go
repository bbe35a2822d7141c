package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawServer is a backend on a real socket that answers each request with
// scripted bytes: answer returns what to write for the request it read
// (raw: its bytes as they came) and whether to close the connection then.
type rawServer struct {
	ln       net.Listener
	answer   func(n int, req *http.Request, raw []byte) (string, bool)
	mu       sync.Mutex
	raws     [][]byte
	accepted atomic.Int64
	served   atomic.Int64
	wg       sync.WaitGroup
	conns    sync.Map
}

func newRawServer(t *testing.T, answer func(n int, req *http.Request, raw []byte) (string, bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, answer: answer}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *rawServer) close() {
	s.ln.Close()
	s.conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	s.wg.Wait()
}

func (s *rawServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.conns.Store(c, true)
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *rawServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		got := raw.Bytes()[:raw.Len()-br.Buffered()]
		s.mu.Lock()
		s.raws = append(s.raws, bytes.Clone(got))
		s.mu.Unlock()
		raw.Next(len(got))
		out, closeAfter := s.answer(int(s.served.Add(1)), req, got)
		if _, err := io.WriteString(c, out); err != nil || closeAfter {
			return
		}
	}
}

func (s *rawServer) requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raws
}

// outcome is what a client sees of one exchange, for comparing the
// transports: the answer's head, body, trailers and errors by kind.
type outcome struct {
	Status, Proto                   string
	Header, Trailer                 http.Header
	ContentLength                   int64
	TransferEncoding                []string
	Close                           bool
	Body                            string
	RoundTripErr, ReadErr, CloseErr string
}

// errKind names an error by what a caller can test of it, not its text.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	}
	return "error"
}

func exchange(rt http.RoundTripper, req *http.Request) outcome {
	res, err := rt.RoundTrip(req)
	if err != nil {
		return outcome{RoundTripErr: errKind(err)}
	}
	body, rerr := io.ReadAll(res.Body)
	cerr := res.Body.Close()
	return outcome{
		Status: res.Status, Proto: res.Proto, Header: res.Header, Trailer: res.Trailer,
		ContentLength: res.ContentLength, TransferEncoding: res.TransferEncoding, Close: res.Close,
		Body: string(body), ReadErr: errKind(rerr), CloseErr: errKind(cerr),
	}
}

func netHTTP() *http.Transport {
	return &http.Transport{DisableCompression: true, WriteBufferSize: 8 << 10}
}

// TestTransportMatchesNetHTTP sends the same requests through this
// transport and net/http's to backends that answer the same bytes, and
// compares what each backend read, byte for byte, and what each client
// saw: status, headers, framing, body, trailers, and errors by kind.
func TestTransportMatchesNetHTTP(t *testing.T) {
	post := func(body string) func(u string) *http.Request {
		return func(u string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions?x=1&y=%20z", strings.NewReader(body))
			req.Header["Content-Type"] = []string{"application/json"}
			req.Header["X-Multi"] = []string{"a", "b"}
			req.Header["User-Agent"] = []string{""}
			req.Header["Traceparent"] = []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			return req
		}
	}
	get := func(u string) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, u+"/v1/models", nil)
		return req
	}
	head := func(u string) *http.Request {
		req, _ := http.NewRequest(http.MethodHead, u+"/health", nil)
		return req
	}
	unknownLength := func(u string) *http.Request {
		req, _ := http.NewRequest(http.MethodPost, u+"/up", io.MultiReader(strings.NewReader("ab"), strings.NewReader("cd")))
		req.Host = "backend.example:8000"
		return req
	}
	big := strings.Repeat("x", 40<<10)
	cases := []struct {
		name   string
		req    func(u string) *http.Request
		answer string
		close  bool
	}{
		{"length", post(`{"a":1}`), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", false},
		{"chunked stream with trailers", post(`{"stream":true}`), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTrailer: X-Done\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"e\r\ndata: {\"a\":1}\n\n\r\n6\r\ndata: \r\n3;ext=1\r\nx\n\n\r\n0\r\nX-Done: yes\r\nX-Extra: 1\r\n\r\n", false},
		{"close delimited", get, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it", true},
		{"http/1.0", get, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true},
		{"no content", post(`{}`), "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n", false},
		{"head", head, "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", false},
		{"interim answers", post(`{}`), "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad", false},
		{"unknown length request", unknownLength, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
		{"large body both ways", post(big), "HTTP/1.1 200 OK\r\nContent-Length: " + fmt.Sprint(len(big)) + "\r\n\r\n" + big, false},
		{"duplicate length", get, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", true},
		{"bad status line", get, "HTTP/1.1 abc\r\n\r\n", true},
		{"no answer", post(`{}`), "", true},
		{"cut head", get, "HTTP/1.1 200 OK\r\nContent-Le", true},
		{"cut body", get, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", true},
		{"cut chunked", post(`{}`), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", true},
		{"bad chunk", post(`{}`), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n", true},
		{"switching protocols", get, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answer := func(int, *http.Request, []byte) (string, bool) { return tc.answer, tc.close }
			ref, own := newRawServer(t, answer), newRawServer(t, answer)
			nt := netHTTP()
			defer nt.CloseIdleConnections()
			ot := &Transport{}
			defer ot.CloseIdleConnections()
			want := exchange(nt, tc.req(ref.url()))
			got := exchange(ot, tc.req(own.url()))
			if tc.name == "switching protocols" {
				// net/http hands a 101's connection over as the body;
				// this transport reads none (the gateway never asks).
				want.Body, got.Body = "", ""
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("client saw\n%+v\nnet/http\n%+v", got, want)
			}
			wr, gr := ref.requests(), own.requests()
			for i := range max(len(wr), len(gr)) {
				if i >= len(wr) || i >= len(gr) {
					t.Fatalf("backend read %d requests, %d from net/http", len(gr), len(wr))
				}
				w := strings.Replace(string(wr[i]), ref.ln.Addr().String(), "HOST", 1)
				g := strings.Replace(string(gr[i]), own.ln.Addr().String(), "HOST", 1)
				if g != w {
					t.Errorf("backend read\n%q\nfrom net/http\n%q", g, w)
				}
			}
		})
	}
}

func ok(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func roundTrip(t *testing.T, tr http.RoundTripper, req *http.Request) string {
	t.Helper()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPoolReusesAndChecksConnections: a connection read to its end
// carries the next request (GotConn says reused and idle); one the
// backend closed while idle is found by the peek and replaced, with no
// failed request.
func TestPoolReusesAndChecksConnections(t *testing.T) {
	s := newRawServer(t, func(n int, _ *http.Request, _ []byte) (string, bool) {
		return ok(fmt.Sprint(n)), n == 2 // the second answer closes its connection
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused && i.WasIdle) }}
	for i := 1; i <= 3; i++ {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, s.url()+"/", nil)
		if got := roundTrip(t, tr, req); got != fmt.Sprint(i) {
			t.Fatalf("answer %d: %q", i, got)
		}
		if i == 2 {
			// The backend closes after the second answer (its FIN may
			// come after the body's last byte): wait until it has.
			awaitClosedPeer(t, tr)
		}
	}
	if want := []bool{false, true, false}; !reflect.DeepEqual(reused, want) {
		t.Errorf("reused %v, want %v", reused, want)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Errorf("backend accepted %d connections, want 2", n)
	}
	if n := tr.IdleConns(); n != 1 {
		t.Errorf("idle %d, want 1", n)
	}
}

// awaitClosedPeer waits until the pool's one idle connection is one the
// peer closed (the check a request makes when it takes it).
func awaitClosedPeer(t *testing.T, tr *Transport) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		tr.mu.Lock()
		var c *conn
		for _, cs := range tr.idle {
			c = cs[0]
		}
		tr.mu.Unlock()
		if c == nil || !c.alive() {
			return
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling the kernel's socket state; no timing asserted
	}
	t.Fatal("the backend's close never reached the idle connection")
}

// TestResendsAsNetHTTPDoes: a reused connection the backend drops as a
// request reaches it (read, then closed with no answer) gets the request
// once more on a fresh connection exactly when net/http's would: an
// idempotent request whose body can be read again; a POST that reached
// the connection fails (the gateway's retry rule decides), with or without
// a way to read its body again, unless it carries an Idempotency-Key.
func TestResendsAsNetHTTPDoes(t *testing.T) {
	type result struct {
		Answer   string
		Failed   bool
		Accepted int64
	}
	cases := []struct {
		name   string
		method string
		header string
		rewind bool
	}{
		{"GET", http.MethodGet, "", true},
		{"POST", http.MethodPost, "", true},
		{"POST without GetBody", http.MethodPost, "", false},
		{"POST with Idempotency-Key", http.MethodPost, "Idempotency-Key", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := func(tr http.RoundTripper) result {
				s := newRawServer(t, func(n int, _ *http.Request, _ []byte) (string, bool) {
					if n == 2 {
						return "", true // read it, then drop the connection
					}
					return ok(fmt.Sprint(n)), false
				})
				defer tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
				send := func() (string, error) {
					var body io.Reader
					if tc.method == http.MethodPost {
						body = strings.NewReader(`{"prompt":"x"}`)
					}
					req, _ := http.NewRequest(tc.method, s.url()+"/", body)
					if !tc.rewind {
						req.GetBody = nil
					}
					if tc.header != "" {
						req.Header.Set(tc.header, "k1")
					}
					res, err := tr.RoundTrip(req)
					if err != nil {
						return "", err
					}
					defer res.Body.Close()
					b, err := io.ReadAll(res.Body)
					return string(b), err
				}
				if got, err := send(); err != nil || got != "1" {
					t.Fatalf("first: %q %v", got, err)
				}
				got, err := send()
				return result{Answer: got, Failed: err != nil, Accepted: s.accepted.Load()}
			}
			want, got := run(netHTTP()), run(&Transport{})
			if got != want {
				t.Errorf("second request: %+v, net/http's %+v", got, want)
			}
		})
	}
}

// TestResendsWhenIdlePipeWasClosed: a connection that is no socket (a
// net.Pipe, as in-memory test networks dial), which the liveness peek
// takes as alive, closed by the backend while idle fails the request's
// write with io.ErrClosedPipe: the request goes once more on a fresh one.
func TestResendsWhenIdlePipeWasClosed(t *testing.T) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var dials atomic.Int64
	tr := &Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		c, s := net.Pipe()
		wg.Go(func() { // answers one request, then closes
			defer s.Close()
			if _, err := http.ReadRequest(bufio.NewReader(s)); err == nil {
				io.WriteString(s, ok("x"))
			}
		})
		return c, nil
	}}
	defer tr.CloseIdleConnections()
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodGet, "http://backend/", nil)
		if got := roundTrip(t, tr, req); got != "x" {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d dials, want 2 (the closed pipe replaced once)", n)
	}
}

// countingConn counts the reads of the connection it wraps.
type countingConn struct {
	net.Conn
	reads *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// TestReadBufferSizeReadsChunksInFewerReads: a 64 KiB answer in 2 KiB
// chunks (as net/http's server writes a /metrics page), read into 32 KiB
// at a time, takes a read or more a chunk through the default 1 KiB
// reader, and a few in all through a 16 KiB one (ReadBufferSize). On a
// net.Pipe a read returns what the reader asked for, so the counts are
// exact.
func TestReadBufferSizeReadsChunksInFewerReads(t *testing.T) {
	chunk := strings.Repeat("x", 2<<10)
	var answer strings.Builder
	answer.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 32 {
		fmt.Fprintf(&answer, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	answer.WriteString("0\r\n\r\n")
	reads := func(size int) int64 {
		var wg sync.WaitGroup
		defer wg.Wait()
		var n atomic.Int64
		tr := &Transport{ReadBufferSize: size, DialContext: func(context.Context, string, string) (net.Conn, error) {
			c, s := net.Pipe()
			wg.Go(func() {
				defer s.Close()
				if _, err := http.ReadRequest(bufio.NewReader(s)); err == nil {
					io.WriteString(s, answer.String())
				}
			})
			return countingConn{c, &n}, nil
		}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "http://backend/metrics", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		buf := make([]byte, 32<<10)
		got := 0
		for {
			m, err := res.Body.Read(buf)
			got += m
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if got != 32*len(chunk) {
			t.Fatalf("read %d bytes, want %d", got, 32*len(chunk))
		}
		return n.Load()
	}
	if n := reads(0); n < 32 {
		t.Errorf("the default 1 KiB reader read 32 chunks of 2 KiB in %d reads; want a read or more a chunk", n)
	}
	if n := reads(16 << 10); n > 8 {
		t.Errorf("a 16 KiB reader read 64 KiB in %d reads; want at most 8", n)
	}
}

// TestContextEndsTheExchange: a request whose context ends while it
// waits for the answer's head fails with the context's cause at once,
// and so does a body read waiting for the next event; either way the
// backend sees its connection closed and the pool keeps none.
func TestContextEndsTheExchange(t *testing.T) {
	for _, during := range []string{"head", "body"} {
		t.Run(during, func(t *testing.T) {
			s := newRawServer(t, func(_ int, req *http.Request, _ []byte) (string, bool) {
				if during == "head" {
					return "", false
				}
				return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n", false
			})
			tr := &Transport{}
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url()+"/", strings.NewReader("{}"))
			if during == "head" {
				go func() {
					for s.served.Load() == 0 {
						runtime.Gosched()
					}
					cancel()
				}()
				_, err := tr.RoundTrip(req)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("RoundTrip: %v, want the context's cause", err)
				}
			} else {
				res, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				p := make([]byte, 64)
				if n, err := res.Body.Read(p); err != nil || string(p[:n]) != "data: " {
					t.Fatalf("first read %q %v", p[:n], err)
				}
				cancel()
				if _, err := res.Body.Read(p); !errors.Is(err, context.Canceled) {
					t.Fatalf("read after cancel: %v", err)
				}
				res.Body.Close()
			}
			cancel()
			if n := tr.IdleConns(); n != 0 {
				t.Errorf("pool keeps %d connections of a cancelled exchange", n)
			}
		})
	}
}

// TestEarlyCloseClosesTheConnection: a stream's body closed before its
// end closes its connection (net/http's body would read it to its end)
// and the pool keeps nothing.
func TestEarlyCloseClosesTheConnection(t *testing.T) {
	s := newRawServer(t, func(int, *http.Request, []byte) (string, bool) {
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n", false
	})
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, s.url()+"/", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8)
	if n, _ := res.Body.Read(p); string(p[:n]) != "ab" {
		t.Fatalf("read %q", p[:n])
	}
	res.Body.Close() // must not wait for the rest
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("idle %d after an early close", n)
	}
}

// goroutines returns every goroutine's stack by its id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		out[id] = g
	}
	return out
}

// TestOpenStreamsStartNoGoroutines: an open stream costs this transport
// no goroutine (net/http's costs two: its connection's read and write
// loops). The backend's own goroutines are counted as it serves.
func TestOpenStreamsStartNoGoroutines(t *testing.T) {
	const streams = 20
	for _, tc := range []struct {
		name string
		tr   http.RoundTripper
		per  int
	}{{"upstream", &Transport{}, 0}, {"net/http", netHTTP(), 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t, func(int, *http.Request, []byte) (string, bool) {
				return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n", false
			})
			defer tc.tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			before := goroutines()
			var bodies []io.Closer
			for range streams {
				req, _ := http.NewRequest(http.MethodGet, s.url()+"/", nil)
				res, err := tc.tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, res.Body)
			}
			added := 0
			for id, stack := range goroutines() {
				if _, ok := before[id]; !ok && !strings.Contains(stack, "(*rawServer)") {
					added++
				}
			}
			for _, b := range bodies {
				b.Close()
			}
			if want := tc.per * streams; added != want {
				t.Errorf("%d open streams added %d goroutines of the transport, want %d", streams, added, want)
			}
		})
	}
}

// TestNegativeMaxIdleConnsKeepsEveryConnection: MaxIdleConns < 0 caps
// nothing: 1,100 connections to one host, each holding an answer open at
// once, all go back to the pool and carry the next round without a dial.
// The default (0) still keeps 1,024.
func TestNegativeMaxIdleConnsKeepsEveryConnection(t *testing.T) {
	const n = 1100
	for _, tc := range []struct{ max, want int }{{-1, n}, {0, defaultMaxIdle}} {
		t.Run(fmt.Sprint(tc.max), func(t *testing.T) {
			s := newRawServer(t, func(int, *http.Request, []byte) (string, bool) { return ok("x"), false })
			tr := &Transport{MaxIdleConns: tc.max, MaxIdleConnsPerHost: 2 * n}
			defer tr.CloseIdleConnections()
			round := func() {
				var open []*http.Response
				for range n {
					req, _ := http.NewRequest(http.MethodGet, s.url()+"/", nil)
					res, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					open = append(open, res) // its connection stays in use
				}
				for _, res := range open {
					if b, err := io.ReadAll(res.Body); err != nil || string(b) != "x" {
						t.Fatalf("body %q, %v", b, err)
					}
					res.Body.Close()
				}
			}
			round()
			if got := tr.IdleConns(); got != tc.want {
				t.Fatalf("%d connections idle after a round of %d at once, want %d", got, n, tc.want)
			}
			round()
			if got, want := s.accepted.Load(), int64(2*n-tc.want); got != want {
				t.Errorf("backend accepted %d connections over two rounds, want %d (the idle ones kept)", got, want)
			}
		})
	}
}

// TestNetHTTPFromSettings: the net/http transport that carries https is
// made from the Transport's own settings (its pool with net/http's "no
// cap" for a negative MaxIdleConns, its buffers, its dialer), never via a
// proxy from the environment and without transparent compression.
func TestNetHTTPFromSettings(t *testing.T) {
	dialed := 0
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed++
		return nil, errors.New("refused")
	}
	for _, tc := range []struct {
		tr                  *Transport
		maxIdle, maxPerHost int
	}{
		{&Transport{}, 1024, 256},
		{&Transport{MaxIdleConns: -1, MaxIdleConnsPerHost: 2}, 0, 2},
		{&Transport{MaxIdleConns: 10, MaxIdleConnsPerHost: 3}, 10, 3},
	} {
		tc.tr.DialContext, tc.tr.ReadBufferSize, tc.tr.WriteBufferSize = dial, 16<<10, 8<<10
		nt := tc.tr.NetHTTP()
		if nt != tc.tr.NetHTTP() {
			t.Fatal("NetHTTP made twice")
		}
		if nt.Proxy != nil || !nt.DisableCompression || nt.MaxIdleConns != tc.maxIdle || nt.MaxIdleConnsPerHost != tc.maxPerHost ||
			nt.IdleConnTimeout != 90*time.Second || nt.ReadBufferSize != 16<<10 || nt.WriteBufferSize != 8<<10 {
			t.Errorf("%+v: net/http transport %+v", tc.tr, nt)
		}
		before := dialed
		req, _ := http.NewRequest(http.MethodGet, "https://backend.example:8443/v1/models", nil)
		if _, err := tc.tr.RoundTrip(req); err == nil || dialed != before+1 {
			t.Errorf("https request: err %v, dialed %d times through the Transport's dialer", err, dialed-before)
		}
		tc.tr.CloseIdleConnections()
	}
}
