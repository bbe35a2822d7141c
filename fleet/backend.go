package fleet

import (
	"net/url"

	"github.com/maitred-dev/maitred/config"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
	// kvEvents is its entry's kv_events (nil: none), followed by
	// RunEvents.
	kvEvents *config.KVEventsConfig
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
	// listedAt is when the prober last listed the adapters (ListEvery).
	listedAt time.Time
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

// Enter counts a request in flight on b; Leave, called once when it is
// done, counts it out.
func (b *Backend) Enter() { b.inFlight.Add(1) }

// Leave ends what Enter counted.
func (b *Backend) Leave() { b.inFlight.Add(-1) }

func (b *Backend) setLocked(now time.Time, s State, reason string) (changed bool) {
	if b.state == s && b.reason == reason {
		return false
	}
	b.state, b.reason, b.since = s, reason, now
	return true
}

// warmedBefore reports whether b was ever ready (it then has a recorded
// warm-up time). Call with b.mu held.
func (b *Backend) warmedBefore() bool { return b.warmupTime > 0 }

func (b *Backend) setMismatch(mm *Mismatch) {
	b.mu.Lock()
	b.mismatch = mm
	b.mu.Unlock()
}
