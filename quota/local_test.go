package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a test's clock: time moves only when the test says so.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// admit reserves and fails the test when refused.
func admit(t *testing.T, s Store, key string, lim Limits, tokens int64) Reservation {
	t.Helper()
	r, err := s.Reserve(context.Background(), key, lim, tokens)
	if err != nil {
		t.Fatalf("Reserve(%s, %d): %v", key, tokens, err)
	}
	return r
}

// refuse reserves and fails the test unless refused.
func refuse(t *testing.T, s Store, key string, lim Limits, tokens int64) *Denied {
	t.Helper()
	r, err := s.Reserve(context.Background(), key, lim, tokens)
	if err == nil {
		r.Settle(0)
		t.Fatalf("Reserve(%s, %d) admitted, want a denial", key, tokens)
	}
	var d *Denied
	if !errors.As(err, &d) {
		t.Fatalf("Reserve error %T %v, want *Denied", err, err)
	}
	return d
}

func TestTokensWindowSlides(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000}
	admit(t, l, "a", lim, 600).Settle(600)
	c.advance(30 * time.Second)
	d := refuse(t, l, "a", lim, 500)
	want := Denied{Kind: Tokens, Limit: 1000, InUse: 600, Asked: 500, RetryAfter: 30 * time.Second,
		Status: Status{LimitTokens: 1000, RemainingTokens: 400, ResetTokens: 30 * time.Second}}
	if *d != want {
		t.Fatalf("denial\n got %+v\nwant %+v", *d, want)
	}
	admit(t, l, "a", lim, 400).Settle(400) // what is left fits
	c.advance(30 * time.Second)            // the 600 expire
	r := admit(t, l, "a", lim, 500)
	if got := r.Status().RemainingTokens; got != 100 {
		t.Errorf("remaining after 400 settled and 500 reserved = %d, want 100", got)
	}
}

// A reservation counts from its Reserve; its usage counts for a minute from
// its Settle, not from its start.
func TestUsageExpiresAMinuteAfterTheRequestEnded(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000}
	r := admit(t, l, "a", lim, 700)
	c.advance(50 * time.Second)
	r.Settle(700)
	c.advance(50 * time.Second) // 100 s after the start, 50 s after the end
	d := refuse(t, l, "a", lim, 700)
	if d.InUse != 700 || d.RetryAfter != 10*time.Second || d.Estimated {
		t.Fatalf("denial %+v, want 700 in use, exactly 10s", d)
	}
}

func TestSettlementGivesBack(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000}
	r := admit(t, l, "a", lim, 800)
	refuse(t, l, "a", lim, 300)
	r.Settle(80) // stopped at a tenth of max_tokens
	r2 := admit(t, l, "a", lim, 920)
	if s := r2.Status(); s.RemainingTokens != 0 {
		t.Errorf("remaining %d, want 0", s.RemainingTokens)
	}
	r2.Settle(-1) // unknown: keeps what was reserved
	d := refuse(t, l, "a", lim, 1)
	if d.InUse != 1000 {
		t.Errorf("in use %d after an unknown settlement, want 1000", d.InUse)
	}
}

// Usage above the reservation is debt: the window carries it, and the key is
// refused only until it expires.
func TestDebtExpires(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000}
	admit(t, l, "a", lim, 100).Settle(2500)
	c.advance(10 * time.Second)
	d := refuse(t, l, "a", lim, 1)
	if d.InUse != 2500 || d.RetryAfter != 50*time.Second || d.Estimated || d.Never {
		t.Fatalf("denial %+v, want 2500 in use, retry in exactly 50s", d)
	}
	if d.Status.RemainingTokens != 0 {
		t.Errorf("remaining %d, want 0", d.Status.RemainingTokens)
	}
	c.advance(d.RetryAfter)
	admit(t, l, "a", lim, 1000)
}

func TestNever(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limits
		ask  int64
		kind Kind
	}{
		{"per minute", Limits{TokensPerMinute: 1000, TokensPerDay: 5000}, 1001, Tokens},
		{"per day", Limits{TokensPerMinute: 10000, TokensPerDay: 5000}, 5001, TokensPerDay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLocal(newClock().now)
			d := refuse(t, l, "a", tc.lim, tc.ask)
			if !d.Never || d.RetryAfter != 0 || d.Kind != tc.kind || d.Asked != tc.ask {
				t.Fatalf("denial %+v, want Never %s for %d", d, tc.kind, tc.ask)
			}
			if msg := d.Error(); !strings.Contains(msg, "never fit") || !strings.Contains(msg, fmt.Sprint(tc.ask)) {
				t.Errorf("message %q does not say it can never fit", msg)
			}
			if n := l.keyCount(); n != 0 {
				t.Errorf("%d keys kept after a refusal on an empty key, want 0", n)
			}
			admit(t, l, "a", tc.lim, tc.ask-1) // exactly the limit fits
		})
	}
}

