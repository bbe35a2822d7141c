package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
)

// State is where a backend stands, as seen by its probes.
type State int

const (
	// Loading: /health does not answer 200 yet (vLLM refuses connections
	// until its weights are loaded).
	Loading State = iota
	// Warming: /health answers 200; the model's listing, the warm-up
	// generation and the tokenizer probe have not all passed yet. The
	// reason says which one holds it back.
	Warming
	// Ready: requests may go here.
	Ready
	// Unhealthy: was ready, then failed unhealthy_threshold probes or
	// connections in a row.
	Unhealthy
	numStates
)

var stateNames = [...]string{"loading", "warming", "ready", "unhealthy"}

func (s State) String() string {
	if s >= 0 && s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// States lists every state, for metric labels.
func States() []State { return []State{Loading, Warming, Ready, Unhealthy} }

// MarshalText writes the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ProbeHeader marks the gateway's own probe and warm-up requests.
const ProbeHeader = "X-Maitred-Probe"

// Reasons a backend is not ready that operators and tests key on.
const (
	ReasonNotProbed        = "not probed yet"
	ReasonTokenizer        = "tokenizer_mismatch"
	ReasonMaxModelLen      = "max_model_len_mismatch"
	ReasonModelNotServed   = "model_not_served"
	ReasonWarmupFailed     = "warmup_failed"
	ReasonConnectionErrors = "connection_failures"
)

// Backend is one vLLM server serving one model. Its state is written only by
// the prober and read by request paths through Status and Ready.
type Backend struct {
	// URL is the server's base URL.
	URL *url.URL
	// Key is the API key sent to the backend ("" for none).
	Key string
	// Served is the model name the backend serves.
	Served string

	inFlight atomic.Int64

	mu sync.Mutex
	// owner is the config entry the backend came from (a url, or the dns
	// or srv entry that discovered it). A draining backend listed again
	// by another entry changes hands.
	owner *source
	// maxInFlight and kvTokens are its entry's limits (the pool's slot).
	maxInFlight, kvTokens int
	// draining: its address left its entry (a DNS answer without it, or a
	// reload without it). It takes no new work; its requests finish, then
	// it is forgotten (drainSince + drain_timeout at the latest).
	draining    bool
	drainSince  time.Time
	state       State
	reason      string
	since       time.Time
	maxModelLen int
	created     int64
	fails       int // consecutive failed probes or connections
	version     string
	// The warm-up generation's record: its whole time, its time to the
	// first token and its mean time per output token after the first (0
	// when it streamed fewer than two tokens).
	warmupTime, warmupTTFT, warmupTPOT time.Duration
	// warmupBusy: the backend was taken as warm while busy serving
	// others, its warm-up generation given up unmeasured.
	warmupBusy bool
	gauges     Gauges
	// Failed warm-ups in a row, and when the next may run (backoff).
	warmFails  int
	nextWarmup time.Time
	mismatch   *Mismatch
	// adapters are the LoRA adapters the backend listed last: replaced
	// whole by its prober, never changed in place, so a reader may keep
	// the slice it got.
	adapters []Adapter
	// refresh asks the prober to list the adapters again now (buffered 1:
	// asks made before it gets to it are one).
	refresh chan struct{}
}

// Adapter is a LoRA adapter a backend has loaded, as its /v1/models lists
// it: a card whose parent is a base model.
type Adapter struct {
	// Name is the card's id, the name requests use.
	Name string `json:"name"`
	// Root is where the backend loaded it from (the card's root).
	Root string `json:"root"`
}

// Adapters returns the LoRA adapters b listed last (at warm-up, then every
// health.interval while ready, or sooner when RefreshAdapters asked). The
// slice is shared and must not be modified.
func (b *Backend) Adapters() []Adapter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.adapters
}

// HasAdapter reports whether b listed the LoRA adapter name last.
func (b *Backend) HasAdapter(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.ContainsFunc(b.adapters, func(a Adapter) bool { return a.Name == name })
}

