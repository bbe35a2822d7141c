package gateway

// Readiness, failure and drain scenarios against real listeners: the
// gateway's Serve on a loopback port, simulators started and stopped as
// real servers. The tests await events (states, counters, stream ends);
// where a figure matters it is measured and logged, not asserted.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// served is a gateway running Serve on a real listener, its fleet probing.
type served struct {
	url    string
	gw     *Gateway
	fleet  *fleet.Fleet
	client *http.Client
	stop   context.CancelFunc // the shutdown signal
	done   chan error         // Serve's result
}

func serveGateway(t testing.TB, cfg config.Config, tok *tokenize.Model) *served {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	tr := NewTransport(cfg)
	t.Cleanup(tr.CloseIdleConnections)
	var toks map[string]*tokenize.Model
	if tok != nil {
		toks = map[string]*tokenize.Model{cfg.Models[0].Name: tok}
	}
	fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: tr}, log, PromptCounters(toks))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{Config: cfg, Fleet: fl, Logger: log, Registry: prometheus.NewRegistry(), Transport: tr, Tokenizers: toks})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { fl.RunScraper(fctx, cfg.ScrapeInterval.D(), g.ObserveScrape) })
	wg.Go(func() {
		fl.ProbeAll(fctx)
		g.SetPhase(Serving)
		fl.Run(fctx)
	})
	ctx, stop := context.WithCancel(context.Background())
	s := &served{url: "http://" + ln.Addr().String(), gw: g, fleet: fl, stop: stop, done: make(chan error, 1)}
	go func() { s.done <- g.Serve(ctx, ln) }()
	ctr := &http.Transport{MaxIdleConnsPerHost: 200}
	s.client = &http.Client{Transport: ctr}
	t.Cleanup(func() {
		stop()
		<-s.done
		stopFleet()
		wg.Wait()
		ctr.CloseIdleConnections()
	})
	return s
}

func (s *served) readyz(t testing.TB) (int, readyBody) {
	t.Helper()
	res, err := s.client.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rb readyBody
	json.NewDecoder(res.Body).Decode(&rb)
	return res.StatusCode, rb
}

