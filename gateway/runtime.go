package gateway

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/tokenize"
)

// modelRuntime is one configured model as the request path uses it, built
// in New and again at each Reload: its fleet model, admission pool,
// tokenizer, timeouts, defaults and metric children (the pool, the fleet
// model and the metrics are the model's for its whole life; the settings
// are the config's that built this runtime). A request finds it once, at the door (the
// catalog's lookup by name is the only one; the door's verdict carries the
// runtime itself back as its Ref), and carries it from then on.
type modelRuntime struct {
	name string
	fm   *fleet.Model
	// pool's slots are the fleet model's backends, each named by its
	// host:port (syncSlots).
	pool *admission.Pool
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
	// fair: fairness is tokens; a keyed request's ticket names its flow.
	// inW and outW are fairness_weights.
	fair      bool
	inW, outW float64
	metrics   modelMetrics
	// uncounted is why the model's chat requests are forwarded uncounted
	// whatever they hold ("" when they are counted): uncountedNoTokenizer,
	// or uncountedTemplate with uncountedWhy naming the template, its
	// line and the reason it did not compile.
	uncounted, uncountedWhy string
}

// The reasons a model is served uncounted, the reason label of
// maitred_model_uncounted (a closed set).
const (
	uncountedNoTokenizer = "no_tokenizer"
	uncountedTemplate    = "chat_template_not_compiled"
)

// modelUncounted says why a model's chat requests all go uncounted: no
// tokenizer, or chat templates that did not compile (each named with its
// line and reason); "" when they are counted.
func modelUncounted(tok *tokenize.Model) (reason, why string) {
	if tok == nil {
		return uncountedNoTokenizer, "the model has no tokenizer"
	}
	var parts []string
	for _, p := range tok.TemplateProblems() {
		parts = append(parts, fmt.Sprintf("chat template %q did not compile: %s", p.Name, strings.TrimPrefix(p.Err.Error(), "chat template: ")))
	}
	if len(parts) == 0 {
		return "", ""
	}
	return uncountedTemplate, strings.Join(parts, "; ")
}

// ModelName is the model's name: a *modelRuntime is the door's handle
// for its model (admission.Runtime, Model.Ref).
func (rt *modelRuntime) ModelName() string { return rt.name }

// admission is the door's view of the model. MaxModelLen is read now: it
// follows what backends report when the config sets none.
func (rt *modelRuntime) admission() admission.Model {
	am := admission.Model{Name: rt.name, Ref: rt, MaxModelLen: rt.fm.MaxModelLen(), Clamp: rt.clamp}
	if rt.counter != nil {
		am.Counter = rt.counter
	} else if rt.tok != nil {
		am.Counter = rt.tok // only a non-nil tokenizer: a typed nil would not read as "none"
	}
	am.Vocab = rt.vocab()
	return am
}

// vocab is the number of token ids the model takes
// (tokenize.Model.VocabSize), 0 when it has no tokenizer.
func (rt *modelRuntime) vocab() int {
	if rt.tok == nil {
		return 0
	}
	return rt.tok.VocabSize()
}

// backend is the model's backend whose slot is named name (its
// host:port), or nil when the fleet forgot it.
func (rt *modelRuntime) backend(name string) *fleet.Backend {
	for _, b := range rt.fm.Backends() {
		if b.URL.Host == name {
			return b
		}
	}
	return nil
}

// syncSlots makes the pool's slots the fleet model's backends now, with
// their entries' limits (the fleet calls it whenever they change: OnMembers).
func (rt *modelRuntime) syncSlots() {
	var slots []admission.SlotConfig
	for _, b := range rt.fm.Backends() {
		maxInFlight, kv := b.Limits()
		slots = append(slots, admission.SlotConfig{Name: b.URL.Host, Ready: b.Ready, MaxInFlight: maxInFlight, KVTokens: kv})
	}
	rt.pool.SetSlots(slots)
}

// slotStats are the pool's slots by name.
func (rt *modelRuntime) slotStats() map[string]admission.SlotStats {
	st := rt.pool.Stats()
	out := make(map[string]admission.SlotStats, len(st.Slots))
	for _, s := range st.Slots {
		out[s.Name] = s
	}
	return out
}

// ejected lists the backends the model's pool has ejected as outliers.
func (rt *modelRuntime) ejected() []*fleet.Backend {
	var out []*fleet.Backend
	for _, name := range rt.pool.Ejected() {
		if b := rt.backend(name); b != nil {
			out = append(out, b)
		}
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
	flowWait      prometheus.ObserverVec // flow
	// prefixHit and prefixPrompt: the cached-prefix tokens the precise
	// pick expected, and the prompt tokens of the requests it scored.
	prefixHit, prefixPrompt prometheus.Counter
	// The children every admitted request touches, resolved once: each
	// phase's observer (in phaseNames' order) and the admitted count.
	phaseOf  []prometheus.Observer
	admitted prometheus.Counter
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
		flowWait:      m.flowWait.MustCurryWith(l),
	}
	if name != "" {
		mm.prefixHit, mm.prefixPrompt = m.prefixHit.WithLabelValues(name), m.prefixPrompt.WithLabelValues(name)
		mm.inFlight = m.inFlight.WithLabelValues(name)
		mm.admitted = mm.admissions.WithLabelValues(admission.Admitted.String())
		mm.phaseOf = make([]prometheus.Observer, len(phaseNames))
		for i, p := range phaseNames {
			mm.phaseOf[i] = mm.phase.WithLabelValues(p)
		}
	}
	return mm
}

