package admission

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func always() bool { return true }

func testPool(slots []SlotConfig, mutate func(*PoolConfig)) *Pool {
	cfg := PoolConfig{QueueSize: 4, QueueTimeout: 10 * time.Second, Classes: 2, EjectAfter: 3, EjectFor: 5 * time.Second, AffinityLoad: 1.5}
	if mutate != nil {
		mutate(&cfg)
	}
	return NewPool("m", cfg, slots, nil)
}

func one(maxInFlight, kv int) []SlotConfig {
	return []SlotConfig{{Name: "b0", Ready: always, MaxInFlight: maxInFlight, KVTokens: kv}}
}

func TestPoolFIFOWithinClassAndPriorityAcross(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), nil)
		first, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
		if o != Admitted {
			t.Fatal(o)
		}
		var order []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		enqueue := func(name string, class int) {
			wg.Go(func() {
				l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Class: class})
				if o != Admitted {
					t.Errorf("%s: %s", name, o)
					return
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				l.Release(Succeeded)
			})
			synctest.Wait() // queued in this order
		}
		enqueue("low-1", 1)
		enqueue("high-1", 0)
		enqueue("low-2", 1)
		enqueue("high-2", 0)
		first.Release(Succeeded)
		wg.Wait()
		want := []string{"high-1", "high-2", "low-1", "low-2"}
		if len(order) != 4 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] || order[3] != want[3] {
			t.Errorf("order %v, want %v", order, want)
		}
	})
}

func TestPoolQueueFullTimeoutAndClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), func(c *PoolConfig) { c.QueueSize = 2 })
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
		// Two wait: one until its deadline, one whose client leaves.
		timedOut := make(chan Outcome, 1)
		start := time.Now()
		var waited time.Duration
		go func() {
			_, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
			waited = time.Since(start)
			timedOut <- o
		}()
		ctx, cancel := context.WithCancel(t.Context())
		gone := make(chan Outcome, 1)
		go func() { _, o := p.Acquire(ctx, Ticket{Tokens: 1}); gone <- o }()
		synctest.Wait()
		if _, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); o != QueueFull {
			t.Fatalf("third waiter: %s, want queue_full", o)
		}
		cancel()
		if o := <-gone; o != ClientGone {
			t.Fatalf("cancelled waiter: %s", o)
		}
		if d := p.Advice().Depth; d != 1 {
			t.Fatalf("depth after the client left: %d", d)
		}
		if o := <-timedOut; o != QueueTimeout || waited != 10*time.Second {
			t.Fatalf("deadline: %s after %s", o, waited)
		}
		// Nobody is left to dispatch: releasing grants nothing to the gone.
		hold.Release(Succeeded)
		if st := p.Stats(); st.Slots[0].InFlight != 0 {
			t.Fatalf("a request was dispatched after its client left or its deadline passed: %+v", st.Slots[0])
		}
	})
}

func TestPoolTokenBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots := []SlotConfig{{Name: "b0", Ready: always, KVTokens: 10000}, {Name: "b1", Ready: always, KVTokens: 10000}}
		p := testPool(slots, func(c *PoolConfig) { c.QueueSize = 1000; c.QueueTimeout = time.Hour })
		if _, o := p.Acquire(t.Context(), Ticket{Tokens: 10001, Exact: true}); o != OverBudget {
			t.Fatalf("over every budget: %s", o)
		}
		var maxTokens atomic.Int64
		var wg sync.WaitGroup
		r := rand.New(rand.NewPCG(7, 7))
		for i := range 200 {
			size := 200
			if r.IntN(3) == 0 {
				size = 3000
			}
			wg.Go(func() {
				l, o := p.Acquire(t.Context(), Ticket{Tokens: size, Exact: true})
				if o != Admitted {
					t.Errorf("request %d: %s", i, o)
					return
				}
				for _, s := range p.Stats().Slots {
					if s.Tokens > s.Budget {
						t.Errorf("%s holds %d tokens over its budget %d", s.Name, s.Tokens, s.Budget)
					}
					maxTokens.Store(max(maxTokens.Load(), int64(s.Tokens)))
				}
				time.Sleep(time.Duration(1+i%7) * time.Second)
				l.Release(Succeeded)
			})
		}
		wg.Wait()
		if maxTokens.Load() < 9000 {
			t.Errorf("budget barely used: max %d", maxTokens.Load())
		}
	})
}

