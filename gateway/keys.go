package gateway

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/quota"
	"github.com/maitred-dev/maitred/triage"
)

// API keys (config auth): who may call the model APIs, which models each
// key may use, its priority class and its quotas.
//
// A key is found by the SHA-256 digest of what the client presents, in a
// map of digests: the lookup compares digests, never the key itself, so
// its time says nothing about how much of a key was right, and a wrong key
// and a missing one get the same 401 whatever keys exist. The key itself is
// never stored (only digests), logged or forwarded (the proxy drops the
// client's Authorization and x-api-key); logs and metrics show its name.
//
// The table is one immutable value behind an atomic pointer: a request
// reads it once and keeps the *apiKey it found, so a keys_file reload
// (watchKeys) swaps it without a lock and never cuts a request in flight.

// The outcomes of the key checks: admission.Reasons, the same vocabulary
// as the door's rejections.
var (
	outcomeInvalidAPIKey   = admission.InvalidAPIKey.String()
	outcomeModelNotAllowed = admission.ModelNotAllowed.String()
	outcomeRateLimited     = admission.RateLimited.String()
)

// apiKey is one configured key as the request path uses it: its name,
// what it shares with every key of the same models, priority, limits and
// weight (keyProfile), and its metric children, made at its first request
// (metrics): a keys_file of 100k keys costs no series, and no memory for
// them, until they are used. 32 bytes and the name's bytes per key.
type apiKey struct {
	name string
	*keyProfile
	m atomic.Pointer[keyMetrics]
}

// keyProfile is what keys with the same models, priority, limits and
// weight share: one per distinct combination in a key table, not one per
// key.
type keyProfile struct {
	// all: models "*"; else models is the allow-list, by the name the
	// client sends.
	all    bool
	models map[string]bool
	// class is the key's priority class (its index in priority_classes,
	// 0 highest), the highest its requests may use.
	class     int
	className string
	limits    quota.Limits
	// perMinute: the key has a per-minute limit, reported in OpenAI's
	// x-ratelimit-* headers on every answer.
	perMinute bool
	// weight is the key's share under a model's fairness tokens.
	weight float64
	reg    *metrics
}

// metrics is the key's metric children, made on first use (two first
// requests at once make the same children: a vector's With is the same
// child for the same labels).
func (k *apiKey) metrics() *keyMetrics {
	if m := k.m.Load(); m != nil {
		return m
	}
	m := k.reg.forKey(k.name)
	k.m.CompareAndSwap(nil, &m)
	return k.m.Load()
}

// allows reports whether the key may use the model the client named.
func (k *apiKey) allows(name string) bool { return k.all || k.models[name] }

// keyTable is the keys in force: immutable once built. byDigest indexes
// keys by digest; neither holds a pointer per key but the names, so that
// the garbage collector has little to walk in a table of 100k keys.
type keyTable struct {
	byDigest map[[32]byte]int32
	keys     []apiKey
}

// largeKeyTable is the number of keys from which the gateway frees the
// memory its start used to read them (initKeys).
const largeKeyTable = 10000

// tableOf is the table of a validated set of keys (the config's, then
// the keys_file's): it takes the set's digest index as its own, and makes
// one apiKey per key, its name a slice of the set's one string of names,
// its profile shared with every key of the same models, priority, limits
// and weight.
// It runs off the request path (at New, and in the keys_file watcher or
// a reload) and holds no lock a request takes; requests keep the table
// in force until it is swapped in whole (setKeys).
func (g *Gateway) tableOf(ks *config.KeySet) *keyTable {
	byKey := map[profileKey]*keyProfile{}
	profiles := make([]*keyProfile, len(ks.Profiles))
	for i := range ks.Profiles {
		profiles[i] = g.profileOf(&ks.Profiles[i], byKey)
	}
	n := ks.Len()
	t := &keyTable{byDigest: ks.Digests, keys: make([]apiKey, n)}
	var y config.KeyYielder
	ks.Digests = nil // the table's now
	for i := range n {
		k := &t.keys[i]
		k.name, k.keyProfile = ks.Name(i), profiles[ks.Profile(i)]
		if (i+1)%config.KeyYieldEvery == 0 {
			y.Yield() // a reload runs beside requests
		}
	}
	return t
}

