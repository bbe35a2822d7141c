package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// maxBodyBytes bounds a request body; larger bodies get 413.
const maxBodyBytes = 64 << 20

// receivedCap is how many requests Received keeps.
const receivedCap = 1000

// Server is a simulated vLLM OpenAI-compatible server. It is safe for
// concurrent use; knobs change at runtime through Update or POST /sim/config.
type Server struct {
	log     *zap.Logger
	m       *metrics
	handler http.Handler
	created int64 // /v1/models "created"

	mu      sync.Mutex // guards cfg, the scheduler and counters
	cfg     Config
	running int       // admitted requests
	kvUsed  int       // prompt + generated tokens of admitted requests
	queue   []*ticket // FIFO waiting requests
	counts  Stats     // Running and Waiting unused here

	recvMu   sync.Mutex
	recv     []Received // ring of the last receivedCap requests
	recvNext int

	stop     chan struct{} // closed by Close / shutdown: abort everything
	stopOnce sync.Once
	draining atomic.Bool // /health answers 503
	ran      atomic.Bool

	// listen is net.Listen; tests substitute an in-memory network.
	listen func(network, addr string) (net.Listener, error)

	// resp holds the stored Responses API objects (responses.go).
	resp responseStore

	// cache is the prefix cache (prefix_cache.go), nil without
	// PrefixCaching; kv publishes its events (kv_events.go), nil without
	// KVEvents; kvErr is why KVEvents could not be set up.
	cache *prefixCache
	kv    *kvPublisher
	kvErr error

	// prefillEng is the prefill compute PrefillContention shares
	// (prefill.go).
	prefillEng prefillEngine
}

// Stats are the simulator's request counters.
type Stats struct {
	// Requests counts POST requests to the engine routes, whatever their
	// outcome: generation (/v1/chat/completions, /v1/completions,
	// /v1/responses, /v1/messages, /v1/audio/transcriptions and
	// /v1/audio/translations) and pooling (/v1/embeddings, /pooling,
	// /classify, score and rerank), and /invocations.
	Requests int `json:"requests"`
	// Completed counts generations answered in full (stop or length) and
	// pooling requests answered.
	Completed int `json:"completed"`
	// Aborted counts requests whose client went away before the answer was
	// complete, in any phase (hanging, waiting, prefill, decode, writing).
	Aborted int `json:"aborted"`
	// Rejected counts engine requests answered with a 4xx status
	// (auth, validation, unknown model, context length, 4xx FailStatus).
	Rejected int `json:"rejected"`
	// Failed counts engine requests answered with a 5xx status
	// (FailStatus, or aborted by shutdown/Close).
	Failed int `json:"failed"`
	// Cut counts streams cut on purpose by CutAfterChunks.
	Cut int `json:"cut"`
	// Cancelled counts background Responses stopped by
	// POST /v1/responses/{id}/cancel.
	Cancelled int `json:"cancelled"`
	// StoredResponses is how many Responses API objects this server holds
	// (GET /v1/responses/{id} finds them here and nowhere else).
	StoredResponses int `json:"stored_responses"`
	// Running and Waiting are the current scheduler gauges.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// PeakRunning is the most requests (sequences) running at once since
	// the server started: what a gateway's max_in_flight let through.
	PeakRunning int `json:"peak_running"`
	// TokensInFlight is the prompt and generated tokens of the running
	// requests (the KV space the scheduler counts as used).
	TokensInFlight int `json:"tokens_in_flight"`
	// PrefixQueries and PrefixHits are the prompt tokens looked up in the
	// prefix cache and those found (vllm:prefix_cache_queries_total and
	// _hits_total); 0 without PrefixCaching.
	PrefixQueries int `json:"prefix_cache_queries"`
	PrefixHits    int `json:"prefix_cache_hits"`
}

// Received is one request seen on /v1/*, POST /tokenize or one of the
// routes of routes_pooling.go outside /v1 (/detokenize, /pooling,
// /classify, /score, /rerank, /v2/rerank).
type Received struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// Trace is the W3C trace context the request carried (traceparent,
	// tracestate), parsed as vLLM parses it.
	Trace TraceContext
}

