package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/tokenize"
)

// modelRuntime is one configured model as the request path uses it, built
// once in New: its fleet model, admission pool, tokenizer, timeouts,
// defaults and metric children. A request finds it once, at the door (the
// catalog's lookup by name is the only one; the door's verdict carries the
// runtime's Ref back), and carries it from then on.
type modelRuntime struct {
	name string
	ref  int // its index in Gateway.models, the door's admission.Model.Ref
	fm   *fleet.Model
	pool *admission.Pool
	// backends are the model's backends in slot order: the pool's slot i
	// is backends[i] (the pool was built from this slice).
	backends []*fleet.Backend
	// tok is the model's tokenizer and chat template; nil: none (requests
	// are forwarded uncounted).
	tok *tokenize.Model
	// counter is the door's counter for tok: tok itself, or tok through
	// the count cache (countcache.go); nil when tok is.
	counter admission.Counter
	// clamp: on_overflow is clamp.
	clamp                 bool
	firstByte, streamIdle time.Duration
	// expectedOutput is the output budget reserved for a request that
	// sets no max_tokens.
	expectedOutput int
	queueTimeout   time.Duration
	// affinity is prefix_affinity_tokens (0: off).
	affinity int
	// checkRate is tokenize_check_rate.
	checkRate float64
	metrics   modelMetrics
}

// admission is the door's view of the model. MaxModelLen is read now: it
// follows what backends report when the config sets none.
func (rt *modelRuntime) admission() admission.Model {
	am := admission.Model{Name: rt.name, Ref: rt.ref, MaxModelLen: rt.fm.MaxModelLen(), Clamp: rt.clamp}
	if rt.counter != nil {
		am.Counter = rt.counter
	} else if rt.tok != nil {
		am.Counter = rt.tok // only a non-nil tokenizer: a typed nil would not read as "none"
	}
	return am
}

// slotOf is b's slot index in the model's pool.
func (rt *modelRuntime) slotOf(b *fleet.Backend) (int, bool) {
	for i, bb := range rt.backends {
		if bb == b {
			return i, true
		}
	}
	return 0, false
}

// ejected lists the backends the model's pool has ejected as outliers.
func (rt *modelRuntime) ejected() []*fleet.Backend {
	var out []*fleet.Backend
	for _, i := range rt.pool.Ejected() {
		out = append(out, rt.backends[i])
	}
	return out
}

// modelMetrics are the gateway's metric vectors curried with one model's
// label (or the empty label, for requests that name no configured model):
// the request path never builds a model label itself.
type modelMetrics struct {
	requests      *prometheus.CounterVec // endpoint, code
	duration      prometheus.ObserverVec // endpoint
	inFlight      prometheus.Gauge
	streamErrors  *prometheus.CounterVec // reason
	rejections    *prometheus.CounterVec // reason
	uncounted     *prometheus.CounterVec // reason
	tokChecks     *prometheus.CounterVec // result
	backendErrors *prometheus.CounterVec // backend, kind
	admissions    *prometheus.CounterVec // outcome
	queueWait     prometheus.ObserverVec // class
	phase         prometheus.ObserverVec // phase
	ttft, tpot    prometheus.ObserverVec // backend
	failures      *prometheus.CounterVec // layer
}

func (m *metrics) forModel(name string) modelMetrics {
	l := prometheus.Labels{"model": name}
	mm := modelMetrics{
		requests:      m.requests.MustCurryWith(l),
		duration:      m.duration.MustCurryWith(l),
		streamErrors:  m.streamErrors.MustCurryWith(l),
		rejections:    m.rejections.MustCurryWith(l),
		uncounted:     m.uncounted.MustCurryWith(l),
		tokChecks:     m.tokChecks.MustCurryWith(l),
		backendErrors: m.backendErrors.MustCurryWith(l),
		admissions:    m.admissions.MustCurryWith(l),
		queueWait:     m.queueWait.MustCurryWith(l),
		phase:         m.phase.MustCurryWith(l),
		ttft:          m.ttft.MustCurryWith(l),
		tpot:          m.tpot.MustCurryWith(l),
		failures:      m.failures.MustCurryWith(l),
	}
	if name != "" {
		mm.inFlight = m.inFlight.WithLabelValues(name)
	}
	return mm
}

