package gateway

// HTTP/2 cleartext with prior knowledge (h2c: true): the gateway's own
// Serve on a loopback port, the simulator as a real server, and clients
// speaking h2c (net/http's Transport with Protocols UnencryptedHTTP2 alone,
// and the OpenAI SDK on it). What the edge does over HTTP/1.1 holds per
// HTTP/2 stream; HTTP/1.1 clients on the same listener are served as
// before.

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// h2cClient speaks HTTP/2 cleartext with prior knowledge only: it never
// falls back to HTTP/1.1, so a gateway without h2c fails its requests.
func h2cClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// serveH2C serves the gateway with h2c on in front of backend (the URL of
// a running server) and returns it, its client switched to h2c, once the
// backend is ready.
func serveH2C(t testing.TB, backend string, mutate func(*config.Config)) *served {
	t.Helper()
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.H2C = true
	cfg.DrainTimeout = config.Duration(time.Second) // a failed test's streams end at once
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: backend}}}}
	if mutate != nil {
		mutate(&cfg)
	}
	s := serveGateway(t, cfg, nil)
	s.client = h2cClient(t)
	eventually(t, "ready", func() bool { code, _ := s.readyz(t); return code == 200 })
	return s
}

// h2cSim is a simulator for model m behind an h2c gateway; gate, when not
// nil, holds each token back once the warm-up is done.
func h2cSim(t *testing.T, sc sim.Config, gate chan struct{}) (*sim.Server, *served) {
	t.Helper()
	sc.Model = "m"
	s := sim.New(sc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	gw := serveH2C(t, srv.URL, nil)
	warmupDone(t, s)
	if gate != nil {
		s.Update(func(c *sim.Config) { c.TokenGate = gate })
	}
	return s, gw
}

// protoSeen is an SDK middleware that records each answer's protocol and
// Server-Timing header.
// Read its fields once the requests are done.
type protoSeen struct {
	mu     sync.Mutex
	major  int
	timing string
}

func (p *protoSeen) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	res, err := next(req)
	if res != nil {
		p.mu.Lock()
		p.major, p.timing = res.ProtoMajor, res.Header.Get("Server-Timing")
		p.mu.Unlock()
	}
	return res, err
}

func h2cSDK(s *served, seen *protoSeen) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.url+"/v1/"), option.WithAPIKey("client-secret"),
		option.WithHTTPClient(s.client), option.WithMaxRetries(0), option.WithMiddleware(seen.middleware))
}

// sdkChunks opens an SDK stream (in its own goroutine: the SDK returns
// once the answer's headers came) and reads its chunks into a channel,
// then its error.
func sdkChunks(open func() *ssestream.Stream[openai.ChatCompletionChunk]) (<-chan openai.ChatCompletionChunk, <-chan error) {
	ch := make(chan openai.ChatCompletionChunk, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		stream := open()
		for stream.Next() {
			ch <- stream.Current()
		}
		errc <- stream.Err()
	}()
	return ch, errc
}

// release lets the simulator make one token.
func release(t *testing.T, gate chan<- struct{}) {
	t.Helper()
	select {
	case gate <- struct{}{}:
	case <-time.After(30 * time.Second):
		t.Fatal("the simulator did not ask for its next token")
	}
}

// nextContent waits for the next chunk that carries content; a stream the
// gateway held back instead of flushing each event fails the test (the
// simulator sends no next token before the test releases it).
func nextContent(t *testing.T, ch <-chan openai.ChatCompletionChunk) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("the stream ended before the event")
			}
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				return c.Choices[0].Delta.Content
			}
		case <-timeout:
			t.Fatal("a token the backend sent did not reach the client: not flushed")
		}
	}
}

// TestH2CStreamedChatFlushesEachEvent: a streamed chat over h2c through
// the SDK; each token reaches the client before the backend makes the
// next (the simulator's gate), the stream ends cleanly, over HTTP/2, with
// Server-Timing.
func TestH2CStreamedChatFlushesEachEvent(t *testing.T) {
	gate := make(chan struct{})
	_, s := h2cSim(t, sim.Config{OutputTokens: 3}, gate)
	var seen protoSeen
	p := chatParams(3)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	sdk := h2cSDK(s, &seen)
	ch, errc := sdkChunks(func() *ssestream.Stream[openai.ChatCompletionChunk] {
		return sdk.Chat.Completions.NewStreaming(t.Context(), p)
	})
	var text strings.Builder
	for range 3 {
		release(t, gate)
		text.WriteString(nextContent(t, ch))
	}
	var usage int64
	for c := range ch {
		usage = max(usage, c.Usage.CompletionTokens)
	}
	if err := <-errc; err != nil {
		t.Fatalf("stream: %v", err)
	}
	if seen.major != 2 || !strings.Contains(seen.timing, "door") {
		t.Fatalf("answered over HTTP/%d with Server-Timing %q, want 2 and the door's phase", seen.major, seen.timing)
	}
	if text.Len() == 0 || usage != 3 {
		t.Errorf("content %q, completion tokens %d", text.String(), usage)
	}
}

