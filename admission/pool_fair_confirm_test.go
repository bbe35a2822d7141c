package admission

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// gatedShared is a fakeShared whose takes after the first free ones wait
// for gate: a grant held in confirmation for as long as the test likes.
type gatedShared struct {
	*fakeShared
	mu   sync.Mutex
	free int
	gate chan struct{}
}

func (g *gatedShared) Take(ctx context.Context, backend string, maxIn, budget, tokens int) (Hold, error) {
	g.mu.Lock()
	wait := g.free == 0
	if !wait {
		g.free--
	}
	g.mu.Unlock()
	if wait {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.fakeShared.Take(ctx, backend, maxIn, budget, tokens)
}

// TestFairConfirmingCountsAsWaiting: on replica 2, b's grant (1000 below
// a there) waits for the shared account's answer. Its claim still says b
// waits, so replica 1 holds back the slot freed for a, as it would for b
// in the queue.
func TestFairConfirmingCountsAsWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFlowStore()
		r1, r2 := flowReplica{fs, "r1"}, flowReplica{fs, "r2"}
		g := &gatedShared{fakeShared: newFakeShared(), free: 1, gate: make(chan struct{})}
		defer close(g.gate)
		p1 := testPool(one(1, 0), func(c *PoolConfig) { c.Fairness = Tokens })
		p2 := testPool(one(2, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.Shared = g })
		mustAcquire(t, p2, "a", 1000)
		acquireAsync(t, p2, "b", 10) // granted here, asking the store
		l1 := mustAcquire(t, p1, "a", 100)
		a2 := acquireAsync(t, p1, "a", 100)
		syncBoth(t, p1, p2, r1, r2, time.Hour)
		l1.Release(Succeeded)
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a while b, 1000 below a, waits for the store's answer on replica 2")
		}
	})
}

// TestFairLiftLeavesOutConfirming: a's grant of 1000 waits for the shared
// account's answer while another request of a's waits; b, becoming
// active, is lifted to a's counter without that charge, which the store
// may refuse: when it does, b is not left 1000 above a.
func TestFairLiftLeavesOutConfirming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedShared{fakeShared: newFakeShared(), free: 1, gate: make(chan struct{})}
		p := testPool(one(2, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.Shared = g })
		mustAcquire(t, p, "c", 10)
		a1 := acquireAsync(t, p, "a", 1000) // granted here, asking the store
		acquireAsync(t, p, "a", 10)         // waits: the backend is full here
		b := acquireAsync(t, p, "b", 10)    // lifted
		g.set(func(f *fakeShared) { f.elsewhere["b0"] = 1 })
		close(g.gate) // the store refuses a's grant: full
		if granted(a1) != nil || granted(b) != nil {
			t.Fatal("granted over the store's room")
		}
		counters := map[string]float64{}
		for _, f := range p.Flows() {
			counters[f.Name] = f.Counter
		}
		if counters["b"] > counters["a"] {
			t.Fatalf("b lifted to %v, a back at %v after the store refused its grant: b was lifted to a charge that went back", counters["b"], counters["a"])
		}
	})
}
