package quota

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

const (
	minuteSpan = int64(time.Minute)
	minuteGran = int64(time.Second) // requests and tokens per minute: per-second buckets
	daySpan    = int64(24 * time.Hour)
	dayGran    = int64(time.Minute) // tokens per day: per-minute buckets

	// inFlightGuess is RetryAfter when requests in flight must end before
	// the ask fits: when they end cannot be known.
	inFlightGuess = time.Second

	// sweepEvery is how often a shard drops the state of its idle keys.
	sweepEvery = int64(time.Minute)

	numShards = 64 // a power of two
)

// Local is the in-process Store: the counters of every key in a map split
// into shards, each behind its own mutex. It starts no goroutines and uses
// no timers: windows expire by the clock it was given, when a key is used.
type Local struct {
	now    func() time.Time
	epoch  time.Time
	seed   maphash.Seed
	shards [numShards]shard
}

var _ Store = (*Local)(nil)

type shard struct {
	mu        sync.Mutex
	keys      map[string]*keyState
	nextSweep int64
	_         [40]byte // a shard per cache line
}

// keyState is one key's counters. Requests count in req from their Reserve
// for a minute; tokens are held in flight (tokens, dayTokens) until Settle
// and then count in tok (a minute) and day (a day) from the Settle.
type keyState struct {
	inflight  int64 // requests reserved, not settled
	tokens    int64 // tokens reserved by them
	dayTokens int64 // the part of tokens reserved under a day limit
	req       window
	tok       window
	day       window
}

// NewLocal returns an empty Local reading time from now (time.Now in
// production; a test's clock otherwise). Durations are measured from the
// first reading, with its monotonic clock when it has one, so a wall-clock
// step neither frees nor locks out a key.
func NewLocal(now func() time.Time) *Local {
	l := &Local{now: now, seed: maphash.MakeSeed()}
	l.epoch = now()
	for i := range l.shards {
		l.shards[i].keys = make(map[string]*keyState)
	}
	return l
}

func (l *Local) tick() int64 { return int64(l.now().Sub(l.epoch)) }

func (l *Local) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)&(numShards-1)]
}

// Reserve takes one request, one concurrency slot and tokens for key under
// lim, all or nothing. It never blocks on anything but the key's shard, and
// does not look at ctx.
func (l *Local) Reserve(_ context.Context, key string, lim Limits, tokens int64) (Reservation, error) {
	tokens = max(tokens, 0)
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := l.tick()
	sh.sweep(now)
	st := sh.keys[key]
	if st == nil {
		st = &keyState{}
		sh.keys[key] = st
	} else {
		st.expire(now)
	}
	if d := st.check(now, lim, tokens); d != nil {
		if st.idle() {
			delete(sh.keys, key)
		}
		return nil, d
	}
	day := lim.TokensPerDay > 0
	st.inflight++
	st.tokens += tokens
	if day {
		st.dayTokens += tokens
	}
	st.req.add(expireAt(now, minuteSpan, minuteGran), 1)
	return &reservation{l: l, sh: sh, st: st, key: key, tokens: tokens, day: day, status: st.status(now, lim)}, nil
}

// Status reports key's window under lim without taking anything.
func (l *Local) Status(key string, lim Limits) Status {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := l.tick()
	st := sh.keys[key]
	if st == nil {
		var empty keyState
		return empty.status(now, lim)
	}
	st.expire(now)
	s := st.status(now, lim)
	if st.idle() {
		delete(sh.keys, key)
	}
	return s
}

// keyCount is the number of keys with state (for tests of the memory bound).
func (l *Local) keyCount() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// sweep drops the state of idle keys, at most once per sweepEvery: a key
// that is not used again would otherwise keep its state for ever.
func (sh *shard) sweep(now int64) {
	if now < sh.nextSweep {
		return
	}
	sh.nextSweep = now + sweepEvery
	for k, st := range sh.keys {
		st.expire(now)
		if st.idle() {
			delete(sh.keys, k)
		}
	}
}

func (st *keyState) expire(now int64) {
	st.req.expire(now)
	st.tok.expire(now)
	st.day.expire(now)
}

// idle reports whether the state holds nothing: dropping it changes no
// answer.
func (st *keyState) idle() bool {
	return st.inflight == 0 && st.req.empty() && st.tok.empty() && st.day.empty()
}