// newRuntimes builds each configured model's runtime, in config order, and
// its admission pool over its fleet backends. onEvent, when set, hears
// each model's pool events.
//
// shared, when set, is the account of backends' work that replicas share:
// each pool confirms its picks there.
func newRuntimes(cfg config.Config, fl *fleet.Fleet, toks map[string]*tokenize.Model, m *metrics, onEvent func(rt *modelRuntime, e admission.Event), shared admission.Shared) []*modelRuntime {
	out := make([]*modelRuntime, 0, len(cfg.Models))
	for i := range cfg.Models {
		mc := &cfg.Models[i]
		fm, _ := fl.Model(mc.Name)
		rt := &modelRuntime{
			name: mc.Name, ref: i, fm: fm, backends: fm.Backends, tok: toks[mc.Name],
			clamp:          mc.OnOverflow == "clamp",
			firstByte:      cfg.FirstByte(mc),
			streamIdle:     cfg.StreamIdle(mc),
			expectedOutput: mc.ExpectedOutputOrDefault(),
			queueTimeout:   mc.QueueTimeoutOrDefault(),
			affinity:       mc.PrefixAffinityTokens,
			checkRate:      mc.TokenizeCheckRate,
			metrics:        m.forModel(mc.Name),
		}
		var events func(admission.Event)
		if onEvent != nil {
			events = func(e admission.Event) { onEvent(rt, e) }
		}
		var slots []admission.SlotConfig
		for j, b := range rt.backends {
			bc := mc.Backends[j]
			slots = append(slots, admission.SlotConfig{Name: b.URL.Host, Ready: b.Ready, MaxInFlight: bc.MaxInFlight, KVTokens: bc.KVTokens})
		}
		rt.pool = admission.NewPool(mc.Name, admission.PoolConfig{
			QueueSize:        mc.QueueSizeOrDefault(),
			QueueTimeout:     rt.queueTimeout,
			Classes:          len(cfg.PriorityClasses),
			SaturatedWaiting: cfg.SaturatedWaiting,
			SaturatedKV:      cfg.SaturatedKVUsage,
			StaleAfter:       4 * cfg.ScrapeInterval.D(),
			// A scrape times out after max(interval, 1s); 40 intervals (10 s
			// at the default) of failures is persistent, not a missed scrape.
			GaugesUnavailableAfter: max(40*cfg.ScrapeInterval.D(), 5*time.Second),
			EjectAfter:             cfg.EjectAfter,
			EjectFor:               cfg.EjectFor.D(),
			MaxEjectionPercent:     cfg.MaxEjectionPercent,
			AffinityLoad:           1.5,
			OnEvent:                events,
			Shared:                 shared,
			RejectWhenStoreDown:    cfg.Store.OnError == config.StoreErrorReject,
		}, slots, nil)
		out = append(out, rt)
	}
	return out
}

// catalog is the door's view of the configured models: the one lookup of a
// model by name a request makes (resolve), for the door and for the
// tokenizer endpoints alike.
type catalog struct {
	models []*modelRuntime // config order
	byName map[string]*modelRuntime
	names  []string
}

// resolve finds what a request's model name means: a configured model
// (only nil), or else a LoRA adapter loaded on some of a configured
// model's ready backends: the model's runtime (its tokenizer, limits and
// queue are the adapter's) and the slots of those backends. A configured
// name wins over an adapter of the same name; an adapter loaded under two
// configured models is the first model's in config order. An adapter no
// ready backend has loaded is not found, like an unknown model.
func (c *catalog) resolve(name string) (rt *modelRuntime, only []int, ok bool) {
	if rt, ok := c.byName[name]; ok {
		return rt, nil, true
	}
	if name == "" {
		return nil, nil, false
	}
	for _, rt := range c.models {
		for i, b := range rt.backends {
			if b.Ready() && b.HasAdapter(name) {
				only = append(only, i)
			}
		}
		if only != nil {
			return rt, only, true
		}
	}
	return nil, nil, false
}

func (c *catalog) Lookup(name string) (admission.Model, bool) {
	rt, only, ok := c.resolve(name)
	if !ok {
		return admission.Model{}, false
	}
	am := rt.admission()
	if only != nil {
		am.Name, am.Only = name, only
	}
	return am, true
}

func (c *catalog) Names() []string { return c.names }