// New returns a simulator; a nil log means zap.NewNop().
func New(cfg Config, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	cfg.LoRAModules = slices.Clone(cfg.LoRAModules) // the server's own: load and unload replace it
	s := &Server{
		log:     log,
		cfg:     cfg,
		created: time.Now().Unix(),
		stop:    make(chan struct{}),
		listen:  net.Listen,
	}
	if cfg.PrefixCaching {
		s.cache = newPrefixCache(cfg.HashSeed)
	}
	if cfg.KVEvents != nil {
		if s.cache == nil {
			s.kvErr = errors.New("sim: KVEvents needs PrefixCaching")
		} else {
			s.kv, s.kvErr = newKVPublisher(*cfg.KVEvents, cfg.Clock, log)
		}
	}
	s.m = newMetrics(s, cfg.Model, cfg.MaxModelLen, cfg.PrefixCaching)
	s.handler = http.HandlerFunc(s.serveHTTP)
	return s
}

// Handler returns the full vLLM HTTP surface plus /sim/*, for
// httptest.NewServer or a custom http.Server.
func (s *Server) Handler() http.Handler { return s.handler }

// Config returns the current knobs (defaults applied).
func (s *Server) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Update changes knobs at runtime. fn runs with the server's lock held and
// must not call the Server. Requests already running keep the timing and
// fault knobs they started with; MaxNumSeqs and KVTokens apply to the
// waiting queue at once. The knobs fixed at New (BlockSize, PrefixCaching,
// HashSeed, KVEvents) keep their values.
func (s *Server) Update(fn func(*Config)) {
	s.mu.Lock()
	c := s.cfg
	fn(&c)
	c.BlockSize, c.PrefixCaching, c.HashSeed, c.KVEvents = s.cfg.BlockSize, s.cfg.PrefixCaching, s.cfg.HashSeed, s.cfg.KVEvents
	s.cfg = c.withDefaults()
	s.scheduleLocked()
	model := s.cfg.Model
	s.mu.Unlock()
	s.m.touch(model)
}

// Stats returns a snapshot of the counters and gauges.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.counts
	st.Running = s.running
	st.Waiting = len(s.queue)
	st.TokensInFlight = s.kvUsed
	st.StoredResponses = s.resp.len()
	return st
}

// Received returns copies of the last (up to 1000) requests seen on the
// routes Received describes, oldest first, including ones rejected by
// authorization.
func (s *Server) Received() []Received {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	out := make([]Received, 0, len(s.recv))
	n := len(s.recv)
	start := 0
	if n == receivedCap {
		start = s.recvNext
	}
	for i := range n {
		r := s.recv[(start+i)%n]
		out = append(out, Received{
			Method: r.Method, Path: r.Path, Header: r.Header.Clone(),
			Body: append([]byte(nil), r.Body...), Trace: r.Trace,
		})
	}
	return out
}

func (s *Server) record(r *http.Request, body []byte) {
	rec := Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: append([]byte(nil), body...),
		Trace: ParseTraceContext(r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))}
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	if len(s.recv) < receivedCap {
		s.recv = append(s.recv, rec)
		return
	}
	s.recv[s.recvNext] = rec
	s.recvNext = (s.recvNext + 1) % receivedCap
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.counts)
	s.mu.Unlock()
}

// Close aborts every in-flight, waiting and hanging request the way a vLLM
// shutdown does, makes /health answer 503 and answers later completion
// requests 503. Use it before httptest.Server.Close when requests may still
// be running. Run calls it itself.
func (s *Server) Close() {
	s.draining.Store(true)
	s.stopOnce.Do(func() {
		close(s.stop)
		if s.kv != nil {
			s.kv.close()
		}
	})
}