// freePort reserves a loopback port for a backend that is not up yet.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runSim runs a simulator on addr as a real server until the returned
// stop is called; ready is closed when it listens.
func runSim(t *testing.T, s *sim.Server, addr string) (ready chan struct{}, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx, addr, func(net.Addr) { close(ready) }); err != nil {
			t.Errorf("sim on %s: %v", addr, err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ready, stop
}

func simConfig(model string) sim.Config {
	return sim.Config{Model: model, OutputTokens: 2}
}

func fastHealth(cfg *config.Config) {
	cfg.Health.Interval = config.Duration(20 * time.Millisecond)
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.DrainDelay = 0
}

func TestColdStart(t *testing.T) {
	addr := freePort(t)
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: "http://" + addr}}}}
	s := serveGateway(t, cfg, nil)

	// Loading: the backend refuses connections.
	eventually(t, "the first probe round", func() bool { return s.gw.Phase() == Serving })
	code, rb := s.readyz(t)
	if code != 503 || rb.Models[0].Backends[0].State != fleet.Loading || rb.Models[0].Backends[0].Reason != "connection refused" {
		t.Fatalf("while loading: %d %+v", code, rb)
	}
	res := postJSON(t, s, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	body := readBodyT(t, res)
	if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || !strings.Contains(body, `"code":"model_not_ready"`) || !strings.Contains(body, "loading (connection refused)") {
		t.Fatalf("request while loading: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if lz, err := s.client.Get(s.url + "/livez"); err != nil || lz.StatusCode != 200 {
		t.Fatalf("/livez while loading: %v", err)
	} else {
		lz.Body.Close()
	}

	// The backend comes up after its load time; its warm-up generation is
	// held at the token gate, so the gateway is seen warming.
	gate := make(chan struct{})
	sc := simConfig("m")
	sc.LoadTime = 200 * time.Millisecond
	sc.TokenGate = gate
	backend := sim.New(sc, zap.NewNop())
	up, _ := runSim(t, backend, addr)
	<-up
	eventually(t, "warming", func() bool {
		_, rb := s.readyz(t)
		return rb.Models[0].Backends[0].State == fleet.Warming
	})
	if code, _ := s.readyz(t); code != 503 {
		t.Fatalf("ready while warming: %d", code)
	}
	warmedAt := time.Now()
	// The warm-up's tokens: fleet.WarmupTokens, with ignore_eos.
	for range fleet.WarmupTokens {
		gate <- struct{}{}
	}
	eventually(t, "ready", func() bool { code, _ := s.readyz(t); return code == 200 })
	t.Logf("ready %s after the warm-up tokens (probe interval %s)", time.Since(warmedAt), cfg.Health.Interval.D())
	backend.Update(func(c *sim.Config) { c.TokenGate = nil })

	res = postJSON(t, s, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if body := readBodyT(t, res); res.StatusCode != 200 {
		t.Fatalf("after warm-up: %d %s", res.StatusCode, body)
	}
	var gens []sim.Received
	for _, r := range backend.Received() {
		if strings.HasSuffix(r.Path, "completions") {
			gens = append(gens, r)
		}
	}
	if len(gens) != 2 || gens[0].Header.Get(fleet.ProbeHeader) == "" || gens[1].Header.Get(fleet.ProbeHeader) != "" {
		t.Errorf("want the warm-up generation, then the client's; got %d generation requests", len(gens))
	}
}

func postJSON(t *testing.T, s *served, path, body string) *http.Response {
	t.Helper()
	res, err := s.client.Post(s.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTokenizerMismatchKeepsBackendUnready(t *testing.T) {
	// The simulator counts with its approximate counter, the gateway with
	// the demo model's real tokenizer: /tokenize disagrees.
	backend := sim.New(simConfig("m"), zap.NewNop())
	addr := freePort(t)
	up, _ := runSim(t, backend, addr)
	<-up
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: "http://" + addr}}}}
	s := serveGateway(t, cfg, loadTok(t, "demo"))
	eventually(t, "the first probe round", func() bool { return s.gw.Phase() == Serving })
	code, rb := s.readyz(t)
	b := rb.Models[0].Backends[0]
	if code != 503 || b.State != fleet.Warming || !strings.HasPrefix(b.Reason, fleet.ReasonTokenizer) {
		t.Fatalf("readyz %d %+v", code, b)
	}
	t.Logf("reason: %s", b.Reason)
}

func TestMaxModelLenMismatchKeepsBackendUnready(t *testing.T) {
	sc := simConfig("m")
	sc.MaxModelLen = 2048
	backend := sim.New(sc, zap.NewNop())
	addr := freePort(t)
	up, _ := runSim(t, backend, addr)
	<-up
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.Models = []config.ModelConfig{{Name: "m", MaxModelLen: 4096, Backends: []config.BackendConfig{{URL: "http://" + addr}}}}
	s := serveGateway(t, cfg, nil)
	eventually(t, "the first probe round", func() bool { return s.gw.Phase() == Serving })
	_, rb := s.readyz(t)
	if b := rb.Models[0].Backends[0]; b.State != fleet.Warming || !strings.HasPrefix(b.Reason, fleet.ReasonMaxModelLen) {
		t.Fatalf("%+v", b)
	}
}