// profileKey tells keys' profiles apart: their models (how many, and
// each prefixed by its length, so that no two lists read the same),
// priority, limits and weight.
type profileKey struct {
	n                int // models
	models, priority string
	limits           config.KeyLimits
	weight           float64
}

func profileKeyOf(kc *config.KeyConfig) profileKey {
	return profileKey{n: len(kc.Models), models: config.ModelsKey(kc.Models), priority: kc.Priority, limits: kc.Limits, weight: kc.WeightOrDefault()}
}

// profileOf is kc's profile, shared with the keys in profiles that have
// the same one.
func (g *Gateway) profileOf(kc *config.KeyConfig, profiles map[profileKey]*keyProfile) *keyProfile {
	pk := profileKeyOf(kc)
	if p, ok := profiles[pk]; ok {
		return p
	}
	l := kc.Limits
	p := &keyProfile{reg: g.metrics, weight: pk.weight, limits: quota.Limits{
		RequestsPerMinute: l.RequestsPerMinute, TokensPerMinute: l.TokensPerMinute,
		TokensPerDay: l.TokensPerDay, MaxConcurrent: l.MaxConcurrent,
	}}
	p.perMinute = l.RequestsPerMinute > 0 || l.TokensPerMinute > 0
	p.all = slices.Contains(kc.Models, config.AllModels)
	if !p.all {
		p.models = make(map[string]bool, len(kc.Models))
		for _, m := range kc.Models {
			p.models[m] = true
		}
	}
	prio := kc.Priority
	if prio == "" {
		prio = g.conf().DefaultPriority
	}
	for ci, c := range g.conf().PriorityClasses {
		if c == prio {
			p.class, p.className = ci, c
		}
	}
	profiles[pk] = p
	return p
}

// setKeys puts a validated set of keys in force; requests already
// admitted keep the key they were admitted with.
func (g *Gateway) setKeys(ks *config.KeySet) {
	g.keys.Store(g.tableOf(ks))
}

// initKeys reads the auth section at New: the config's keys and the
// keys_file's. Without an auth section the gateway is open.
func (g *Gateway) initKeys() error {
	a := g.conf().Auth
	if a == nil {
		g.log.Warn("no auth section in the config: the model APIs are open to anyone who can reach the gateway")
		return nil
	}
	g.noKey = g.metrics.forKey("")
	ks, err := g.authKeys(a)
	if err != nil {
		return err
	}
	g.setKeys(ks)
	if ks.Len() >= largeKeyTable {
		// The file's reading is garbage now (a 100k-key file: ~50 MB,
		// most of the process), and an idle gateway would keep it until
		// the runtime's forced collection and scavenging, minutes later:
		// freed at start, when no request is in flight.
		debug.FreeOSMemory()
	}
	g.log.Info("API keys required", zap.Int("keys", ks.Len()), zap.String("keys_file", a.KeysFile))
	return nil
}

// reloadAuth puts a reloaded config's auth section in force: its keys and
// its keys_file's (as config.Load read and validated them). The keys_file
// watcher follows the file the new section names.
func (g *Gateway) reloadAuth() error {
	g.keysMu.Lock()
	defer g.keysMu.Unlock()
	ks, err := g.authKeys(g.conf().Auth)
	if err != nil {
		return err
	}
	g.setKeys(ks)
	return nil
}

// authKeys is the set of the auth section's keys and its keys_file's, and
// notes the file's digest for the keys_file watcher. The keys_file is
// taken as config.Load read and validated it (one parse, not two: a
// 100k-key file is most of a start's or reload's work; the config lets go
// of it, so that it is not held twice), or read now for a config built in
// code or whose keys were taken already.
func (g *Gateway) authKeys(a *config.AuthConfig) (*config.KeySet, error) {
	g.keysFile = fileState{}
	if a.KeysFile == "" {
		return config.NewKeySet(a.Keys, nil, g.conf())
	}
	if lk := a.TakeLoadedKeysFile(); lk != nil {
		g.keysFile.sum = lk.Sum
		return lk.Set, nil
	}
	data, err := os.ReadFile(a.KeysFile)
	if err != nil {
		return nil, fmt.Errorf("auth.keys_file: %w", err)
	}
	ks, err := config.ReadKeySet(data, g.conf(), 0)
	if err != nil {
		return nil, fmt.Errorf("auth.keys_file %s: %w", a.KeysFile, err)
	}
	g.keysFile.sum = sha256.Sum256(data)
	return ks, nil
}