func (s *Server) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Run sleeps LoadTime (returning nil if ctx ends first), then listens on
// addr, calls ready with the bound address and serves until ctx ends. It
// then stops listening, lets in-flight requests run for ShutdownTimeout,
// aborts the rest (see Config.ShutdownTimeout) and returns nil once every
// handler has returned. Run may be called once.
func (s *Server) Run(ctx context.Context, addr string, ready func(net.Addr)) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("sim: Run called twice")
	}
	cfg := s.Config()
	s.log.Info("sim loading model", zap.String("model", cfg.Model), zap.Duration("load_time", cfg.LoadTime))
	if err := sleepCtx(ctx, cfg.LoadTime); err != nil {
		return nil
	}
	// vLLM's engine opens its KV events sockets before the API server
	// listens.
	if err := s.StartKVEvents(); err != nil {
		s.Close()
		return err
	}
	ln, err := s.listen("tcp", addr)
	if err != nil {
		if s.kv != nil {
			s.kv.close()
		}
		return fmt.Errorf("sim: listen: %w", err)
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	s.log.Info("sim listening", zap.String("addr", ln.Addr().String()))
	if ready != nil {
		ready(ln.Addr())
	}
	select {
	case err := <-serveErr:
		return fmt.Errorf("sim: serve: %w", err)
	case <-ctx.Done():
	}

	s.draining.Store(true)
	timeout := s.Config().ShutdownTimeout
	s.log.Info("sim shutting down", zap.Duration("shutdown_timeout", timeout))
	shutCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shutDone := make(chan error, 1)
	go func() { shutDone <- hs.Shutdown(shutCtx) }()
	if timeout <= 0 {
		s.Close()
	} else {
		t := time.NewTimer(timeout)
		select {
		case <-shutDone:
			t.Stop()
			<-serveErr
			s.Close()
			return nil
		case <-t.C:
			s.Close()
		}
	}
	// Aborted handlers return promptly; a client that does not read its
	// socket could still block a write, so force-close after a grace period.
	hard := time.NewTimer(5 * time.Second)
	defer hard.Stop()
	select {
	case <-shutDone:
	case <-hard.C:
		cancel()
		<-shutDone
		_ = hs.Close()
	}
	<-serveErr
	return nil
}

var (
	errClientGone = errors.New("client went away")
	errStopped    = errors.New("server shutting down")
)

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait sleeps d and then, if gate is set, waits for a value from it. It
// fails with errClientGone when ctx ends and errStopped on shutdown.
func (s *Server) wait(ctx context.Context, d time.Duration, gate <-chan struct{}) error {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return errClientGone
		case <-s.stop:
			return errStopped
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return errClientGone
		case <-s.stop:
			return errStopped
		}
	}
	select {
	case <-ctx.Done():
		return errClientGone
	case <-s.stop:
		return errStopped
	default:
		return nil
	}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serveHTTP routes like vLLM's FastAPI app: the auth middleware first (for
// /v1*), then the routes; unknown paths get vLLM's HTTPException envelope.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if strings.HasPrefix(path, "/v1") {
		s.serveV1(w, r)
		return
	}
	switch path {
	case "/health":
		if !allow(w, r, http.MethodGet) {
			return
		}
		s.health(w)
	case "/ping":
		if !allow(w, r, http.MethodGet, http.MethodPost) {
			return
		}
		s.health(w)
	case "/version":
		if !allow(w, r, http.MethodGet) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"version": s.Config().Version})
	case "/metrics":
		if !allow(w, r, http.MethodGet) {
			return
		}
		promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	case "/tokenize":
		if !allow(w, r, http.MethodPost) {
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.record(r, body)
		s.tokenize(w, r, body)
	case "/invocations":
		s.invocations(w, r)
	case "/sim/config":
		if !allow(w, r, http.MethodGet, http.MethodPost) {
			return
		}
		s.simConfig(w, r)
	case "/reset_prefix_cache":
		s.resetPrefixCache(w, r)
	case "/sim/stats":
		if !allow(w, r, http.MethodGet) {
			return
		}
		writeJSON(w, http.StatusOK, s.Stats())
	default:
		if !s.serveMore(w, r) {
			writeAPIError(w, httpError(http.StatusNotFound, ""))
		}
	}
}

