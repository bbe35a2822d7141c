package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/quota"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// fakeBackend is a hand-written stand-in for vLLM used where a test needs
// exact control of the bytes a backend sends; end-to-end tests use the real
// simulator (package sim) instead.
type fakeBackend struct {
	*httptest.Server
	mu       sync.Mutex
	health   int
	received []*http.Request
	bodies   [][]byte
	// forget: keep nothing of what is received (a benchmark's backend,
	// whose heap must not grow with its iterations).
	forget bool
}

// newFakeBackend serves model as vLLM would its probes, and h the rest;
// a benchmark's keeps nothing of what it receives.
func newFakeBackend(t testing.TB, model string, h http.HandlerFunc) *fakeBackend {
	t.Helper()
	_, bench := t.(*testing.B)
	fb := &fakeBackend{health: http.StatusOK, forget: bench}
	fb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			fb.mu.Lock()
			code := fb.health
			fb.mu.Unlock()
			w.WriteHeader(code)
			return
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"`+model+`","object":"model","created":1700000000,"owned_by":"vllm","max_model_len":2048}]}`)
			return
		case "/version":
			io.WriteString(w, `{"version":"fake"}`)
			return
		}
		switch r.Header.Get(fleet.ProbeHeader) {
		case "":
		case "tokenize":
			http.NotFound(w, r) // no warm-up tokenizer probe: nothing to compare
			return
		case "tokenize-check":
		default:
			io.WriteString(w, `{"choices":[{"text":"x"}]}`) // the warm-up generation
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !fb.forget {
			fb.mu.Lock()
			fb.received = append(fb.received, r.Clone(context.Background()))
			fb.bodies = append(fb.bodies, body)
			fb.mu.Unlock()
		}
		h(w, r)
	}))
	t.Cleanup(fb.Close)
	return fb
}

func (fb *fakeBackend) setHealth(code int) {
	fb.mu.Lock()
	fb.health = code
	fb.mu.Unlock()
}

func (fb *fakeBackend) requests() ([]*http.Request, [][]byte) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]*http.Request(nil), fb.received...), append([][]byte(nil), fb.bodies...)
}

type testGateway struct {
	*Gateway
	URL    string
	Fleet  *fleet.Fleet
	client *http.Client
	reg    *prometheus.Registry
	srv    *httptest.Server
}

// quiesce waits for every request the test sent to finish in its handler
// (httptest.Server.Close blocks on them) and then for the gateway's
// background work, so what those requests left behind can be read from
// tg.reg without racing them. The HTTP side is closed afterwards.
func (tg *testGateway) quiesce() {
	tg.srv.Close()
	tg.Gateway.Close()
}

// gathered renders tg.reg in the text exposition format, without HTTP.
func (tg *testGateway) gathered(t *testing.T) string {
	t.Helper()
	mfs, err := tg.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// startGateway serves a gateway for model "m" in front of the given backend
// URLs, probes them once and marks the gateway ready.
func startGateway(t *testing.T, mutate func(*config.Config), backends ...string) *testGateway {
	t.Helper()
	return startGatewayToks(t, nil, mutate, backends...)
}

// startGatewayToks is startGateway with tokenizers for model "m".
func startGatewayToks(t *testing.T, tok *tokenize.Model, mutate func(*config.Config), backends ...string) *testGateway {
	t.Helper()
	return startGatewayFull(t, tok, extras{}, mutate, backends...)
}

// extras are the parts startGatewayFull otherwise defaults.
type extras struct {
	triage *triage.Engine // nil: the default engine
	log    *zap.Logger    // nil: the test's log at warn level
	// quotaClock is the API keys' limits clock (nil: time.Now).
	quotaClock func() time.Time
	// quota is the keys' quota store (nil: an in-process one).
	quota  quota.Store
	tracer *telemetry.Provider // nil: tracing off
	// responses is the replicas' record of response owners (nil: none).
	responses admission.ResponseOwners
	// queueClock is the admission pools' clock (nil: time.Now).
	queueClock func() time.Time
}

// startGatewayFull also takes the triage engine and the logger.
func startGatewayFull(t *testing.T, tok *tokenize.Model, ex extras, mutate func(*config.Config), backends ...string) *testGateway {
	t.Helper()
	cfg := config.Default()
	mc := config.ModelConfig{Name: "m"}
	for _, u := range backends {
		mc.Backends = append(mc.Backends, config.BackendConfig{URL: u})
	}
	cfg.Models = []config.ModelConfig{mc}
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := ex.log
	if log == nil {
		log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	tr := NewTransport(cfg)
	t.Cleanup(tr.CloseIdleConnections)
	var counters map[string]fleet.PromptCounter
	if tok != nil {
		counters = PromptCounters(map[string]*tokenize.Model{"m": tok})
	}
	fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: tr}, log, counters)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := Options{Config: cfg, Fleet: fl, Logger: log, Registry: reg, Transport: tr, Triage: ex.triage, QuotaClock: ex.quotaClock, QueueClock: ex.queueClock, Quota: ex.quota, Tracing: ex.tracer,
		ResponseOwners: ex.responses}
	if tok != nil {
		opts.Tokenizers = map[string]*tokenize.Model{"m": tok}
	}
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	fl.ProbeAll(context.Background())
	g.SetPhase(Serving)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	ctr := &http.Transport{}
	t.Cleanup(ctr.CloseIdleConnections)
	return &testGateway{Gateway: g, URL: srv.URL, Fleet: fl, client: &http.Client{Transport: ctr, Timeout: 30 * time.Second}, reg: reg, srv: srv}
}

func (tg *testGateway) post(t *testing.T, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tg.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readBodyT(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// scrapeOnce reads every backend's /metrics once and feeds the pools, as
// the scraper does every scrape_interval.
func (tg *testGateway) scrapeOnce(t *testing.T) {
	t.Helper()
	for _, m := range tg.Fleet.Models() {
		for _, b := range m.Backends() {
			g, err := tg.Fleet.Scrape(t.Context(), b)
			if err != nil {
				t.Fatalf("scrape %s: %v", b.URL, err)
			}
			tg.ObserveScrape(m, b, g, nil)
		}
	}
}

func httptestServer(t *testing.T, s interface {
	Handler() http.Handler
	Close()
}) string {
	t.Helper()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	return srv.URL
}
