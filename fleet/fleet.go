package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// State is where a backend stands, as seen by its probes.
type State int

const (
	// Loading: never answered /health 200 yet (vLLM refuses connections
	// until its weights are loaded).
	Loading State = iota
	// Ready: /health answers 200 and /v1/models lists the model.
	Ready
	// Unhealthy: was ready, now fails its probes.
	Unhealthy
)

func (s State) String() string {
	switch s {
	case Loading:
		return "loading"
	case Ready:
		return "ready"
	case Unhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText writes the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

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

	mu          sync.Mutex
	state       State
	reason      string
	since       time.Time
	maxModelLen int
	created     int64
}

// BackendStatus is a snapshot of a backend.
type BackendStatus struct {
	URL         string    `json:"url"`
	State       State     `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Since       time.Time `json:"since"`
	MaxModelLen int       `json:"max_model_len,omitempty"`
	InFlight    int64     `json:"in_flight"`
}

// Status returns a snapshot.
func (b *Backend) Status() BackendStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BackendStatus{URL: b.URL.String(), State: b.state, Reason: b.reason, Since: b.since, MaxModelLen: b.maxModelLen, InFlight: b.inFlight.Load()}
}

// Ready reports whether requests may go to b.
func (b *Backend) Ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == Ready
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
	if b.state == s && b.reason == reason {
		return false
	}
	b.state, b.reason, b.since = s, reason, now
	return true
}

// Model is one served model and its backends.
type Model struct {
	Name string
	// ConfigMaxModelLen is max_model_len from the config (0: unset).
	ConfigMaxModelLen int
	Backends          []*Backend
	created           int64
	next              atomic.Uint64
}

// MaxModelLen returns the context length: the config's when set, else the
// smallest any backend reported (a request must fit wherever it lands), or 0
// when unknown.
func (m *Model) MaxModelLen() int {
	if m.ConfigMaxModelLen > 0 {
		return m.ConfigMaxModelLen
	}
	n := 0
	for _, b := range m.Backends {
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
	for _, b := range m.Backends {
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
func (m *Model) Pick() *Backend {
	n := len(m.Backends)
	start := int(m.next.Add(1) % uint64(n))
	var best *Backend
	var bestLoad int64
	for i := range n {
		b := m.Backends[(start+i)%n]
		if !b.Ready() {
			continue
		}
		if l := b.inFlight.Load(); best == nil || l < bestLoad {
			best, bestLoad = b, l
		}
	}
	return best
}

// Ready reports whether at least one backend is ready.
func (m *Model) Ready() bool {
	return slices.ContainsFunc(m.Backends, (*Backend).Ready)
}

// Fleet is every model and backend, and the prober that keeps their states.
type Fleet struct {
	models   []*Model
	byName   map[string]*Model
	client   *http.Client
	log      *zap.Logger
	interval time.Duration
	timeout  time.Duration
	now      func() time.Time
}

// New builds the fleet described by cfg. client is used for probes (its
// Transport is shared with nothing else the gateway does). Backend keys are
// read from the environment here, once.
func New(cfg Config, client *http.Client, log *zap.Logger) (*Fleet, error) {
	if log == nil {
		log = zap.NewNop()
	}
	f := &Fleet{
		byName:   map[string]*Model{},
		client:   client,
		log:      log,
		interval: cfg.Health.Interval.D(),
		timeout:  cfg.Health.Timeout.D(),
		now:      time.Now,
	}
	start := time.Now()
	for i, mc := range cfg.Models {
		m := &Model{Name: mc.Name, ConfigMaxModelLen: mc.MaxModelLen, created: start.Unix()}
		for j, bc := range mc.Backends {
			u, err := url.Parse(strings.TrimSuffix(bc.URL, "/"))
			if err != nil {
				return nil, fmt.Errorf("models[%d].backends[%d].url: %w", i, j, err)
			}
			b := &Backend{URL: u, Served: mc.Name, since: start, reason: "not probed yet"}
			if bc.ServedModel != "" {
				b.Served = bc.ServedModel
			}
			if bc.APIKeyEnv != "" {
				b.Key = os.Getenv(bc.APIKeyEnv)
			}
			m.Backends = append(m.Backends, b)
		}
		f.models = append(f.models, m)
		f.byName[m.Name] = m
	}
	return f, nil
}

// Model returns the model named name.
func (f *Fleet) Model(name string) (*Model, bool) {
	m, ok := f.byName[name]
	return m, ok
}

// Models returns the models in config order.
func (f *Fleet) Models() []*Model { return f.models }

// Names returns the model names in config order.
func (f *Fleet) Names() []string {
	names := make([]string, len(f.models))
	for i, m := range f.models {
		names[i] = m.Name
	}
	return names
}

// Run probes every backend every interval until ctx is done. Each backend
// has its own goroutine so that one slow backend does not delay the others'
// probes.
func (f *Fleet) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range f.models {
		for _, b := range m.Backends {
			wg.Go(func() {
				t := time.NewTicker(f.interval)
				defer t.Stop()
				for {
					f.probe(ctx, m, b)
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
				}
			})
		}
	}
	wg.Wait()
}

// ProbeAll probes every backend once, concurrently, and returns when all
// probes are done.
func (f *Fleet) ProbeAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range f.models {
		for _, b := range m.Backends {
			wg.Go(func() { f.probe(ctx, m, b) })
		}
	}
	wg.Wait()
}

func (f *Fleet) probe(ctx context.Context, m *Model, b *Backend) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	state, reason := f.check(ctx, b)
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		return // shutting down: keep the last verdict
	}
	if state != Ready {
		b.mu.Lock()
		if b.state == Ready || b.state == Unhealthy {
			state = Unhealthy
		}
		b.mu.Unlock()
	}
	if b.set(f.now(), state, reason) {
		f.log.Info("backend state", zap.String("model", m.Name), zap.String("backend", b.URL.String()),
			zap.Stringer("state", state), zap.String("reason", reason))
	}
}

// check asks the backend for /health and then /v1/models.
func (f *Fleet) check(ctx context.Context, b *Backend) (State, string) {
	res, err := f.get(ctx, b, "/health")
	if err != nil {
		return Loading, describeDialError(err)
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4096))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return Loading, fmt.Sprintf("/health answered %d", res.StatusCode)
	}
	res, err = f.get(ctx, b, "/v1/models")
	if err != nil {
		return Loading, "/v1/models: " + describeDialError(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return Loading, fmt.Sprintf("/v1/models answered %d", res.StatusCode)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			Created     int64  `json:"created"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&list); err != nil {
		return Loading, "/v1/models: unreadable answer: " + err.Error()
	}
	var ids []string
	for _, d := range list.Data {
		if d.ID == b.Served {
			b.mu.Lock()
			b.maxModelLen, b.created = d.MaxModelLen, d.Created
			b.mu.Unlock()
			return Ready, ""
		}
		ids = append(ids, d.ID)
	}
	return Loading, fmt.Sprintf("model %q not served (serves %s)", b.Served, strings.Join(ids, ", "))
}

func (f *Fleet) get(ctx context.Context, b *Backend, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.String()+path, nil)
	if err != nil {
		return nil, err
	}
	if b.Key != "" {
		req.Header.Set("Authorization", "Bearer "+b.Key)
	}
	return f.client.Do(req)
}

// describeDialError turns a transport error into a short reason.
func describeDialError(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "probe timed out"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "probe timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range []State{Loading, Ready, Unhealthy} {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("unknown backend state %q", b)
}