// A retry at exactly RetryAfter succeeds when nothing else arrived, and not
// a nanosecond earlier (RetryAfter is not padded).
func TestRetryAfterIsHonest(t *testing.T) {
	type op struct {
		at     time.Duration // since the start
		tokens int64         // reserved and settled at once
	}
	for _, tc := range []struct {
		name string
		ops  []op
		now  time.Duration
		ask  int64
		want time.Duration
	}{
		{"one entry", []op{{0, 900}}, 10 * time.Second, 200, 50 * time.Second},
		{"needs two to expire", []op{{0, 300}, {5 * time.Second, 300}, {20 * time.Second, 300}}, 30 * time.Second, 500, 35 * time.Second},
		{"the oldest suffices", []op{{0, 300}, {5 * time.Second, 300}, {20 * time.Second, 300}}, 30 * time.Second, 400, 30 * time.Second},
		{"ended mid-second: expiry rounds up", []op{{1500 * time.Millisecond, 1000}}, 2 * time.Second, 1, 60 * time.Second},
		{"debt", []op{{0, 5000}}, 59 * time.Second, 1000, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			l := NewLocal(c.now)
			lim := Limits{TokensPerMinute: 1000}
			var at time.Duration
			for _, o := range tc.ops {
				c.advance(o.at - at)
				at = o.at
				r, err := l.Reserve(context.Background(), "a", lim, 0)
				if err != nil {
					t.Fatal(err)
				}
				r.Settle(o.tokens)
			}
			c.advance(tc.now - at)
			d := refuse(t, l, "a", lim, tc.ask)
			if d.RetryAfter != tc.want || d.Estimated {
				t.Fatalf("RetryAfter %v (estimated %v), want exactly %v", d.RetryAfter, d.Estimated, tc.want)
			}
			c.advance(d.RetryAfter - 1)
			refuse(t, l, "a", lim, tc.ask)
			c.advance(1)
			admit(t, l, "a", lim, tc.ask)
		})
	}
}

// When requests in flight must end first, RetryAfter is a short guess and
// says so.
func TestRetryAfterWaitingForRequestsInFlight(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000}
	admit(t, l, "a", lim, 0).Settle(300) // expires at 60s
	c.advance(10 * time.Second)
	r := admit(t, l, "a", lim, 600)
	d := refuse(t, l, "a", lim, 800)
	if !d.Estimated || d.RetryAfter != 50*time.Second {
		t.Fatalf("denial %+v, want an estimate of 50s (the 300 must expire as well)", d)
	}
	d = refuse(t, l, "a", lim, 500)
	if !d.Estimated || d.RetryAfter != inFlightGuess {
		t.Fatalf("denial %+v, want the in-flight guess %v", d, inFlightGuess)
	}
	d = refuse(t, l, "a", lim, 200)
	if d.Estimated || d.RetryAfter != 50*time.Second {
		t.Fatalf("denial %+v, want exactly 50s: the 300 expiring suffices", d)
	}
	r.Settle(0)
	admit(t, l, "a", lim, 700)
}

func TestRequestsWindow(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 3}
	for range 3 {
		r := admit(t, l, "a", lim, 10)
		r.Settle(10)
		c.advance(10 * time.Second)
	}
	// now 30s: requests counted at 0, 10, 20 expire at 60, 70, 80
	d := refuse(t, l, "a", lim, 10)
	want := Denied{Kind: Requests, Limit: 3, InUse: 3, Asked: 1, RetryAfter: 30 * time.Second,
		Status: Status{LimitRequests: 3, RemainingRequests: 0, ResetRequests: 50 * time.Second}}
	if *d != want {
		t.Fatalf("denial\n got %+v\nwant %+v", *d, want)
	}
	if !strings.Contains(d.Error(), "requests per minute: limit 3, 3 in use") {
		t.Errorf("message %q", d.Error())
	}
	c.advance(30 * time.Second)
	r := admit(t, l, "a", lim, 10)
	if s := r.Status(); s.RemainingRequests != 0 || s.ResetRequests != 60*time.Second {
		t.Errorf("status %+v, want 0 remaining, reset 60s", s)
	}
}

