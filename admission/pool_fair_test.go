package admission

import (
	"context"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// fairRun is a pool with one backend of room for one request, and a
// server that takes the grants one at a time: each granted request
// generates its output (Charge, as a stream's events would), settles and
// releases, and the next grant follows. Requests are queued in the order
// the test adds them.
type fairRun struct {
	t       *testing.T
	p       *Pool
	granted chan grant
	// order is the flows in the order they were granted.
	order []string
	// service and weight per flow, and the largest request's weighted
	// cost, for the bound.
	service map[string]float64
}

type grant struct {
	l    *Lease
	flow string
	out  int
}

func newFairRun(t *testing.T, fairness Fairness) *fairRun {
	p := testPool(one(1, 0), func(c *PoolConfig) {
		c.QueueSize = 1000
		c.Fairness = fairness
	})
	return &fairRun{t: t, p: p, granted: make(chan grant, 1000), service: map[string]float64{}}
}

// add queues n requests of flow (weight w): prompt input tokens, out
// output tokens each.
func (r *fairRun) add(flow string, w float64, n, prompt, out int) {
	for range n {
		go func() {
			l, o := r.p.Acquire(r.t.Context(), Ticket{Tokens: prompt + out, Exact: true, Flow: flow, Weight: w, Prompt: prompt})
			if o == ClientGone {
				return // the test ended with it waiting
			}
			if o != Admitted {
				r.t.Errorf("%s: %s", flow, o)
				return
			}
			r.granted <- grant{l, flow, out}
		}()
		synctest.Wait() // queued in this order
	}
}

// serve takes n grants in turn: each generates its output in ten
// charges, settles to its usage and releases.
func (r *fairRun) serve(n int, each func(g grant)) {
	for range n {
		synctest.Wait()
		var g grant
		select {
		case g = <-r.granted:
		default:
			r.t.Fatalf("after %d grants (%v), nothing is granted", len(r.order), r.order)
		}
		r.order = append(r.order, g.flow)
		for range 10 {
			g.l.Charge(g.out / 10)
		}
		g.l.SettleInput(int64(g.l.chargedIn))
		g.l.SettleOutput(int64(g.out))
		if each != nil {
			each(g)
		}
		g.l.Release(Succeeded)
	}
}

func (r *fairRun) count(flow string) int {
	n := 0
	for _, f := range r.order {
		if f == flow {
			n++
		}
	}
	return n
}

// TestFairTokensShortRequestsNotBehindBacklog: A queues eight long
// requests, then B one short one. Under fifo B waits for all of A's; under
// tokens it goes after at most one of them (its counter is lifted to A's,
// and A's grows with each grant).
func TestFairTokensShortRequestsNotBehindBacklog(t *testing.T) {
	for _, tt := range []struct {
		fairness Fairness
		want     int // B's place among the grants
	}{{FIFO, 9}, {Tokens, 2}} {
		t.Run(tt.fairness.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newFairRun(t, tt.fairness)
				hold, _ := r.p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A", Prompt: 100})
				r.add("A", 1, 8, 100, 1000)
				r.add("B", 1, 1, 10, 20)
				hold.Release(Succeeded)
				r.serve(9, nil)
				if got := slices.Index(r.order, "B") + 1; got != tt.want {
					t.Errorf("B granted %dth (%v), want %dth", got, r.order, tt.want)
				}
			})
		})
	}
}