func TestPoolNoReadyBackend(t *testing.T) {
	p := testPool([]SlotConfig{{Name: "b0", Ready: func() bool { return false }}}, nil)
	if _, o := p.Acquire(context.Background(), Ticket{Tokens: 1}); o != NoBackend {
		t.Fatal(o)
	}
}

func TestPoolEjectsAndReadmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots := []SlotConfig{{Name: "bad", Ready: always}, {Name: "good", Ready: always}}
		p := testPool(slots, nil)
		errorsSeen := 0
		for range 40 {
			l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
			if o != Admitted {
				t.Fatal(o)
			}
			if l.Slot.Name == "bad" {
				errorsSeen++
				l.Release(ServerError)
			} else {
				l.Release(Succeeded)
			}
		}
		if errorsSeen != 3 {
			t.Fatalf("clients saw %d errors before the ejection, want the threshold 3", errorsSeen)
		}
		if st := p.Stats().Slots[0]; !st.Ejected || st.Ejections != 1 || !slices.Equal(p.Ejected(), []string{"bad"}) {
			t.Fatalf("bad backend: %+v, Ejected() %v", st, p.Ejected())
		}
		time.Sleep(5 * time.Second) // the cool-off
		if st := p.Stats().Slots[0]; st.Ejected || len(p.Ejected()) != 0 {
			t.Fatalf("not readmitted after the cool-off: %+v", st)
		}
		errorsSeen = 0
		for range 40 {
			l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
			if l.Slot.Name == "bad" {
				errorsSeen++
				l.Release(ServerError)
			} else {
				l.Release(Succeeded)
			}
		}
		if errorsSeen != 3 {
			t.Fatalf("second cycle: %d errors, want 3", errorsSeen)
		}
	})
}

func TestPoolAffinityWithinLoadBound(t *testing.T) {
	var slots []SlotConfig
	for _, n := range []string{"b0", "b1", "b2", "b3"} {
		slots = append(slots, SlotConfig{Name: n, Ready: always, KVTokens: 100000})
	}
	p := testPool(slots, nil)
	// Forty conversations, each with its own prefix hash, their turns in
	// flight together.
	home := map[uint64]map[string]int{}
	var leases []*Lease
	for turn := range 10 {
		for conv := uint64(1); conv <= 40; conv++ {
			h := conv * 0x9e3779b97f4a7c15
			l, o := p.Acquire(context.Background(), Ticket{Tokens: 500 + 100*turn, Affinity: h})
			if o != Admitted {
				t.Fatal(o)
			}
			if home[h] == nil {
				home[h] = map[string]int{}
			}
			home[h][l.Slot.Name]++
			leases = append(leases, l)
			var sum int
			st := p.Stats()
			for _, s := range st.Slots {
				sum += s.Tokens
			}
			if s := st.Slots[slices.IndexFunc(st.Slots, func(s SlotStats) bool { return s.Name == l.Slot.Name })]; l.Policy == "affinity" && s.Tokens > 500+100*turn && float64(s.Tokens) > 1.5*float64(sum)/4+1 {
				t.Fatalf("%s took a turn over the load bound: %d tokens of %d", s.Name, s.Tokens, sum)
			}
		}
		// A conversation's next turn comes after its answer.
		for _, l := range leases {
			l.Release(Succeeded)
		}
		leases = leases[:0]
	}
	same, total := 0, 0
	for _, counts := range home {
		best := 0
		for _, c := range counts {
			total += c
			best = max(best, c)
		}
		same += best
	}
	frac := float64(same) / float64(total)
	t.Logf("%.1f%% of turns on their conversation's backend", frac*100)
	if frac < 0.9 {
		t.Errorf("%.0f%% of turns on their conversation's backend, want >= 90%%", frac*100)
	}
}

func TestPoolAdviceFollowsDrainRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		measure := func(gap time.Duration) time.Duration {
			p := testPool(one(1, 0), func(c *PoolConfig) { c.QueueSize = 100; c.QueueTimeout = time.Hour })
			for range 60 {
				l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
				time.Sleep(gap)
				l.Release(Succeeded)
			}
			hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
			for range 10 {
				go p.Acquire(t.Context(), Ticket{Tokens: 1})
			}
			synctest.Wait()
			w := p.Advice()
			hold.Release(Succeeded)
			p.Drain()
			return w.Expected
		}
		fast, slow := measure(100*time.Millisecond), measure(200*time.Millisecond)
		ratio := float64(slow) / float64(fast)
		t.Logf("expected wait with 10 queued: %s at the full drain rate, %s at half (x%.2f)", fast, slow, ratio)
		if ratio < 1.4 || ratio > 2.6 {
			t.Errorf("expected wait %s at the full rate, %s at half: ratio %.2f, want about 2", fast, slow, ratio)
		}
	})
}

func TestPoolDrainRefusesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), nil)
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
		got := make(chan Outcome, 1)
		go func() { _, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); got <- o }()
		synctest.Wait()
		p.Drain()
		if o := <-got; o != Draining {
			t.Fatal(o)
		}
		if _, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); o != Draining {
			t.Fatal(o)
		}
		hold.Release(Succeeded)
	})
}

func TestPoolSaturationAndStaleGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool([]SlotConfig{{Name: "b0", Ready: always}}, func(c *PoolConfig) {
			c.SaturatedWaiting, c.SaturatedKV, c.StaleAfter = 4, 0.95, time.Second
		})
		p.SetGauges("b0", Gauges{Waiting: 5, At: time.Now()})
		got := make(chan Outcome, 1)
		go func() { l, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); got <- o; l.Release(Succeeded) }()
		synctest.Wait()
		select {
		case o := <-got:
			t.Fatalf("admitted to a saturated backend: %s", o)
		default:
		}
		p.SetGauges("b0", Gauges{Waiting: 0, KVUsage: 0.5, At: time.Now()})
		if o := <-got; o != Admitted {
			t.Fatal(o)
		}
		time.Sleep(2 * time.Second) // gauges now stale
		go func() { l, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); got <- o; l.Release(Succeeded) }()
		synctest.Wait()
		select {
		case o := <-got:
			t.Fatalf("admitted on stale gauges: %s", o)
		default:
		}
		p.SetGauges("b0", Gauges{At: time.Now()})
		<-got
	})
}

func BenchmarkPoolAcquireRelease(b *testing.B) {
	var slots []SlotConfig
	for _, n := range []string{"b0", "b1", "b2", "b3"} {
		slots = append(slots, SlotConfig{Name: n, Ready: always, KVTokens: 1 << 30})
	}
	p := testPool(slots, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, _ := p.Acquire(ctx, Ticket{Tokens: 1000})
		l.Release(Succeeded)
	}
}

// A ticket with Only goes to those slots alone, whatever their load or
// the affinity ring says; with none of them ready it is NoBackend, and its
// size is judged against their budgets alone.
func TestPoolOnlyCandidates(t *testing.T) {
	notReady := func() bool { return false }
	p := testPool([]SlotConfig{
		{Name: "b0", Ready: always, KVTokens: 1000},
		{Name: "b1", Ready: always, KVTokens: 100},
		{Name: "b2", Ready: notReady, KVTokens: 1000},
	}, nil)
	var held []*Lease
	for i := range 20 {
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Affinity: uint64(i*7919 + 1), Only: []string{"b1"}})
		if o != Admitted || l.Slot.Name != "b1" {
			t.Fatalf("request %d: %s on %v, want slot 1", i, o, l)
		}
		held = append(held, l)
	}
	for _, l := range held {
		l.Release(Succeeded)
	}
	if _, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Only: []string{"b2"}}); o != NoBackend {
		t.Fatalf("only a backend not ready: %s, want %s", o, NoBackend)
	}
	if _, o := p.Acquire(t.Context(), Ticket{Tokens: 500, Exact: true, Only: []string{"b1"}}); o != OverBudget {
		t.Fatalf("over the only backend's budget: %s, want %s", o, OverBudget)
	}
	l, o := p.Acquire(t.Context(), Ticket{Tokens: 500, Exact: true})
	if o != Admitted || l.Slot.Name != "b0" {
		t.Fatalf("without Only: %s on %v", o, l)
	}
	l.Release(Succeeded)
}