func (s *Server) serveV1(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if isAudioPath(path) { // the upload is streamed, never held (audio.go)
		s.serveAudio(w, r)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	s.record(r, body)
	gen := engineRoute(path) || isGenPath(path)
	if gen && r.Method == http.MethodPost {
		s.count(func(st *Stats) { st.Requests++ })
	}
	cfg := s.Config()
	// vLLM's AuthenticationMiddleware: exact header match, OPTIONS exempt.
	if cfg.APIKey != "" && r.Method != http.MethodOptions &&
		r.Header.Get("Authorization") != "Bearer "+cfg.APIKey {
		if gen && r.Method == http.MethodPost {
			s.count(func(st *Stats) { st.Rejected++ })
		}
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
		return
	}
	if s.serveAPIs(w, r, body) { // Responses and Messages (responses.go, messages.go)
		return
	}
	if s.serveLoRA(w, r, body, cfg) { // runtime LoRA loading (lora.go)
		return
	}
	switch path {
	case "/v1/models":
		if !allow(w, r, http.MethodGet) {
			return
		}
		s.models(w, cfg)
	case "/v1/chat/completions":
		if !allow(w, r, http.MethodPost) {
			return
		}
		s.generate(w, r, body, kindChat)
	case "/v1/completions":
		if !allow(w, r, http.MethodPost) {
			return
		}
		s.generate(w, r, body, kindCompletion)
	default:
		if !s.serveMoreV1(w, r, body) {
			writeAPIError(w, httpError(http.StatusNotFound, ""))
		}
	}
}

// allow answers 405 (with Allow) unless r uses one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeAPIError(w, httpError(http.StatusMethodNotAllowed, ""))
	return false
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeAPIError(w, httpError(http.StatusRequestEntityTooLarge, ""))
		} else {
			writeAPIError(w, httpError(http.StatusBadRequest, "error reading request body"))
		}
		return nil, false
	}
	return b, true
}

func (s *Server) health(w http.ResponseWriter) {
	if s.Config().FailHealth || s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen *int              `json:"max_model_len"` // null for a LoRA adapter
	Permission  []modelPermission `json:"permission"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

func (s *Server) models(w http.ResponseWriter, cfg Config) {
	root := cfg.Root
	if root == "" {
		root = cfg.Model
	}
	perm := func() []modelPermission {
		return []modelPermission{{
			ID: "modelperm-" + randomID(), Object: "model_permission", Created: s.created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}}
	}
	mml := cfg.MaxModelLen
	cards := []modelCard{{
		ID: cfg.Model, Object: "model", Created: s.created, OwnedBy: "vllm",
		Root: root, MaxModelLen: &mml, Permission: perm(),
	}}
	// vLLM's LoRA cards: root the adapter's path, parent the base model,
	// max_model_len null.
	for _, l := range cfg.LoRAModules {
		cards = append(cards, modelCard{ID: l.Name, Object: "model", Created: s.created, OwnedBy: "vllm",
			Root: l.Path, Parent: &cfg.Model, Permission: perm()})
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: cards})
}

func (s *Server) simConfig(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		k, err := decodeKnobs(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		s.Update(k.apply)
		if k.Preempt != nil {
			s.Preempt(*k.Preempt)
		}
		s.log.Info("sim config updated", zap.Any("config", viewOf(s.Config())))
	}
	writeJSON(w, http.StatusOK, viewOf(s.Config()))
}

// Preempt counts n preemptions in vllm:num_preemptions_total, as vLLM does
// when the KV cache runs out and it evicts running sequences. The simulator
// does not model the eviction itself; this lets tests and demos show the
// symptom.
func (s *Server) Preempt(n int) {
	if n > 0 {
		s.m.preemptions.WithLabelValues(s.Config().Model, "0").Add(float64(n))
	}
}