// newRuntimes builds the runtimes of cfg's models, in config order, each
// a new value, the door's handle for it (admission.Model.Ref). A model of prev (the runtimes in force, by name) keeps
// its pool (its queue, leases and slots' state), fleet model and metric
// children, and takes cfg's settings; a new model gets its own pool over
// its fleet backends. toks are the models' tokenizers, by name. With a
// shared store, each pool confirms its picks in the replicas' shared
// account.
func (g *Gateway) newRuntimes(cfg *config.Config, toks map[string]*tokenize.Model, prev map[string]*modelRuntime) []*modelRuntime {
	out := make([]*modelRuntime, 0, len(cfg.Models))
	for i := range cfg.Models {
		mc := &cfg.Models[i]
		fm, _ := g.fleet.Model(mc.Name)
		rt := &modelRuntime{
			name: mc.Name, fm: fm, tok: toks[mc.Name],
			clamp:          mc.OnOverflow == "clamp",
			firstByte:      cfg.FirstByte(mc),
			streamIdle:     cfg.StreamIdle(mc),
			expectedOutput: mc.ExpectedOutputOrDefault(),
			queueTimeout:   mc.QueueTimeoutOrDefault(),
			affinity:       mc.PrefixAffinityTokens,
			checkRate:      mc.TokenizeCheckRate,
			fair:           mc.FairnessOrDefault() == config.FairnessTokens,
		}
		rt.inW, rt.outW = mc.FairnessWeightsOrDefault()
		rt.counter = g.counterFor(rt)
		rt.uncounted, rt.uncountedWhy = modelUncounted(rt.tok)
		if rt.uncounted == uncountedTemplate {
			for _, p := range rt.tok.TemplateProblems() {
				g.log.Warn("chat template did not compile: the model's chat requests are forwarded uncounted",
					zap.String("model", mc.Name), zap.String("template", p.Name), zap.Int("line", p.Err.Line), zap.String("reason", p.Err.Reason))
			}
		}
		pc := g.poolConfig(cfg, mc)
		if old := prev[mc.Name]; old != nil {
			rt.pool, rt.metrics = old.pool, old.metrics
			rt.pool.SetConfig(pc)
		} else {
			rt.metrics = g.metrics.forModel(mc.Name)
			first := rt // events name the model; its pool and fleet model stay
			pc.OnEvent = func(e admission.Event) { g.poolEvent(first, e) }
			rt.pool = admission.NewPool(mc.Name, pc, nil, g.queueClock)
			rt.syncSlots()
		}
		out = append(out, rt)
	}
	return out
}

// poolConfig is a model's admission.PoolConfig (OnEvent aside).
func (g *Gateway) poolConfig(cfg *config.Config, mc *config.ModelConfig) admission.PoolConfig {
	pc := admission.PoolConfig{
		QueueSize:        mc.QueueSizeOrDefault(),
		QueueTimeout:     mc.QueueTimeoutOrDefault(),
		Classes:          len(cfg.PriorityClasses),
		SaturatedWaiting: cfg.SaturatedWaiting,
		SaturatedKV:      cfg.SaturatedKVUsage,
		StaleAfter:       4 * cfg.ScrapeInterval.D(),
		// Past scrape_budget a backend is scraped less often: both
		// limits grow with its interval (admission.Gauges.Every).
		ScrapeInterval: cfg.ScrapeInterval.D(),
		// A scrape times out after max(interval, 1s); 40 intervals (10 s
		// at the default) of failures is persistent, not a missed scrape.
		GaugesUnavailableAfter: max(40*cfg.ScrapeInterval.D(), 5*time.Second),
		EjectAfter:             cfg.EjectAfter,
		EjectFor:               cfg.EjectFor.D(),
		MaxEjectionPercent:     cfg.MaxEjectionPercent,
		AffinityLoad:           1.5,
		RejectWhenStoreDown:    cfg.Store.OnError == config.StoreErrorReject,
		Parked:                 &g.queued,
	}
	if mc.FairnessOrDefault() == config.FairnessTokens {
		pc.Fairness = admission.Tokens
	}
	pc.InputWeight, pc.OutputWeight = mc.FairnessWeightsOrDefault()
	if g.shared != nil {
		pc.Shared = g.shared
	}
	return pc
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
func (c *catalog) resolve(name string) (rt *modelRuntime, only []string, ok bool) {
	if rt, ok := c.byName[name]; ok {
		return rt, nil, true
	}
	if name == "" {
		return nil, nil, false
	}
	for _, rt := range c.models {
		for _, b := range rt.fm.Backends() {
			if b.Ready() && b.HasAdapter(name) {
				only = append(only, b.URL.Host)
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