func TestKilledBackendTrafficMovesAndReturns(t *testing.T) {
	addrs := []string{freePort(t), freePort(t)}
	sims := []*sim.Server{sim.New(simConfig("m"), zap.NewNop()), sim.New(simConfig("m"), zap.NewNop())}
	stops := make([]func(), 2)
	for i := range sims {
		up, stop := runSim(t, sims[i], addrs[i])
		<-up
		stops[i] = stop
	}
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.Health.Interval = config.Duration(time.Hour) // failures come from real requests and explicit probes
	cfg.Models = []config.ModelConfig{{Name: "m", MinReady: 2, Backends: []config.BackendConfig{{URL: "http://" + addrs[0]}, {URL: "http://" + addrs[1]}}}}
	s := serveGateway(t, cfg, nil)
	eventually(t, "ready", func() bool { code, _ := s.readyz(t); return code == 200 })

	stops[0]() // kill backend 0
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	// Every request succeeds: those that found the dead backend (a refused
	// connection, or a pooled one it closed when it stopped) are retried
	// on the live one, and its connection failures take it out of
	// rotation. Which requests find it is the picker's choice, so send
	// until it is out (at least 10).
	dead := s.fleet.Models()[0].Backends()[0]
	for i := 0; i < 10 || dead.Ready(); i++ {
		if i == 500 {
			t.Fatalf("500 requests and the dead backend is still ready: %+v", dead.Status())
		}
		res := postJSON(t, s, "/v1/chat/completions", chat)
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("request %d while a backend is dead: %d %s", i, res.StatusCode, body)
		}
	}
	if code, rb := s.readyz(t); code != 503 || rb.Models[0].NReady != 1 {
		t.Fatalf("min_ready 2 with one backend: %d %+v", code, rb.Models[0])
	}
	// Restarted on the same address: it warms up and is ready again.
	back := sim.New(simConfig("m"), zap.NewNop())
	up, _ := runSim(t, back, addrs[0])
	<-up
	s.fleet.ProbeAll(t.Context())
	if code, rb := s.readyz(t); code != 200 {
		t.Fatalf("after restart: %d %+v", code, rb)
	}
}

// streamEnd is the last line openStream delivers: how the body ended.
func streamEnd(err error) string {
	if err != nil {
		return "(end: " + err.Error() + ")"
	}
	return "(end: clean)"
}

// stream opens a chat stream and returns its lines as they come, then
// streamEnd of how the body ended.
func openStream(t *testing.T, s *served, maxTokens int) (events <-chan string, status int) {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":` + strconv.Itoa(maxTokens) + `}`
	res := postJSON(t, s, "/v1/chat/completions", body)
	ch := make(chan string, 512)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				ch <- line
			}
		}
		ch <- streamEnd(sc.Err())
	}()
	return ch, res.StatusCode
}

type drainResult struct {
	streams     [][]string
	readyzAfter time.Duration
	serveTook   time.Duration
	// duringDelay is the answer to a request sent after the signal, while
	// drain_delay still serves.
	duringDelay int
	// nonStreaming is the status of a non-streaming request in flight.
	nonStreaming int
	backend      *sim.Server
}

// drainDelay is the drain scenario's drain_delay.
const drainDelay = 3 * time.Second

func drainScenario(t *testing.T, streamTokens int, itl, drainTimeout time.Duration) drainResult {
	t.Helper()
	return drainScenarioOver(t, false, streamTokens, itl, drainTimeout)
}

