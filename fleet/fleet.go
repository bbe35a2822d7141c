package fleet

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
)

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
	// size is the number of backends of every model (countLocked), set
	// at every change: the budgets' n (budget.go).
	size         atomic.Int64
	scrapeBudget config.Budget

	client          *http.Client
	log             *zap.Logger
	health          config.HealthConfig
	now             func() time.Time
	observers       []func(m *Model, b *Backend, from, to State)
	adapterWatchers []func(m *Model, b *Backend, adapters []Adapter)
	memberWatchers  []func(m *Model)
	busy            func(m *Model, b *Backend) bool
	// lineBufs are the scrapes' line buffers (*bufio.Reader of maxLine
	// bytes), kept from one scrape to the next.
	lineBufs sync.Pool
}

// New builds the fleet described by its section of the config
// (config.Config.Fleet: the models and their backends, health, resolver,
// drain_timeout). client is used for probes. Backend keys are read from
// the environment here (and at each Apply). counters, by model name, count
// the tokenizer probe locally; a model without one skips the probe.
// Backends given by dns or srv are found by ProbeAll and Run.
func New(cfg config.FleetConfig, client *http.Client, log *zap.Logger, counters map[string]PromptCounter) (*Fleet, error) {
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

		scrapeBudget: cfg.ScrapeBudget,
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
	bt := newBeat() // every backend's probes of a round start together
	var wg sync.WaitGroup
	defer wg.Wait()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { bt.run(bctx, f.ProbeEvery) })
	f.each(ctx,
		func(ctx context.Context, m *Model, b *Backend) { f.runBackend(ctx, m, b, bt) },
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

// runBackend is b's prober: a probe at every beat of bt (every
// ProbeEvery: health.interval up to health.budget), the adapter listings asked for, and once b drains,
// the check that forgets it.
func (f *Fleet) runBackend(ctx context.Context, m *Model, b *Backend, bt *beat) {
	if !b.Draining() {
		f.probe(ctx, m, b)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-bt.next():
			if b.Draining() {
				if f.forget(m, b) {
					return
				}
				continue
			}
			f.probe(ctx, m, b)
		case <-b.refresh:
			if b.Ready() {
				f.refreshAdapters(ctx, m, b, f.now())
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
	if idx := m.Index(); idx != nil && from == Ready && st.State != Ready {
		// A backend that stops answering may come back as a new process
		// with an empty cache, whose events' seq can pass the old one's
		// before the subscriber reconnects (read as a gap, not a restart):
		// what the index held of it is no longer known.
		idx.Clear(b.URL.Host)
	}
	f.log.Info("backend state", zap.String("model", m.Name), zap.String("backend", b.URL.String()),
		zap.Stringer("from", from), zap.Stringer("state", st.State), zap.String("reason", st.Reason))
	for _, fn := range f.observers {
		fn(m, b, from, st.State)
	}
}