// TestFairTokensWeightsAndBound: A (weight 1) and B (weight 3) both
// backlogged with like requests: B gets three grants to A's one, and at
// every grant their service divided by their weights differ by at most
// twice the largest request's weighted cost (VTC's bound).
func TestFairTokensWeightsAndBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFairRun(t, Tokens)
		hold, _ := r.p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A", Weight: 1})
		r.add("A", 1, 40, 50, 100)
		r.add("B", 3, 80, 50, 100)
		hold.Release(Succeeded)
		weight := map[string]float64{"A": 1, "B": 3}
		const cost = 50*1 + 100*2 // a request's weighted service
		worst := 0.0
		r.serve(80, func(g grant) {
			r.service[g.flow] += cost
			worst = max(worst, math.Abs(r.service["A"]/weight["A"]-r.service["B"]/weight["B"]))
		})
		a, b := r.count("A"), r.count("B")
		if b < 3*a-3 || b > 3*a+3 {
			t.Errorf("grants A %d, B %d: want B three times A (±3)", a, b)
		}
		if worst > 2*cost {
			t.Errorf("normalized service differed by %v, over twice the largest request's cost %d", worst, 2*cost)
		}
	})
}

// TestFairTokensIdleFlowLifted: A is served alone for a long while; when B
// becomes active its counter starts at A's, not at zero, so it shares the
// backend from then on instead of taking it until it has caught up.
func TestFairTokensIdleFlowLifted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFairRun(t, Tokens)
		hold, _ := r.p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A"})
		r.add("A", 1, 40, 50, 100)
		hold.Release(Succeeded)
		r.serve(20, nil) // A alone: every grant is A's (work-conserving)
		if r.count("A") != 20 {
			t.Fatalf("A alone got %d of 20 grants", r.count("A"))
		}
		r.add("B", 1, 20, 50, 100)
		r.serve(10, nil)
		if b := r.count("B"); b < 4 || b > 6 {
			t.Errorf("after B became active: B got %d of the next 10 grants (%v), want about half", b, r.order[20:])
		}
	})
}

// TestFairTokensWorkConserving: B has the least counter but its head fits
// no free backend (it may go only to b0, which is busy); A's fits b1, so
// A is granted there rather than b1 idling.
func TestFairTokensWorkConserving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots := []SlotConfig{{Name: "b0", Ready: always, MaxInFlight: 1}, {Name: "b1", Ready: always, MaxInFlight: 1}}
		p := testPool(slots, func(c *PoolConfig) { c.Fairness = Tokens })
		a0, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A", Prompt: 1000, Only: []string{"b0"}})
		a1, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A", Prompt: 1000, Only: []string{"b1"}})
		got := make(chan string, 2)
		acq := func(flow string, only []string) {
			go func() {
				l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: flow, Prompt: 10, Only: only})
				if o == Admitted {
					got <- flow + "@" + l.Slot.Name
				}
			}()
			synctest.Wait()
		}
		acq("B", []string{"b0"}) // B first: A's counter, 2000, stays above B's
		acq("A", nil)
		a1.Release(Succeeded) // b1 frees: B's head cannot go there, A's can
		synctest.Wait()
		select {
		case g := <-got:
			if g != "A@b1" {
				t.Errorf("granted %s, want A@b1", g)
			}
		default:
			t.Fatal("b1 idles while A waits with a request that fits it")
		}
		a0.Release(Succeeded)
		synctest.Wait()
		if g := <-got; g != "B@b0" {
			t.Errorf("granted %s, want B@b0", g)
		}
	})
}

// TestFairTokensOwnOrderAndLeaving: a flow's requests keep their order;
// one whose client leaves is taken out and the rest still go.
func TestFairTokensOwnOrderAndLeaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.QueueSize = 10 })
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A"})
		var order []int
		done := make(chan *Lease, 3)
		ctx, cancel := context.WithCancel(t.Context())
		for i := range 3 {
			c := t.Context()
			if i == 1 {
				c = ctx
			}
			go func() {
				l, o := p.Acquire(c, Ticket{Tokens: 1, Flow: "A", Prompt: i})
				if o == Admitted {
					order = append(order, i)
					done <- l
				} else if o != ClientGone {
					t.Errorf("%d: %s", i, o)
				}
			}()
			synctest.Wait()
		}
		cancel()
		synctest.Wait()
		if st := p.Stats(); st.Depth[0] != 2 || len(st.Flows) != 1 || st.Flows[0].Waiting != 2 {
			t.Fatalf("after a client left: depth %v, flows %+v", st.Depth, st.Flows)
		}
		hold.Release(Succeeded)
		(<-done).Release(Succeeded)
		(<-done).Release(Succeeded)
		if !slices.Equal(order, []int{0, 2}) {
			t.Errorf("order %v, want [0 2]", order)
		}
	})
}

