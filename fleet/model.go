package fleet

import (
	"slices"
	"sync/atomic"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/prefixindex"
)

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
	// index and precise: routing: precise (events.go); nil otherwise.
	index   atomic.Pointer[prefixindex.Index]
	precise atomic.Pointer[config.PreciseRoutingConfig]
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