// A request counts for a minute from its start, however long it runs.
func TestRequestCountsFromItsStart(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 1}
	r := admit(t, l, "a", lim, 0)
	c.advance(59 * time.Second)
	refuse(t, l, "a", lim, 0)
	c.advance(time.Second)
	admit(t, l, "a", lim, 0) // the first is still in flight
	r.Settle(0)
}

func TestDayWindow(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000, TokensPerDay: 1500}
	admit(t, l, "a", lim, 1000).Settle(1000)
	c.advance(90 * time.Second)
	admit(t, l, "a", lim, 400).Settle(400) // ends at 1m30s
	c.advance(time.Hour)
	d := refuse(t, l, "a", lim, 200)
	if d.Kind != TokensPerDay || d.InUse != 1400 || d.RetryAfter != 23*time.Hour-90*time.Second || d.Estimated {
		t.Fatalf("denial %+v, want per day, 1400 in use, retry in 22h58m30s", d)
	}
	c.advance(d.RetryAfter - 1)
	refuse(t, l, "a", lim, 200)
	c.advance(1)
	admit(t, l, "a", lim, 200).Settle(200)
	// the 400 settled at 1m30s expire at 24h2m (rounded up to the minute)
	c.advance(2 * time.Minute)
	admit(t, l, "a", lim, 1000)
}

func TestConcurrencySlots(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{MaxConcurrent: 2}
	r1 := admit(t, l, "a", lim, 0)
	r2 := admit(t, l, "a", lim, 0)
	d := refuse(t, l, "a", lim, 0)
	if d.Kind != Concurrent || d.Limit != 2 || d.InUse != 2 || !d.Estimated || d.RetryAfter != inFlightGuess {
		t.Fatalf("denial %+v", d)
	}
	r1.Settle(0)
	r1.Settle(0) // idempotent: frees one slot, not two
	r3 := admit(t, l, "a", lim, 0)
	refuse(t, l, "a", lim, 0)
	r2.Settle(0)
	r3.Settle(0)
	admit(t, l, "a", lim, 0)
	admit(t, l, "a", lim, 0)
}

func TestSettleIsIdempotent(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{TokensPerMinute: 1000, TokensPerDay: 10000}
	r := admit(t, l, "a", lim, 500)
	r.Settle(100)
	r.Settle(900)
	r.Settle(-1)
	if s := l.Status("a", lim); s.RemainingTokens != 900 {
		t.Fatalf("remaining %d after settling 100 (then 900 and unknown, ignored), want 900", s.RemainingTokens)
	}
}

// Limits come with every call: a changed limit applies to the next one,
// against what the window already holds.
func TestLimitsChangeBetweenCalls(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	r := admit(t, l, "a", Limits{TokensPerMinute: 1000}, 800)
	admit(t, l, "a", Limits{TokensPerMinute: 2000}, 900).Settle(900)
	d := refuse(t, l, "a", Limits{TokensPerMinute: 1500}, 1)
	if d.InUse != 1700 || d.Limit != 1500 {
		t.Fatalf("denial %+v, want 1700 in use of 1500", d)
	}
	if s := l.Status("a", Limits{TokensPerMinute: 500, RequestsPerMinute: 5}); s.LimitTokens != 500 || s.RemainingTokens != 0 ||
		s.LimitRequests != 5 || s.RemainingRequests != 3 {
		t.Errorf("status %+v", s)
	}
	admit(t, l, "a", Limits{}, 1_000_000).Settle(0) // no limits: anything goes
	r.Settle(800)
}

func TestNoLimits(t *testing.T) {
	l := NewLocal(newClock().now)
	for range 100 {
		r := admit(t, l, "a", Limits{}, 1<<40)
		if s := r.Status(); s != (Status{}) {
			t.Fatalf("status %+v without limits, want zero", s)
		}
	}
}