// TestFairSwitchKeepsWaiting: a reload from fifo to tokens and back moves
// the waiting requests, in their order, and none is lost.
func TestFairSwitchKeepsWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := PoolConfig{QueueSize: 10, QueueTimeout: 10e9, Classes: 2}
		p := NewPool("m", cfg, one(1, 0), nil)
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
		var order []string
		done := make(chan *Lease, 4)
		for _, n := range []string{"A1", "B1", "A2", "B2"} {
			go func() {
				l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: n[:1], Prompt: 100})
				if o == Admitted {
					order = append(order, n)
					done <- l
				}
			}()
			synctest.Wait()
		}
		cfg.Fairness = Tokens
		p.SetConfig(cfg)
		cfg.Fairness = FIFO
		p.SetConfig(cfg)
		cfg.Fairness = Tokens
		p.SetConfig(cfg)
		hold.Release(Succeeded)
		for range 4 {
			synctest.Wait()
			(<-done).Release(Succeeded)
		}
		if !slices.Equal(order, []string{"A1", "B1", "A2", "B2"}) {
			t.Errorf("order %v", order)
		}
		if st := p.Stats(); st.Depth[0] != 0 || st.Flows[0].InFlight != 0 || st.Flows[0].TokensIn != 200 {
			t.Errorf("stats after: %+v", st)
		}
	})
}

// TestFairTokensDrainAndTimeout: under tokens, a request that waits past
// queue_timeout leaves with QueueTimeout, and Drain answers the others
// Draining; none is left counted in the queue.
func TestFairTokensDrainAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.QueueSize = 10 })
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "A"})
		out := make(chan Outcome, 3)
		for _, f := range []string{"A", "B", "B"} {
			go func() { _, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: f}); out <- o }()
			synctest.Wait()
		}
		time.Sleep(5 * time.Second)
		go func() { _, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Flow: "C"}); out <- o }()
		time.Sleep(6 * time.Second) // the first three's queue_timeout (10 s) passed
		synctest.Wait()
		for range 3 {
			if o := <-out; o != QueueTimeout {
				t.Errorf("outcome %s, want queue_timeout", o)
			}
		}
		p.Drain()
		if o := <-out; o != Draining {
			t.Errorf("outcome %s, want draining", o)
		}
		if st := p.Stats(); st.Depth[0] != 0 || st.Depth[1] != 0 {
			t.Errorf("depth after %v", st.Depth)
		}
		for _, f := range p.Flows() {
			if f.Waiting != 0 {
				t.Errorf("flow %+v still waiting", f)
			}
		}
		hold.Release(Succeeded)
	})
}

// BenchmarkPoolFairness is one request's way through the pool (acquire
// at once, charge its output in ten events, settle, release) under fifo
// and tokens side by side, two flows taking turns: the difference is what
// the flows cost a request, without the noise of sockets.
func BenchmarkPoolFairness(b *testing.B) {
	for _, fairness := range []Fairness{FIFO, Tokens} {
		b.Run(fairness.String(), func(b *testing.B) {
			p := testPool(one(4, 0), func(c *PoolConfig) { c.Fairness = fairness })
			ctx := context.Background()
			flows := []string{"a", "b"}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l, o := p.Acquire(ctx, Ticket{Tokens: 100, Exact: true, Flow: flows[i%2], Weight: 1, Prompt: 80})
				if o != Admitted {
					b.Fatal(o)
				}
				for range 10 {
					l.Charge(2)
				}
				l.SettleInput(80)
				l.SettleOutput(20)
				l.Release(Succeeded)
				i++
			}
		})
	}
}