// keyed runs h for a request that must carry an API key when auth is
// configured: Authorization: Bearer KEY, or (xAPIKey: Anthropic's
// Messages and count_tokens) x-api-key: KEY. A missing or unknown key is
// answered 401 invalid_api_key before anything else is read. Every answer
// to a keyed request carries the key's x-ratelimit-* headers. keyed is
// for a local handler: the request takes its hold here (reserveLocal: the
// key's request limits, no tokens) and the headers follow from it. The
// model pipeline runs the same check itself and reserves after the door's
// count (keyIn and keyOut with reserves, limits.go), without this
// closure's frame under a request that waits in the queue (pipeline.go).
//
// The key's check and hold run in calls of their own (keyIn, keyOut), so
// that its frame, live while an answer streams, stays small.
func (g *Gateway) keyed(h handlerFunc, xAPIKey bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, x *exchange) error {
		t := g.keys.Load()
		if t == nil {
			return h(w, r, x) // open: no auth section
		}
		if err := g.keyIn(w, r, x, t, xAPIKey, false); err != nil {
			return err
		}
		defer keyOut(x, false)
		return h(w, r, x)
	}
}

// keyIn checks the key a request presented against t (x.key), counts it and, for
// a local handler (not reserves), takes its hold. A returned error is the
// request's answer; on nil, keyOut ends what keyIn began.
//
//go:noinline
func (g *Gateway) keyIn(w http.ResponseWriter, r *http.Request, x *exchange, t *keyTable, xAPIKey, reserves bool) error {
	k := t.lookup(presentedKey(r, xAPIKey))
	if k == nil {
		g.noKey.rejections.WithLabelValues(outcomeInvalidAPIKey).Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="maitred"`)
		return g.rejected(x, invalidKey(r, xAPIKey))
	}
	x.key = k
	km := k.metrics()
	km.requests.Inc()
	km.inFlight.Inc()
	if !reserves {
		// A local handler's request counts against the key's
		// request limits before anything is read (reserveLocal).
		if err := g.reserveLocal(w, x); err != nil {
			km.inFlight.Dec()
			if e, ok := err.(*Error); ok {
				return g.rejected(x, e)
			}
			return err
		}
		if x.res == nil && k.perMinute {
			rateHeaders(w.Header(), g.quota.Status(k.name, k.limits))
		}
	}
	return nil
}

// keyOut settles a local handler's hold (keyIn's) and counts the key's
// request out of flight.
func keyOut(x *exchange, reserves bool) {
	if !reserves && x.res != nil {
		x.res.Settle(0)
	}
	x.key.metrics().inFlight.Dec()
}

// lookup finds the key whose digest matches what was presented ("" finds
// nothing).
func (t *keyTable) lookup(presented string) *apiKey {
	if presented == "" {
		return nil
	}
	i, ok := t.byDigest[sha256.Sum256([]byte(presented))]
	if !ok {
		return nil
	}
	return &t.keys[i]
}

// presentedKey is the key a request carries: the Bearer token of its
// Authorization header, or, where Anthropic's header is accepted and
// there is no Authorization, its x-api-key.
func presentedKey(r *http.Request, xAPIKey bool) string {
	if v := r.Header.Get("Authorization"); v != "" {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return ""
		}
		return strings.TrimSpace(tok)
	}
	if xAPIKey {
		return strings.TrimSpace(r.Header.Get("X-Api-Key"))
	}
	return ""
}

// invalidKey is the 401 of a request without a valid key: the same for a
// wrong key and a missing one (the wording says only which header was
// expected), so that it reveals nothing about the keys that exist.
func invalidKey(r *http.Request, xAPIKey bool) *Error {
	msg := "Incorrect API key provided. Send a valid key as Authorization: Bearer KEY."
	if r.Header.Get("Authorization") == "" && (!xAPIKey || r.Header.Get("X-Api-Key") == "") {
		msg = "You didn't provide an API key. Send it as Authorization: Bearer KEY."
	}
	if xAPIKey {
		msg = strings.TrimSuffix(msg, ".") + " or x-api-key: KEY."
	}
	return &Error{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: codeInvalidAPIKey, Outcome: outcomeInvalidAPIKey,
		Layer: triage.LayerDoor, Message: msg}
}

// keyCatalog is the door's catalog as one key sees it: the models outside
// its allow-list do not exist, so the door answers them with the very 404
// an unknown model gets (listing only the key's models), before any
// counting. denied records that the name was a configured model the key
// may not use, for the outcome (model_not_allowed), which the client never
// sees.
type keyCatalog struct {
	base   *catalog
	key    *apiKey
	denied bool
}

func (c *keyCatalog) Lookup(name string) (admission.Model, bool) {
	m, ok := c.base.Lookup(name)
	if ok && !c.key.allows(name) {
		c.denied = true
		return admission.Model{}, false
	}
	return m, ok
}

func (c *keyCatalog) Names() []string { return c.key.visible(c.base.names) }

// visible filters names to the key's models, in their order.
func (k *apiKey) visible(names []string) []string {
	if k.all {
		return names
	}
	out := make([]string, 0, len(k.models))
	for _, n := range names {
		if k.models[n] {
			out = append(out, n)
		}
	}
	return out
}

// doorFor is the door a request goes through: the gateway's, or for a key
// with an allow-list one over the key's view of the catalog (kc, whose
// denied flag the caller reads after the check).
func (g *Gateway) doorFor(x *exchange) (*admission.Door, *keyCatalog) {
	if x.key == nil || x.key.all {
		return g.live().door, nil
	}
	kc := &keyCatalog{base: g.live().catalog, key: x.key}
	return admission.NewDoor(kc), kc
}

// notAllowed turns the door's unknown-model rejection of a model the key
// may not use into the outcome model_not_allowed: the answer's bytes stay
// those of an unknown model.
func notAllowed(kc *keyCatalog, e *Error) *Error {
	if kc != nil && kc.denied && e.Code == codeModelNotFound {
		e.Outcome = outcomeModelNotAllowed
	}
	return e
}

// modelNamed is a local handler's lookup of the model a request names
// (/tokenize, /detokenize): a configured model or a LoRA adapter of one
// (catalog.resolve) that the request's key may use, recorded on x; or the
// same 404 model_not_found as the door's, listing the models the key may
// use. An adapter is allowed only when the key's allow-list names the
// adapter itself: adapters are often one tenant's fine-tune.
func (g *Gateway) modelNamed(x *exchange, name string) (*modelRuntime, error) {
	rt, only, ok := g.live().catalog.resolve(name)
	names := g.live().catalog.names
	if x.key != nil {
		names = x.key.visible(names)
	}
	if !ok || (x.key != nil && !x.key.allows(name)) {
		e := rejection(admission.UnknownModelRejection(name, names))
		if ok {
			e.Outcome = outcomeModelNotAllowed
		}
		return nil, e
	}
	x.setModel(rt, name, only)
	return rt, nil
}

// keyMetrics are the metric children of one key (by name; "" for requests
// that presented no valid key).
type keyMetrics struct {
	requests    prometheus.Counter
	inFlight    prometheus.Gauge
	tokens      *prometheus.CounterVec // kind: prompt, completion
	rejections  *prometheus.CounterVec // reason
	rateLimited *prometheus.CounterVec // limit
}

func (m *metrics) forKey(name string) keyMetrics {
	l := prometheus.Labels{"key": name}
	return keyMetrics{
		requests:    m.keyRequests.With(l),
		inFlight:    m.keyInFlight.With(l),
		tokens:      m.keyTokens.MustCurryWith(l),
		rejections:  m.keyRejections.MustCurryWith(l),
		rateLimited: m.keyRateLimited.MustCurryWith(l),
	}
}