// RefreshAdapters asks b's prober to list its adapters again at once
// rather than at the next health.interval: a request found an adapter
// missing that b was thought to have. It never blocks; it has effect only
// while the fleet runs (Run).
func (b *Backend) RefreshAdapters() {
	select {
	case b.refresh <- struct{}{}:
	default:
	}
}

// Checks a Mismatch can come from.
const (
	CheckTokenizer   = "tokenizer"
	CheckMaxModelLen = "max_model_len"
)

// Mismatch is a difference of ingredients between this gateway and a
// backend, found at warm-up: the backend's /tokenize counts the probe
// conversation differently (another tokenizer or chat template), or it
// serves another context length. The backend stays warming unless the
// model's tokenizer_check is warn (Accepted).
type Mismatch struct {
	Check    string `json:"check"`   // CheckTokenizer or CheckMaxModelLen
	Gateway  int    `json:"gateway"` // this gateway's count, or the config's max_model_len
	Backend  int    `json:"backend"` // the backend's
	Accepted bool   `json:"accepted,omitempty"`
}

// BackendStatus is a snapshot of a backend.
type BackendStatus struct {
	URL string `json:"url"`
	// Source is where the backend came from: "static" (a url in the
	// config), or the entry that discovered it ("dns:NAME:PORT",
	// "srv:NAME").
	Source string `json:"source"`
	// Draining: its address is gone from its source; it takes no new
	// requests and is forgotten once its requests are done.
	Draining    bool      `json:"draining,omitempty"`
	State       State     `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Since       time.Time `json:"since"`
	MaxModelLen int       `json:"max_model_len,omitempty"`
	InFlight    int64     `json:"in_flight"`
	// Adapters are the LoRA adapters it listed last.
	Adapters []Adapter `json:"adapters,omitempty"`
	// Version is what GET /version reported at warm-up.
	Version string `json:"version,omitempty"`
	// WarmupSeconds is the time the warm-up generation took.
	WarmupSeconds float64 `json:"warmup_seconds,omitempty"`
	// WarmupTTFT and WarmupTPOT are the warm-up generation's time to its
	// first token and mean time per output token after the first, measured
	// on the stream while the backend was idle (0: not measured, e.g. a
	// backend that answered without streaming or with one token).
	WarmupTTFT time.Duration `json:"-"`
	WarmupTPOT time.Duration `json:"-"`
	// The same in seconds, for /debug/backends.
	WarmupTTFTSeconds float64 `json:"warmup_ttft_seconds,omitempty"`
	WarmupTPOTSeconds float64 `json:"warmup_tpot_seconds,omitempty"`
	// WarmupBusy: the backend was found busy serving other requests (its
	// requests waiting, its generated tokens rising) while the warm-up
	// generation queued, and taken as warm without it (no TTFT/TPOT).
	WarmupBusy bool `json:"warmup_busy,omitempty"`
	// Mismatch is a tokenizer or max_model_len difference found at
	// warm-up: holding it back, or accepted (tokenizer_check: warn).
	Mismatch *Mismatch `json:"mismatch,omitempty"`
	// WarmupFailures counts failed warm-ups in a row; NextWarmup is when
	// the next may run (retries back off up to health.warmup_backoff_max).
	WarmupFailures int        `json:"warmup_failures,omitempty"`
	NextWarmup     *time.Time `json:"next_warmup,omitempty"`
}

// Status returns a snapshot.
func (b *Backend) Status() BackendStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := BackendStatus{URL: b.URL.String(), Source: b.owner.label(), Draining: b.draining, State: b.state, Reason: b.reason, Since: b.since, MaxModelLen: b.maxModelLen,
		InFlight: b.inFlight.Load(), Version: b.version, WarmupSeconds: b.warmupTime.Seconds(), WarmupFailures: b.warmFails,
		Adapters: b.adapters, WarmupTTFT: b.warmupTTFT, WarmupTPOT: b.warmupTPOT,
		WarmupTTFTSeconds: b.warmupTTFT.Seconds(), WarmupTPOTSeconds: b.warmupTPOT.Seconds(), WarmupBusy: b.warmupBusy}
	if b.mismatch != nil {
		mm := *b.mismatch
		st.Mismatch = &mm
	}
	if b.state == Warming && !b.nextWarmup.IsZero() {
		next := b.nextWarmup
		st.NextWarmup = &next
	}
	return st
}

// Ready reports whether requests may go to b: it is warmed up and
// healthy, and not draining.
func (b *Backend) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == Ready && !b.draining
}

// Limits are the limits of b's config entry: max_in_flight and kv_tokens.
func (b *Backend) Limits() (maxInFlight, kvTokens int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxInFlight, b.kvTokens
}

// Draining reports whether b is leaving (see BackendStatus.Draining).
func (b *Backend) Draining() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draining
}

// Acquire counts a request in flight on b; call the returned func when done.
func (b *Backend) Acquire() (release func()) {
	b.inFlight.Add(1)
	var once sync.Once
	return func() { once.Do(func() { b.inFlight.Add(-1) }) }
}

func (b *Backend) set(now time.Time, s State, reason string) (changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.setLocked(now, s, reason)
}

func (b *Backend) setLocked(now time.Time, s State, reason string) (changed bool) {
	if b.state == s && b.reason == reason {
		return false
	}
	b.state, b.reason, b.since = s, reason, now
	return true
}

// Model is one served model and its backends. Its settings and its list of
// backends change on a config reload and as discovery finds addresses; each
// is replaced whole, so a reader may keep what it got.
type Model struct {
	Name     string
	settings atomic.Pointer[modelSettings]
	backends atomic.Pointer[[]*Backend]
	// sources are its config entries (Fleet.mu).
	sources []*source
	created int64
	next    atomic.Uint64
}

// modelSettings are the model's settings from the config.
type modelSettings struct {
	maxModelLen    int // max_model_len (0: unset)
	minReady       int
	tokenizerCheck string
	counter        PromptCounter
}

// Backends returns the model's backends, draining ones included, in the
// order they joined. The slice is shared and must not be modified.
func (m *Model) Backends() []*Backend {
	if p := m.backends.Load(); p != nil {
		return *p
	}
	return nil
}

// ConfigMaxModelLen is max_model_len from the config (0: unset).
func (m *Model) ConfigMaxModelLen() int { return m.settings.Load().maxModelLen }

// MinReady is how many ready backends /readyz needs.
func (m *Model) MinReady() int { return m.settings.Load().minReady }

// TokenizerCheck is tokenizer_check: enforce, warn or off.
func (m *Model) TokenizerCheck() string { return m.settings.Load().tokenizerCheck }

// MaxModelLen returns the context length: the config's when set, else the
// smallest any backend reported (a request must fit wherever it lands), or 0
// when unknown.
func (m *Model) MaxModelLen() int {
	if l := m.ConfigMaxModelLen(); l > 0 {
		return l
	}
	n := 0
	for _, b := range m.Backends() {
		b.mu.Lock()
		l := b.maxModelLen
		b.mu.Unlock()
		if l > 0 && (n == 0 || l < n) {
			n = l
		}
	}
	return n
}

// Created is the Unix time the model was first reported by a backend, else
// the gateway's start.
func (m *Model) Created() int64 {
	for _, b := range m.Backends() {
		b.mu.Lock()
		c := b.created
		b.mu.Unlock()
		if c > 0 {
			return c
		}
	}
	return m.created
}

// Pick returns the ready backend with the fewest requests in flight, ties
// broken round-robin so equal backends share load. It returns nil when no
// backend is ready.
func (m *Model) Pick() *Backend { return m.PickExcept(nil) }

// Ready reports whether at least one backend is ready.
func (m *Model) Ready() bool {
	return slices.ContainsFunc(m.Backends(), (*Backend).Ready)
}

// ReadyCount is the number of ready backends.
func (m *Model) ReadyCount() int {
	n := 0
	for _, b := range m.Backends() {
		if b.Ready() {
			n++
		}
	}
	return n
}

// PickExcept is Pick among the backends not in tried.
func (m *Model) PickExcept(tried []*Backend) *Backend {
	bs := m.Backends()
	n := len(bs)
	if n == 0 {
		return nil
	}
	start := int(m.next.Add(1) % uint64(n))
	var best *Backend
	var bestLoad int64
	for i := range n {
		b := bs[(start+i)%n]
		if !b.Ready() || slices.Contains(tried, b) {
			continue
		}
		if l := b.inFlight.Load(); best == nil || l < bestLoad {
			best, bestLoad = b, l
		}
	}
	return best
}

// PromptCounter counts a chat or completions request body locally, for the
// warm-up tokenizer probe. exact=false means it cannot tell (the probe is
// then skipped).
type PromptCounter interface {
	CountBody(chat bool, body []byte) (n int, exact bool)
}

// Fleet is every model and backend, and the prober that keeps their states.
// Its models and their backends change at runtime: discovery (dns and srv
// entries, discovery.go) adds and drains addresses, and Apply puts a
// reloaded config in force.
type Fleet struct {
	mu sync.Mutex
	// models in config order and by name, replaced whole under mu.
	models []*Model
	byName map[string]*Model
	// changed is closed (and replaced) whenever a model or a backend
	// joins or leaves, so that Run and RunScraper start and stop their
	// goroutines.
	changed      chan struct{}
	drainTimeout time.Duration
	resolver     *net.Resolver

	client          *http.Client
	log             *zap.Logger
	health          config.HealthConfig
	now             func() time.Time
	observers       []func(m *Model, b *Backend, from, to State)
	adapterWatchers []func(m *Model, b *Backend, adapters []Adapter)
	memberWatchers  []func(m *Model)
	busy            func(m *Model, b *Backend) bool
}

// New builds the fleet described by cfg. client is used for probes. Backend
// keys are read from the environment here (and at each Apply). counters,
// by model name, count the tokenizer probe locally; a model without one
// skips the probe. Backends given by dns or srv are found by ProbeAll and
// Run.
func New(cfg config.Config, client *http.Client, log *zap.Logger, counters map[string]PromptCounter) (*Fleet, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f := &Fleet{
		byName:   map[string]*Model{},
		client:   client,
		log:      log,
		health:   cfg.Health,
		now:      time.Now,
		changed:  make(chan struct{}),
		resolver: newResolver(cfg.Resolver),
	}
	if err := f.Apply(cfg, counters); err != nil {
		return nil, err
	}
	return f, nil
}

// OnTransition registers fn to be called on every state change (for
// metrics). Call before Run.
func (f *Fleet) OnTransition(fn func(m *Model, b *Backend, from, to State)) {
	f.observers = append(f.observers, fn)
}

// OnAdapters registers fn to be called when a backend's list of LoRA
// adapters changes, with the new list (shared: not to be modified). Call
// before Run.
func (f *Fleet) OnAdapters(fn func(m *Model, b *Backend, adapters []Adapter)) {
	f.adapterWatchers = append(f.adapterWatchers, fn)
}

// Model returns the model named name.
func (f *Fleet) Model(name string) (*Model, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.byName[name]
	return m, ok
}

// Models returns the models in config order. The slice is shared and must
// not be modified.
func (f *Fleet) Models() []*Model {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.models
}

// Names returns the model names in config order.
func (f *Fleet) Names() []string {
	models := f.Models()
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	return names
}

// OnMembers registers fn to be called whenever m's list of backends
// changes (one joins or is forgotten) or their limits change, in order,
// under the fleet's lock: fn must not call the Fleet, except Model's and
// Backend's methods. Call before Run.
func (f *Fleet) OnMembers(fn func(m *Model)) {
	f.memberWatchers = append(f.memberWatchers, fn)
}

// HoldDrain registers fn, asked before a draining backend is forgotten:
// it reports whether work granted to b is still running elsewhere (the
// gateway's queue leases), and b is then kept until a later check, or
// drain_timeout. Call before Run.
func (f *Fleet) HoldDrain(fn func(m *Model, b *Backend) bool) { f.busy = fn }

// Run probes every backend every interval, and resolves every dns and srv
// entry every dns_interval, until ctx is done. Each backend and each entry
// has its own goroutine, so that one slow backend or DNS answer does not
// delay the others; backends that join get theirs, and those forgotten
// lose it.
func (f *Fleet) Run(ctx context.Context) {
	f.each(ctx,
		func(ctx context.Context, m *Model, b *Backend) { f.runBackend(ctx, m, b) },
		func(ctx context.Context, m *Model, s *source) { f.discover(ctx, m, s) })
}

// each runs perBackend for every backend and perSource (if set) for every
// dns and srv entry, starting one goroutine for each that joins and
// cancelling those that leave, until ctx is done; it returns when all have
// returned.
func (f *Fleet) each(ctx context.Context, perBackend func(context.Context, *Model, *Backend), perSource func(context.Context, *Model, *source)) {
	var wg sync.WaitGroup
	running := map[any]context.CancelFunc{}
	defer func() {
		for _, cancel := range running {
			cancel()
		}
		wg.Wait()
	}()
	for {
		f.mu.Lock()
		models, changed := f.models, f.changed
		var sources [][]*source
		for _, m := range models {
			sources = append(sources, m.sources)
		}
		f.mu.Unlock()
		seen := map[any]bool{}
		for i, m := range models {
			for _, b := range m.Backends() {
				seen[b] = true
				if running[b] == nil {
					bctx, cancel := context.WithCancel(ctx)
					running[b] = cancel
					wg.Go(func() { perBackend(bctx, m, b) })
				}
			}
			for _, s := range sources[i] {
				if perSource == nil || s.kind == kindStatic {
					continue
				}
				seen[s] = true
				if running[s] == nil {
					sctx, cancel := context.WithCancel(ctx)
					running[s] = cancel
					wg.Go(func() { perSource(sctx, m, s) })
				}
			}
		}
		for k, cancel := range running {
			if !seen[k] {
				cancel()
				delete(running, k)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// runBackend is b's prober: a probe every health.interval, the adapter
// listings asked for, and once b drains, the check that forgets it.
func (f *Fleet) runBackend(ctx context.Context, m *Model, b *Backend) {
	t := time.NewTicker(f.health.Interval.D())
	defer t.Stop()
	if !b.Draining() {
		f.probe(ctx, m, b)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if b.Draining() {
				if f.forget(m, b) {
					return
				}
				continue
			}
			f.probe(ctx, m, b)
		case <-b.refresh:
			if b.Ready() {
				f.refreshAdapters(ctx, m, b)
			}
		}
	}
}

// ProbeAll resolves every dns and srv entry once, then probes every
// backend once, concurrently, and returns when all probes are done.
func (f *Fleet) ProbeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range f.Models() {
		f.mu.Lock()
		sources := m.sources
		f.mu.Unlock()
		for _, s := range sources {
			if s.kind != kindStatic {
				wg.Go(func() { f.resolve(ctx, m, s) })
			}
		}
	}
	wg.Wait()
	for _, m := range f.Models() {
		for _, b := range m.Backends() {
			if !b.Draining() {
				wg.Go(func() { f.probe(ctx, m, b) })
			}
		}
	}
	wg.Wait()
}

// ReportConnectFailure records that a real request could not reach b. It
// counts toward unhealthy_threshold like a failed probe.
func (f *Fleet) ReportConnectFailure(m *Model, b *Backend, err error) {
	b.mu.Lock()
	b.fails++
	from := b.state
	changed := false
	if b.state == Ready && b.fails >= f.health.UnhealthyThreshold {
		changed = b.setLocked(f.now(), Unhealthy, ReasonConnectionErrors+": "+describeDialError(err))
	}
	b.mu.Unlock()
	if changed {
		f.transitioned(m, b, from)
	}
}

// ReportSuccess records that b answered a real request.
func (f *Fleet) ReportSuccess(b *Backend) {
	b.mu.Lock()
	b.fails = 0
	b.mu.Unlock()
}

func (f *Fleet) transitioned(m *Model, b *Backend, from State) {
	st := b.Status()
	f.log.Info("backend state", zap.String("model", m.Name), zap.String("backend", b.URL.String()),
		zap.Stringer("from", from), zap.Stringer("state", st.State), zap.String("reason", st.Reason))
	for _, fn := range f.observers {
		fn(m, b, from, st.State)
	}
}

// probe advances b's state machine by one step:
//
//	loading   --/health 200-->            warming
//	warming   --listed, warm-up, probe--> ready
//	ready     --N failures-->             unhealthy
//	unhealthy --/health 200-->            warming
func (f *Fleet) probe(ctx context.Context, m *Model, b *Backend) {
	if ctx.Err() != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, f.health.Timeout.D())
	ok, reason := f.checkHealth(pctx, b)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: keep the last verdict
	}
	b.mu.Lock()
	from := b.state
	var changed bool
	switch {
	case !ok:
		b.fails++
		switch b.state {
		case Loading:
			changed = b.setLocked(f.now(), Loading, reason)
		case Warming:
			// Lost /health while warming: back to where it came from.
			next := Loading
			if b.warmedBefore() {
				next = Unhealthy
			}
			changed = b.setLocked(f.now(), next, reason)
		case Ready:
			if b.fails >= f.health.UnhealthyThreshold {
				changed = b.setLocked(f.now(), Unhealthy, reason)
			}
		case Unhealthy:
			changed = b.setLocked(f.now(), Unhealthy, reason)
		}
		b.mu.Unlock()
		if changed {
			f.transitioned(m, b, from)
		}
		return
	case b.state == Ready:
		b.fails = 0
		b.mu.Unlock()
		// Adapters are loaded and unloaded at runtime: follow them.
		f.refreshAdapters(ctx, m, b)
		return
	}
	b.fails = 0
	if b.state != Warming {
		// Loading or unhealthy until now: the backend (re)started, and
		// whatever failed its last warm-up may have been fixed.
		b.warmFails, b.nextWarmup = 0, time.Time{}
		changed = b.setLocked(f.now(), Warming, "warming up")
	}
	// A failed warm-up is retried with backoff: each one is a generation
	// on the backend, and a mismatch does not go away by asking again.
	// Half an interval of slack keeps a due retry from missing its tick.
	wait := !b.nextWarmup.IsZero() && f.now().Add(f.health.Interval.D()/2).Before(b.nextWarmup)
	b.mu.Unlock()
	if changed {
		f.transitioned(m, b, from)
		from = Warming
	}
	if wait {
		return
	}
	state, reason := f.warmUp(ctx, m, b)
	if ctx.Err() != nil {
		return
	}
	now := f.now()
	b.mu.Lock()
	if state == Ready {
		b.warmFails, b.nextWarmup = 0, time.Time{}
	} else {
		b.warmFails++
		b.nextWarmup = now.Add(f.warmupBackoff(b.warmFails))
	}
	changed = b.setLocked(now, state, reason)
	b.mu.Unlock()
	if changed {
		f.transitioned(m, b, from)
	}
}

// warmupBackoff is the wait after the n-th failed warm-up in a row: one
// probe interval, doubling, up to health.warmup_backoff_max.
func (f *Fleet) warmupBackoff(n int) time.Duration {
	d, limit := f.health.Interval.D(), f.health.WarmupBackoffMax.D()
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// warmedBefore reports whether b was ever ready (it then has a recorded
// warm-up time). Call with b.mu held.
func (b *Backend) warmedBefore() bool { return b.warmupTime > 0 }

func (f *Fleet) checkHealth(ctx context.Context, b *Backend) (bool, string) {
	res, err := f.do(ctx, b, http.MethodGet, "/health", nil)
	if err != nil {
		return false, describeDialError(err)
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("/health answered %d", res.StatusCode)
	}
	return true, ""
}

// warmUp runs the checks between warming and ready: the model is listed
// (with a max_model_len agreeing with the config), a short streamed
// generation succeeds (and measures TTFT and TPOT), and the backend's
// /tokenize counts a probe conversation as this gateway does. Each step
// has its own deadline: the listing, /version and the tokenizer probe
// health.timeout each, the generation warmup_timeout per token (see
// warmupGeneration), so a slow generation leaves the probe after it its
// whole time. It returns Ready, or Warming with the reason.
func (f *Fleet) warmUp(ctx context.Context, m *Model, b *Backend) (State, string) {
	b.setMismatch(nil) // found again below if it still holds
	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, f.health.Timeout.D())
	}
	lctx, cancel := step()
	served, err := f.listModels(lctx, b)
	cancel()
	if err != nil {
		return Warming, "/v1/models: " + err.Error()
	}
	f.setAdapters(m, b, adaptersOf(served))
	card, ok := served[b.Served]
	if !ok {
		ids := make([]string, 0, len(served))
		for id := range served {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return Warming, fmt.Sprintf("%s: %q not in /v1/models (serves %s)", ReasonModelNotServed, b.Served, strings.Join(ids, ", "))
	}
	b.mu.Lock()
	b.maxModelLen, b.created = card.MaxModelLen, card.Created
	b.mu.Unlock()
	if l := m.ConfigMaxModelLen(); l > 0 && card.MaxModelLen > 0 && card.MaxModelLen != l {
		b.setMismatch(&Mismatch{Check: CheckMaxModelLen, Gateway: l, Backend: card.MaxModelLen})
		return Warming, fmt.Sprintf("%s: backend serves max_model_len %d, config says %d", ReasonMaxModelLen, card.MaxModelLen, l)
	}
	vctx, cancel := step()
	v, err := f.version(vctx, b)
	cancel()
	if err == nil {
		b.mu.Lock()
		b.version = v
		b.mu.Unlock()
	}
	// The warm-up generation: the first real request pays for lazy
	// compilation and allocation; this one does instead. It streams a few
	// tokens so that it also measures the backend's TTFT and TPOT idle,
	// the floor triage judges latency against from the first minute. A
	// backend busy serving others is warm without it (warmup.busy).
	w, err := f.warmupGeneration(ctx, b)
	if err != nil {
		return Warming, ReasonWarmupFailed + ": " + err.Error()
	}
	if w.busy {
		f.log.Info("backend busy serving other requests: taken as warm without a finished warm-up generation (no TTFT/TPOT floor measured)",
			zap.String("model", m.Name), zap.String("backend", b.URL.String()))
	}
	b.mu.Lock()
	b.warmupTime, b.warmupTTFT, b.warmupTPOT, b.warmupBusy = w.total, w.ttft, w.tpot, w.busy
	b.mu.Unlock()
	var mm *Mismatch
	if set := m.settings.Load(); set.counter != nil && set.tokenizerCheck != config.TokenizerOff {
		tctx, cancel := step()
		reason, found := f.tokenizerProbe(tctx, set.counter, b)
		cancel()
		switch {
		case found != nil && set.tokenizerCheck == config.TokenizerWarn:
			found.Accepted = true
			mm = found
			f.log.Warn("tokenizer mismatch accepted (tokenizer_check: warn): prompt counts, context checks and budgets at the door may be off for this backend",
				zap.String("model", m.Name), zap.String("backend", b.URL.String()),
				zap.Int("gateway_tokens", found.Gateway), zap.Int("backend_tokens", found.Backend))
		case found != nil:
			b.setMismatch(found)
			return Warming, reason
		case reason != "":
			return Warming, reason
		}
	}
	b.setMismatch(mm)
	return Ready, ""
}

func (b *Backend) setMismatch(mm *Mismatch) {
	b.mu.Lock()
	b.mismatch = mm
	b.mu.Unlock()
}

// tokenizerProbe compares the local count of a probe request with the
// backend's POST /tokenize. A backend without /tokenize (404) passes: there
// is nothing to compare. It returns why the probe did not pass, and the
// mismatch when the counts differ.
func (f *Fleet) tokenizerProbe(ctx context.Context, counter PromptCounter, b *Backend) (string, *Mismatch) {
	chat := map[string]any{"model": b.Served, "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."},
		{"role": "user", "content": f.health.WarmupPrompt},
	}}
	body, _ := json.Marshal(chat)
	n, exact := counter.CountBody(true, body)
	req := chat
	if !exact {
		// No chat template here: compare the plain tokenizer instead.
		req = map[string]any{"model": b.Served, "prompt": f.health.WarmupPrompt}
		body, _ = json.Marshal(req)
		if n, exact = counter.CountBody(false, body); !exact {
			return "", nil
		}
	}
	status, ans, err := f.postJSON(ctx, b, "/tokenize", req)
	if err != nil {
		return "/tokenize: " + describeDialError(err), nil
	}
	if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
		return "", nil
	}
	if status != http.StatusOK {
		return fmt.Sprintf("/tokenize answered %d: %s", status, snippet(ans)), nil
	}
	var tr struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(ans, &tr); err != nil {
		return "/tokenize: unreadable answer", nil
	}
	if tr.Count != n {
		return fmt.Sprintf("%s: the backend counts the probe conversation as %d tokens, this gateway as %d", ReasonTokenizer, tr.Count, n),
			&Mismatch{Check: CheckTokenizer, Gateway: n, Backend: tr.Count}
	}
	return "", nil
}

type modelCard struct {
	Created     int64 `json:"created"`
	MaxModelLen int   `json:"max_model_len"`
	// Root and Parent: a LoRA adapter's card names its path and its base
	// model; a base model's parent is null.
	Root   string  `json:"root"`
	Parent *string `json:"parent"`
}

// adaptersOf picks the LoRA adapters out of a /v1/models listing, sorted
// by name.
func adaptersOf(served map[string]modelCard) []Adapter {
	var out []Adapter
	for id, c := range served {
		if c.Parent != nil && *c.Parent != "" {
			out = append(out, Adapter{Name: id, Root: c.Root})
		}
	}
	slices.SortFunc(out, func(a, b Adapter) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// refreshAdapters lists b's models again and records its adapters. A
// listing that fails keeps the last known adapters: the health probe, not
// this, decides whether b is up.
func (f *Fleet) refreshAdapters(ctx context.Context, m *Model, b *Backend) {
	pctx, cancel := context.WithTimeout(ctx, f.health.Timeout.D())
	defer cancel()
	served, err := f.listModels(pctx, b)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Debug("listing adapters failed", zap.String("model", m.Name), zap.String("backend", b.URL.String()), zap.Error(err))
		}
		return
	}
	f.setAdapters(m, b, adaptersOf(served))
}

// setAdapters records b's adapters and tells the watchers when they
// changed. Only b's prober calls it, so changes are reported in order.
func (f *Fleet) setAdapters(m *Model, b *Backend, list []Adapter) {
	b.mu.Lock()
	same := slices.Equal(b.adapters, list)
	if !same {
		b.adapters = list
	}
	b.mu.Unlock()
	if same {
		return
	}
	names := make([]string, len(list))
	for i, a := range list {
		names[i] = a.Name
	}
	f.log.Info("backend adapters", zap.String("model", m.Name), zap.String("backend", b.URL.String()), zap.Strings("adapters", names))
	for _, fn := range f.adapterWatchers {
		fn(m, b, list)
	}
}

func (f *Fleet) listModels(ctx context.Context, b *Backend) (map[string]modelCard, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, errors.New(describeDialError(err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %d", res.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
			modelCard
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("unreadable answer: %v", err)
	}
	out := make(map[string]modelCard, len(list.Data))
	for _, d := range list.Data {
		out[d.ID] = d.modelCard
	}
	return out, nil
}

func (f *Fleet) version(ctx context.Context, b *Backend) (string, error) {
	res, err := f.do(ctx, b, http.MethodGet, "/version", nil)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(res.Body, 4096)).Decode(&v) != nil {
		return "", errors.New("no version")
	}
	return v.Version, nil
}

func (f *Fleet) postJSON(ctx context.Context, b *Backend, path string, v any) (int, []byte, error) {
	body, _ := json.Marshal(v)
	res, err := f.do(ctx, b, http.MethodPost, path, body)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, ans, err
}

func (f *Fleet) do(ctx context.Context, b *Backend, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.URL.String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Probes say what they are, so that backend logs and tests can tell
	// them from client traffic.
	req.Header.Set("User-Agent", "maitred-probe")
	req.Header.Set(ProbeHeader, strings.TrimPrefix(path, "/"))
	if b.Key != "" {
		req.Header.Set("Authorization", "Bearer "+b.Key)
	}
	return f.client.Do(req)
}

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// describeDialError turns a transport error into a short reason.
func describeDialError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range States() {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("unknown backend state %q", b)
}