// check returns the denial of a request asking for tokens under lim, or
// nil when every limit lets it in. A request that can never fit is refused
// as such first; otherwise, of the limits that refuse, the one that frees
// last is reported, so that RetryAfter is when all of them would fit.
func (st *keyState) check(now int64, lim Limits, tokens int64) *Denied {
	if lim.TokensPerMinute > 0 && tokens > lim.TokensPerMinute {
		return &Denied{Kind: Tokens, Limit: lim.TokensPerMinute, InUse: st.tokens + st.tok.sum, Asked: tokens,
			Never: true, Status: st.status(now, lim)}
	}
	if lim.TokensPerDay > 0 && tokens > lim.TokensPerDay {
		return &Denied{Kind: TokensPerDay, Limit: lim.TokensPerDay, InUse: st.dayTokens + st.day.sum, Asked: tokens,
			Never: true, Status: st.status(now, lim)}
	}
	var d Denied
	refuse := func(c Denied) {
		if d.Kind == "" || c.RetryAfter > d.RetryAfter {
			d = c
		}
	}
	if lim.TokensPerMinute > 0 && st.tokens+st.tok.sum+tokens > lim.TokensPerMinute {
		after, guess := retryAfter(now, &st.tok, st.tokens, tokens, lim.TokensPerMinute)
		refuse(Denied{Kind: Tokens, Limit: lim.TokensPerMinute, InUse: st.tokens + st.tok.sum, Asked: tokens,
			RetryAfter: after, Estimated: guess})
	}
	if lim.RequestsPerMinute > 0 && st.req.sum+1 > lim.RequestsPerMinute {
		after, guess := retryAfter(now, &st.req, 0, 1, lim.RequestsPerMinute)
		refuse(Denied{Kind: Requests, Limit: lim.RequestsPerMinute, InUse: st.req.sum, Asked: 1,
			RetryAfter: after, Estimated: guess})
	}
	if lim.TokensPerDay > 0 && st.dayTokens+st.day.sum+tokens > lim.TokensPerDay {
		after, guess := retryAfter(now, &st.day, st.dayTokens, tokens, lim.TokensPerDay)
		refuse(Denied{Kind: TokensPerDay, Limit: lim.TokensPerDay, InUse: st.dayTokens + st.day.sum, Asked: tokens,
			RetryAfter: after, Estimated: guess})
	}
	if lim.MaxConcurrent > 0 && st.inflight >= lim.MaxConcurrent {
		refuse(Denied{Kind: Concurrent, Limit: lim.MaxConcurrent, InUse: st.inflight, Asked: 1,
			RetryAfter: inFlightGuess, Estimated: true})
	}
	if d.Kind == "" {
		return nil
	}
	out := d // only a denial leaves the stack
	out.Status = st.status(now, lim)
	return &out
}

// retryAfter is the time until asked fits under limit in a window w that
// also holds inflight (reserved, not settled), if nothing else arrives:
// exact when the settled usage that expires is enough; otherwise requests
// in flight must end, which cannot be known: the guess is inFlightGuess,
// or when settled usage must expire as well (supposing the requests in
// flight used nothing), that expiry.
func retryAfter(now int64, w *window, inflight, asked, limit int64) (time.Duration, bool) {
	need := w.sum + inflight + asked - limit
	if at, ok := w.freeAt(need); ok {
		return time.Duration(at - now), false
	}
	after := inFlightGuess
	if at, ok := w.freeAt(need - inflight); ok {
		after = max(after, time.Duration(at-now))
	}
	return after, true
}

// status is the key's Status under lim (see Status for the definitions).
func (st *keyState) status(now int64, lim Limits) Status {
	var s Status
	if n := lim.RequestsPerMinute; n > 0 {
		s.LimitRequests = n
		s.RemainingRequests = max(0, n-st.req.sum)
		s.ResetRequests = time.Duration(st.req.lastExp(now) - now)
	}
	if n := lim.TokensPerMinute; n > 0 {
		s.LimitTokens = n
		s.RemainingTokens = max(0, n-st.tokens-st.tok.sum)
		reset := st.tok.lastExp(now)
		if st.tokens > 0 {
			reset = max(reset, expireAt(now, minuteSpan, minuteGran))
		}
		s.ResetTokens = time.Duration(reset - now)
	}
	return s
}

type reservation struct {
	l      *Local
	sh     *shard
	st     *keyState // in sh.keys while this is in flight
	key    string
	tokens int64
	day    bool // reserved under a day limit: its usage counts in the day window
	done   bool // settled; guarded by sh.mu
	status Status
}

func (r *reservation) Status() Status { return r.status }

func (r *reservation) Settle(used int64) {
	sh := r.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	now := r.l.tick()
	st := r.st
	st.expire(now)
	st.inflight--
	st.tokens -= r.tokens
	if r.day {
		st.dayTokens -= r.tokens
	}
	if used < 0 {
		used = r.tokens
	}
	st.tok.add(expireAt(now, minuteSpan, minuteGran), used)
	if r.day {
		st.day.add(expireAt(now, daySpan, dayGran), used)
	}
	if st.idle() {
		delete(sh.keys, r.key)
	}
}