// drainScenarioOver is drainScenario with its clients speaking h2c (the
// gateway's h2c on) when h2c is set: every stream on one connection.
func drainScenarioOver(t *testing.T, h2c bool, streamTokens int, itl, drainTimeout time.Duration) drainResult {
	t.Helper()
	sc := simConfig("m")
	sc.ITL = itl
	sc.OutputTokens = streamTokens
	backend := sim.New(sc, zap.NewNop())
	addr := freePort(t)
	up, _ := runSim(t, backend, addr)
	<-up
	cfg := config.Default()
	fastHealth(&cfg)
	// drain_delay must outlast the test's own steps after the signal (a
	// readyz poll, then one request) on a loaded machine: 3 s, not the
	// production-like 200 ms, which a busy CI box overran.
	cfg.DrainDelay = config.Duration(drainDelay)
	cfg.DrainTimeout = config.Duration(drainTimeout)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: "http://" + addr}}}}
	cfg.H2C = h2c
	s := serveGateway(t, cfg, nil)
	if h2c {
		s.client = h2cClient(t)
	}
	eventually(t, "ready", func() bool { code, _ := s.readyz(t); return code == 200 })

	const n = 100
	received := backend.Stats().Requests // the warm-up generation
	streams := make([]<-chan string, n)
	for i := range n {
		ch, status := openStream(t, s, streamTokens)
		if status != 200 {
			t.Fatalf("stream %d: status %d", i, status)
		}
		streams[i] = ch
	}
	for i := range n {
		<-streams[i] // every stream has its first event: all are in flight
	}
	// One non-streaming request as long as the streams.
	nonStreaming := make(chan int, 1)
	go func() {
		res, err := s.client.Post(s.url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":`+strconv.Itoa(streamTokens)+`}`))
		if err != nil {
			nonStreaming <- 0
			return
		}
		res.Body.Close()
		nonStreaming <- res.StatusCode
	}()
	// Received, not running: on a loaded machine the first streams may end
	// before the last one opens.
	eventually(t, "the non-streaming request to reach the backend", func() bool { return backend.Stats().Requests == received+n+1 })
	var r drainResult
	start := time.Now()
	s.stop() // SIGTERM
	eventually(t, "readyz to fail", func() bool { code, _ := s.readyz(t); return code == 503 })
	r.readyzAfter = time.Since(start)
	res := postJSON(t, s, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
	readBodyT(t, res)
	r.duringDelay = res.StatusCode
	r.streams = make([][]string, n)
	for i, ch := range streams {
		for ev := range ch {
			r.streams[i] = append(r.streams[i], ev)
		}
	}
	r.nonStreaming = <-nonStreaming
	if err := <-s.done; err != nil {
		t.Errorf("Serve returned %v after the drain", err)
	}
	s.done <- nil // for the cleanup
	r.serveTook = time.Since(start)
	r.backend = backend
	return r
}

// assertDrainedCleanly: every stream of a drain scenario ran to [DONE]
// with no error event, and the requests during drain_delay and the
// non-streaming one in flight were answered 200.
func assertDrainedCleanly(t *testing.T, r drainResult) {
	t.Helper()
	for i, evs := range r.streams {
		n := len(evs)
		if n < 2 || evs[n-2] != "data: [DONE]" || evs[n-1] != streamEnd(nil) || strings.Contains(strings.Join(evs, "\n"), `"error"`) {
			t.Fatalf("stream %d did not finish cleanly: last %q", i, evs[max(0, n-2):])
		}
	}
	if r.duringDelay != 200 || r.nonStreaming != 200 {
		t.Errorf("request during drain_delay: %d; non-streaming in flight: %d", r.duringDelay, r.nonStreaming)
	}
}

func TestDrainLetsStreamsFinish(t *testing.T) {
	// 100 streams of 5 s (100 tokens, 50 ms apart); the signal comes while
	// they run; the drain timeout is far longer.
	r := drainScenario(t, 100, 50*time.Millisecond, 30*time.Second)
	assertDrainedCleanly(t, r)
	t.Logf("readyz 503 after %s; all 100 streams ended with [DONE]; Serve returned after %s", r.readyzAfter, r.serveTook)
}

func TestDrainDeadlineEndsStreamsWithShutdownEvent(t *testing.T) {
	// 100 streams of 30 s; drain_timeout 2 s, as the issue specifies.
	const drainTimeout = 2 * time.Second
	r := drainScenario(t, 300, 100*time.Millisecond, drainTimeout)
	for i, evs := range r.streams {
		// The drain deadline's event is the stream's last: no [DONE], and
		// the body ends abortively (issue 26).
		n := len(evs)
		if n < 2 || evs[n-1] != streamEnd(io.ErrUnexpectedEOF) || !strings.Contains(evs[n-2], `"code":"server_shutting_down"`) ||
			slices.Contains(evs, "data: [DONE]") {
			t.Fatalf("stream %d: last events %q", i, evs[max(0, n-2):])
		}
		if c := strings.Count(strings.Join(evs, "\n"), `"error"`); c != 1 {
			t.Fatalf("stream %d has %d error events", i, c)
		}
	}
	if r.nonStreaming != 503 {
		t.Errorf("non-streaming request at the deadline: %d, want 503", r.nonStreaming)
	}
	eventually(t, "the simulator to count 101 aborts", func() bool { return r.backend.Stats().Aborted == 101 })
	t.Logf("readyz 503 after %s; 100 streams ended with server_shutting_down and an abortive end, the non-streaming request got 503; simulator aborts %d; Serve returned after %s (drain_delay %s + drain_timeout %s)",
		r.readyzAfter, r.backend.Stats().Aborted, r.serveTook, drainDelay, drainTimeout)
}

func TestStalledStreamEndsWithBackendStalled(t *testing.T) {
	gate := make(chan struct{})
	e := startE2E(t, sim.Config{OutputTokens: 10, TokenGate: gate},
		func(c *config.Config) { c.Models[0].StreamIdleTimeout = config.Duration(100 * time.Millisecond) })
	done := make(chan *http.Response, 1)
	go func() {
		done <- e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	}()
	gate <- struct{}{} // one token, then silence
	body := readCutBody(t, <-done)
	if n := len(sseEvents(body)); n < 2 {
		t.Fatalf("stream: %q", body)
	}
	checkBrokenStream(t, body, codeStalled)
	eventually(t, "the simulator to count the abort", func() bool { return e.sim.Stats().Aborted == 1 })
	e.gw.quiesce()
	m := e.gw.gathered(t)
	if !strings.Contains(m, `maitred_backend_errors_total{backend="`) || !strings.Contains(m, `kind="stream_stalled"`) {
		t.Errorf("no stream_stalled backend error in metrics")
	}
}

func scrape(t *testing.T, tg *testGateway) string {
	t.Helper()
	res, err := tg.client.Get(tg.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return readBodyT(t, res)
}

func TestClientClosedIsNotABackendError(t *testing.T) {
	gate := make(chan struct{})
	e := startE2E(t, sim.Config{OutputTokens: 10, TokenGate: gate}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		res, err := e.gw.client.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	gate <- struct{}{}
	cancel()
	<-errc
	eventually(t, "the abort", func() bool { return e.sim.Stats().Aborted == 1 })
	eventually(t, "the request to be logged", func() bool {
		return strings.Contains(scrape(t, e.gw), `maitred_requests_total{code="499",endpoint="/v1/chat/completions",model="m"} 1`)
	})
	if m := scrape(t, e.gw); strings.Contains(m, "maitred_backend_errors_total{") {
		t.Errorf("a client leaving was counted against the backend")
	}
	if st := e.gw.Fleet.Models()[0].Backends()[0].Status(); st.State != fleet.Ready {
		t.Errorf("backend state after a client left: %+v", st)
	}
}

// TestDrainAnswersQueuedRequestsAtOnce: requests waiting in the queue when
// the shutdown signal comes get 503 with Retry-After at once, while the one
// holding the backend finishes.
func TestDrainAnswersQueuedRequestsAtOnce(t *testing.T) {
	gate := make(chan struct{})
	sc := simConfig("m")
	backend := sim.New(sc, zap.NewNop())
	addr := freePort(t)
	up, _ := runSim(t, backend, addr)
	<-up
	cfg := config.Default()
	fastHealth(&cfg)
	cfg.DrainDelay = config.Duration(time.Second)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: "http://" + addr, MaxInFlight: 1}}}}
	s := serveGateway(t, cfg, nil)
	eventually(t, "ready", func() bool { code, _ := s.readyz(t); return code == 200 })
	warmupDone(t, backend)
	backend.Update(func(c *sim.Config) { c.TokenGate = gate })
	type answer struct {
		code  int
		retry string
		body  string
	}
	send := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			res := postJSON(t, s, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`)
			ch <- answer{res.StatusCode, res.Header.Get("Retry-After"), readBodyT(t, res)}
		}()
		return ch
	}
	holding := send()
	eventually(t, "the first request to run", func() bool { return backend.Stats().Running == 1 })
	queued := []chan answer{send(), send()}
	eventually(t, "two queued", func() bool { return s.gw.live().byName["m"].pool.Advice().Depth == 2 })
	s.stop()
	for _, q := range queued {
		a := <-q
		if a.code != 503 || a.retry == "" || !strings.Contains(a.body, "server_shutting_down") {
			t.Fatalf("queued request at shutdown: %d Retry-After=%q %s", a.code, a.retry, a.body)
		}
	}
	gate <- struct{}{}
	if a := <-holding; a.code != 200 {
		t.Fatalf("the running request: %d %s", a.code, a.body)
	}
}