// TestH2CClientLeavingCancelsBackend: a client that resets its stream
// mid-answer cancels the backend request (the simulator counts the
// abort); another stream on the same connection runs on to [DONE].
func TestH2CClientLeavingCancelsBackend(t *testing.T) {
	gate := make(chan struct{})
	backend, s := h2cSim(t, sim.Config{OutputTokens: 2}, gate)
	var seen protoSeen
	sdk := h2cSDK(s, &seen)
	leaving, leave := context.WithCancel(t.Context())
	defer leave()
	chA, errA := sdkChunks(func() *ssestream.Stream[openai.ChatCompletionChunk] {
		return sdk.Chat.Completions.NewStreaming(leaving, chatParams(2))
	})
	chB, errB := sdkChunks(func() *ssestream.Stream[openai.ChatCompletionChunk] {
		return sdk.Chat.Completions.NewStreaming(t.Context(), chatParams(2))
	})
	eventually(t, "both streams to run in the simulator", func() bool { return backend.Stats().Running == 2 })
	release(t, gate)
	release(t, gate) // one token each
	nextContent(t, chA)
	nextContent(t, chB)
	leave() // RST_STREAM for A; the connection stays
	eventually(t, "the simulator to count the abort", func() bool { return backend.Stats().Aborted == 1 })
	for range chA {
	}
	if err := <-errA; err == nil {
		t.Errorf("the stream the client left ended cleanly")
	}
	release(t, gate)
	nextContent(t, chB)
	for range chB {
	}
	if err := <-errB; err != nil {
		t.Fatalf("the other stream on the connection: %v", err)
	}
	if st := backend.Stats(); st.Aborted != 1 {
		t.Errorf("simulator aborts %d, want 1", st.Aborted)
	}
}

// TestH2CErrorEnvelope: a request the door refuses, over h2c: the SDK
// reads the 4xx in OpenAI's envelope, and the backend gets nothing.
func TestH2CErrorEnvelope(t *testing.T) {
	backend, s := h2cSim(t, sim.Config{OutputTokens: 2}, nil)
	before := backend.Stats().Requests
	var seen protoSeen
	p := chatParams(2)
	p.Model = "no-such-model"
	sdk := h2cSDK(s, &seen)
	_, err := sdk.Chat.Completions.New(t.Context(), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want an API error", err)
	}
	if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != codeModelNotFound || apiErr.Type != typeInvalidRequest {
		t.Errorf("error: status %d, type %q, code %q", apiErr.StatusCode, apiErr.Type, apiErr.Code)
	}
	if seen.major != 2 {
		t.Errorf("answer over HTTP/%d", seen.major)
	}
	if n := backend.Stats().Requests; n != before {
		t.Errorf("the backend got %d requests", n-before)
	}
}

// TestH2CBackendGetsHTTP1: beside h2c the listener serves HTTP/1.1 as
// before: a request asking to upgrade to h2c is answered over HTTP/1.1,
// not upgraded, and neither it nor an HTTP/2 request brings the client's
// connection headers or HTTP/2 pseudo-headers to the backend, which is
// reached over HTTP/1.1.
func TestH2CBackendGetsHTTP1(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	})
	s := serveH2C(t, fb.URL, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`

	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1 request asking for h2c: %s %s", res.Proto, res.Status)
	}

	req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Client-Header", "kept")
	res, err = s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 request: %s %s", res.Proto, res.Status)
	}

	got, _ := fb.requests()
	if len(got) != 2 {
		t.Fatalf("backend got %d requests, want 2", len(got))
	}
	for i, r := range got {
		if r.ProtoMajor != 1 {
			t.Errorf("request %d reached the backend over %s", i, r.Proto)
		}
		for k := range r.Header {
			if strings.HasPrefix(k, ":") || slicesContainsFold([]string{"Upgrade", "Http2-Settings", "Connection", "Keep-Alive", "Te", "Trailer"}, k) {
				t.Errorf("request %d brought %s: %q to the backend", i, k, r.Header[k])
			}
		}
		if r.Host != strings.TrimPrefix(fb.URL, "http://") {
			t.Errorf("request %d: backend Host %q", i, r.Host)
		}
	}
	if got[1].Header.Get("X-Client-Header") != "kept" {
		t.Errorf("the HTTP/2 request's own header did not pass: %v", got[1].Header)
	}
}

func slicesContainsFold(list []string, s string) bool {
	for _, e := range list {
		if strings.EqualFold(e, s) {
			return true
		}
	}
	return false
}

// TestH2CDrainLetsStreamsFinish: the drain over h2c. 100 streams share one
// connection; the shutdown signal comes while they run: requests are still
// served for drain_delay, then each stream runs to [DONE] and Serve returns.
func TestH2CDrainLetsStreamsFinish(t *testing.T) {
	r := drainScenarioOver(t, true, 100, 50*time.Millisecond, 30*time.Second)
	assertDrainedCleanly(t, r)
}

// TestFramingScannerStopsAtH2CPreface: the framing check follows HTTP/1.1
// only; at HTTP/2's preface it stops, so that bytes of HTTP/2 frames never
// read as a header block framed two ways.
func TestFramingScannerStopsAtH2CPreface(t *testing.T) {
	s := newFramingScanner()
	in := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
	if k := s.feed([]byte(in)); k != 0 {
		t.Fatalf("HTTP/2 bytes read as request %d framed two ways", k)
	}
	if s.state != scanLost {
		t.Errorf("the scanner still follows the connection (state %d)", s.state)
	}
}