func TestStatus(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 10, TokensPerMinute: 1000}
	if s, want := l.Status("a", lim), (Status{LimitRequests: 10, RemainingRequests: 10, LimitTokens: 1000, RemainingTokens: 1000}); s != want {
		t.Fatalf("unused key: %+v, want %+v", s, want)
	}
	if n := l.keyCount(); n != 0 {
		t.Errorf("Status kept state for an unused key: %d keys", n)
	}
	admit(t, l, "a", lim, 300).Settle(250)
	c.advance(20 * time.Second)
	r := admit(t, l, "a", lim, 100) // in flight
	want := Status{
		LimitRequests: 10, RemainingRequests: 8, ResetRequests: 60 * time.Second,
		LimitTokens: 1000, RemainingTokens: 650, ResetTokens: 60 * time.Second, // the 100 in flight would count for a minute
	}
	if s := r.Status(); s != want {
		t.Fatalf("status\n got %+v\nwant %+v", s, want)
	}
	c.advance(10 * time.Second)
	r.Settle(40)
	want = Status{
		LimitRequests: 10, RemainingRequests: 9, ResetRequests: 50 * time.Second,
		LimitTokens: 1000, RemainingTokens: 960, ResetTokens: 60 * time.Second,
	}
	c.advance(30 * time.Second) // the first request and its 250 expired at 60s
	want.ResetRequests -= 30 * time.Second
	want.ResetTokens -= 30 * time.Second
	want.RemainingRequests = 9
	if s := l.Status("a", lim); s != want {
		t.Fatalf("status\n got %+v\nwant %+v", s, want)
	}
}

// Of several limits that refuse, the one that frees last is reported.
func TestDenialNamesTheLimitThatFreesLast(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 2, TokensPerMinute: 1000}
	admit(t, l, "a", lim, 10).Settle(10)
	c.advance(20 * time.Second)
	admit(t, l, "a", lim, 900).Settle(900)
	c.advance(10 * time.Second)
	// requests: the first expires at 60s (30s from now), and so do the 10
	// tokens; asking 105 tokens needs the 900 to expire as well (50s)
	d := refuse(t, l, "a", lim, 105)
	if d.Kind != Tokens || d.RetryAfter != 50*time.Second {
		t.Fatalf("denial %+v, want tokens in 50s", d)
	}
	d = refuse(t, l, "a", lim, 95)
	if d.Kind != Tokens || d.RetryAfter != 30*time.Second {
		t.Fatalf("denial %+v, want tokens (reported first on a tie) in 30s", d)
	}
	d = refuse(t, l, "a", lim, 50)
	if d.Kind != Requests || d.RetryAfter != 30*time.Second {
		t.Fatalf("denial %+v, want requests in 30s", d)
	}
}

func TestIdleKeysAreDropped(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 100, TokensPerMinute: 1000}
	for i := range 1000 {
		admit(t, l, fmt.Sprint("key", i), lim, 10).Settle(10)
	}
	if n := l.keyCount(); n != 1000 {
		t.Fatalf("%d keys, want 1000", n)
	}
	c.advance(time.Minute + time.Second)
	// one request in each shard sweeps it
	for i := range numShards {
		for j := 0; ; j++ {
			k := fmt.Sprint("new", j)
			if l.shard(k) == &l.shards[i] {
				admit(t, l, k, lim, 10).Settle(0)
				break
			}
		}
	}
	if n := l.keyCount(); n != numShards {
		t.Fatalf("%d keys after a minute idle and a sweep, want the %d new ones", n, numShards)
	}
	// a day limit keeps a key for a day
	admit(t, l, "daily", Limits{TokensPerDay: 100}, 10).Settle(10)
	c.advance(23 * time.Hour)
	if s := refuse(t, l, "daily", Limits{TokensPerDay: 100}, 91); s.InUse != 10 {
		t.Fatalf("day window forgot: %+v", s)
	}
	c.advance(time.Hour + time.Minute)
	l.Status("daily", Limits{})
	for i := range numShards {
		l.shards[i].mu.Lock()
		l.shards[i].sweep(l.tick())
		l.shards[i].mu.Unlock()
	}
	if n := l.keyCount(); n != 0 {
		t.Fatalf("%d keys left after everything expired, want 0", n)
	}
}

// A busy key keeps at most a window's worth of buckets.
func TestKeyMemoryIsBounded(t *testing.T) {
	c := newClock()
	l := NewLocal(c.now)
	lim := Limits{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 40, TokensPerDay: 1 << 50}
	for range 25 * 3600 * 10 / 7 { // 25 hours, a request every 700 ms: every bucket used
		admit(t, l, "a", lim, 10).Settle(10)
		c.advance(700 * time.Millisecond)
	}
	st := l.shard("a").keys["a"]
	for name, w := range map[string]struct {
		w   *window
		max int
	}{
		"requests": {&st.req, 61}, "tokens": {&st.tok, 61}, "day": {&st.day, 24*60 + 1},
	} {
		if live := len(w.w.b) - w.w.head; live > w.max || live < w.max-2 || cap(w.w.b) > 2*w.max {
			t.Errorf("%s window: %d live buckets (capacity %d), want %d at most and nearly as many", name, live, cap(w.w.b), w.max)
		}
	}
}
