package prefixindex

import (
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/maitred-dev/maitred/kvevents"
)

// MaxBackends is how many backends one model's index tracks: a backend
// past it has no index and is routed as without events.
const MaxBackends = 64

// State is a backend's index state, as the subscriber reports it.
type State uint8

const (
	// Unknown: no events yet (never connected, or connecting).
	Unknown State = iota
	// Live: subscribed and in sequence; the index is usable for routing.
	Live
	// Stale: the subscription is down (unreachable, garbage) or out of
	// sequence: routing falls back for the model until it is Live again.
	Stale
)

var stateNames = [...]string{"unknown", "live", "stale"}

func (s State) String() string { return stateNames[s] }

// Index is one model's prefix-cache index: which backends hold which
// blocks, keyed by maitred's own chained key (Key). Safe for concurrent
// use: events take the write lock, Match the read lock.
type Index struct {
	blockSize int
	maxBlocks int
	now       func() time.Time

	mu       sync.RWMutex
	blocks   map[Key]uint64 // holders, one bit per backend
	backends map[string]*backend
	free     uint64 // bits not given to a backend
}

type backend struct {
	name string
	bit  uint64
	// vllm maps vLLM's block hash to this index's key (parents and
	// removals name blocks by vLLM's hash); held counts the stored blocks
	// per key (data-parallel ranks may each hold the same block).
	vllm map[kvevents.Hash]Key
	held map[Key]heldBlock
	// children counts the held blocks whose parent is a key; orphans
	// are the held blocks whose parent is not held (a parent removed
	// before its child: not vLLM's eviction order). While there are
	// none, what the backend holds is prefix-closed (query.go).
	children map[Key]int32
	orphans  int
	capacity int // blocks; 0: only the index's cap
	st       Status
	// ranks: each data-parallel rank's stream is live or why not.
	rankLive   []bool
	rankReason []string
}

// Status is a backend's index, for /debug and the status page.
type Status struct {
	State  State
	Reason string    // why it is not Live ("" when Live)
	Since  time.Time // in this state since
	// LastClear says why the index was last cleared by the subscriber
	// (a gap not replayable, a publisher restart, garbage).
	LastClear string
	Blocks    int // blocks indexed
	// Events, Gaps, Replays, Clears and DecodeErrors count since the
	// backend joined; Skipped counts stored blocks not indexed (extra
	// keys, another block size or medium, an unknown parent).
	Events, Gaps, Replays, Clears, DecodeErrors, Skipped uint64
}

// New returns an index for blocks of blockSize tokens, holding at most
// maxBlocks blocks per backend (0: no cap but the backend's capacity).
func New(blockSize, maxBlocks int, now func() time.Time) *Index {
	if now == nil {
		now = time.Now
	}
	return &Index{blockSize: blockSize, maxBlocks: maxBlocks, now: now, blocks: map[Key]uint64{},
		backends: map[string]*backend{}, free: ^uint64(0)}
}

// BlockSize is the block size the index keys blocks by.
func (x *Index) BlockSize() int { return x.blockSize }

// Add makes name a backend of the index (no-op when it is one) with a
// capacity in blocks (its KV cache; 0: unknown) and its number of
// data-parallel ranks (one event stream each, one cache). False when the
// index has MaxBackends already.
func (x *Index) Add(name string, capacityBlocks, ranks int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ranks = max(ranks, 1)
	if b := x.backends[name]; b != nil {
		b.capacity = capacityBlocks
		if len(b.rankLive) != ranks {
			b.rankLive, b.rankReason = make([]bool, ranks), make([]string, ranks)
			b.st.State, b.st.Reason = Unknown, "no events yet"
		}
		return true
	}
	if x.free == 0 {
		return false
	}
	bit := uint64(1) << bits.TrailingZeros64(x.free)
	x.free &^= bit
	x.backends[name] = &backend{name: name, bit: bit, vllm: map[kvevents.Hash]Key{}, held: map[Key]heldBlock{}, children: map[Key]int32{},
		capacity: capacityBlocks, st: Status{Reason: "no events yet", Since: x.now()},
		rankLive: make([]bool, ranks), rankReason: make([]string, ranks)}
	return true
}

// SetCapacity updates the backend's capacity in blocks (0: unknown).
func (x *Index) SetCapacity(name string, capacityBlocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if b := x.backends[name]; b != nil {
		b.capacity = capacityBlocks
	}
}

// Remove forgets a backend and every block it held.
func (x *Index) Remove(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.backends[name]
	if b == nil {
		return
	}
	x.clearLocked(b)
	delete(x.backends, name)
	x.free |= b.bit
}

// SetState records a rank's stream state: the backend is Live when every
// rank is; a backend that is not is not used for routing (Match reports
// it unusable).
func (x *Index) SetState(name string, rank int, live bool, reason string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.backends[name]
	if b == nil || rank < 0 || rank >= len(b.rankLive) {
		return
	}
	b.rankLive[rank], b.rankReason[rank] = live, reason
	s, why := Live, ""
	for r, ok := range b.rankLive {
		if !ok {
			s, why = Stale, b.rankReason[r]
			if why == "" {
				s, why = Unknown, "no events yet"
			}
			if len(b.rankLive) > 1 {
				why = fmt.Sprintf("rank %d: %s", r, why)
			}
			break
		}
	}
	if b.st.State != s || b.st.Reason != why {
		b.st.State, b.st.Reason, b.st.Since = s, why, x.now()
	}
}

// Clear drops every block of the backend: AllBlocksCleared, a gap that
// could not be replayed, a publisher restart.
func (x *Index) Clear(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if b := x.backends[name]; b != nil {
		x.clearLocked(b)
	}
}

func (x *Index) clearLocked(b *backend) {
	for k := range b.held {
		x.dropBitLocked(k, b.bit)
	}
	clear(b.held)
	clear(b.vllm)
	clear(b.children)
	b.orphans = 0
	b.st.Clears++
}

func (x *Index) dropBitLocked(k Key, bit uint64) {
	if h := x.blocks[k] &^ bit; h == 0 {
		delete(x.blocks, k)
	} else {
		x.blocks[k] = h
	}
}

// Count records a counted condition of a backend's subscription.
type Count uint8

const (
	CountGap Count = iota
	CountReplay
	CountDecodeError
)

// Note counts a gap, a replay or a decode error of the backend.
func (x *Index) Note(name string, c Count) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.backends[name]
	if b == nil {
		return
	}
	switch c {
	case CountGap:
		b.st.Gaps++
	case CountReplay:
		b.st.Replays++
	case CountDecodeError:
		b.st.DecodeErrors++
	}
}

// Status returns the backend's index status (false: not a backend).
func (x *Index) Status(name string) (Status, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	b := x.backends[name]
	if b == nil {
		return Status{}, false
	}
	st := b.st
	st.Blocks = len(b.vllm)
	return st, true
}
