package admission

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// flowStore is a store of flows in memory for the replicas of a test:
// the totals of service and each replica's claims, which end claimsTTL
// after the replica's last sync (on the clock: a synctest bubble's).
type flowStore struct {
	mu     sync.Mutex
	totals map[string]float64
	claims map[string]flowClaims
}

type flowClaims struct {
	claims []FlowClaim
	until  time.Time
}

const claimsTTL = 500 * time.Millisecond

func newFlowStore() *flowStore {
	return &flowStore{totals: map[string]float64{}, claims: map[string]flowClaims{}}
}

// flowReplica is one replica's FlowSync on a flowStore.
type flowReplica struct {
	s    *flowStore
	name string
}

// syncBoth runs replica 2's flow sync, then replica 1's, each with hold
// as its hold-back: what the replicas' tickers would do, in that order.
func syncBoth(t *testing.T, p1, p2 *Pool, r1, r2 flowReplica, hold time.Duration) {
	t.Helper()
	for _, s := range []struct {
		p *Pool
		r flowReplica
	}{{p2, r2}, {p1, r1}} {
		if _, err := s.p.SyncFlows(t.Context(), s.r, hold); err != nil {
			t.Fatal(err)
		}
	}
}

func (r flowReplica) SyncFlows(_ context.Context, _ string, deltas map[string]float64, claims []FlowClaim) (FlowView, error) {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for f, d := range deltas {
		s.totals[f] += d
	}
	s.claims[r.name] = flowClaims{claims, now.Add(claimsTTL)}
	v := FlowView{Totals: map[string]float64{}, Others: map[string][]FlowClaim{}}
	for f, t := range s.totals {
		v.Totals[f] = t
	}
	for name, c := range s.claims {
		if name != r.name && now.Before(c.until) {
			v.Others[name] = c.claims
		}
	}
	return v, nil
}

// acquireAsync asks p for a slot for flow in a goroutine; the lease comes
// on the channel once granted.
func acquireAsync(t *testing.T, p *Pool, flow string, prompt int) chan *Lease {
	ch := make(chan *Lease, 1)
	go func() {
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Exact: true, Flow: flow, Prompt: prompt})
		if o == Admitted {
			ch <- l
		}
	}()
	synctest.Wait()
	return ch
}

func mustAcquire(t *testing.T, p *Pool, flow string, prompt int) *Lease {
	t.Helper()
	l, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Exact: true, Flow: flow, Prompt: prompt})
	if o != Admitted {
		t.Fatalf("%s: %s", flow, o)
	}
	return l
}

func granted(ch chan *Lease) *Lease {
	synctest.Wait()
	select {
	case l := <-ch:
		return l
	default:
		return nil
	}
}

// fairReplicas is two replicas' pools of one backend (one slot) under
// Tokens fairness, sharing one in-memory flow store.
func fairReplicas() (p1, p2 *Pool, r1, r2 flowReplica) {
	fs := newFlowStore()
	mk := func() *Pool { return testPool(one(1, 0), func(c *PoolConfig) { c.Fairness = Tokens }) }
	return mk(), mk(), flowReplica{fs, "r1"}, flowReplica{fs, "r2"}
}

// twoReplicas: replica 1 (p1) runs a request of flow a and has another of
// a's waiting; replica 2 (p2) runs one of a's, charged far more, and has
// one of b's waiting, so that there b's counter is below a's by more than
// the margin (the largest prompt p1 granted). Both synced: p1 holds b's
// claim.
func twoReplicas(t *testing.T, hold time.Duration) (p1, p2 *Pool, r1, r2 flowReplica, l1 *Lease, a2 chan *Lease) {
	p1, p2, r1, r2 = fairReplicas()
	mustAcquire(t, p2, "a", 1000)
	if granted(acquireAsync(t, p2, "b", 10)) != nil {
		t.Fatal("b granted on a full backend")
	}
	l1 = mustAcquire(t, p1, "a", 100)
	a2 = acquireAsync(t, p1, "a", 100)
	syncBoth(t, p1, p2, r1, r2, hold)
	return p1, p2, r1, r2, l1, a2
}

// TestFairSyncHoldsGrantForLowerFlowElsewhere: a slot freed on replica 1,
// where only a waits, is not granted to a at once while b, far below a on
// replica 2, waits there: replica 1 holds the grant back, for at most
// hold (from the first grant held back), then grants it (work-conserving).
func TestFairSyncHoldsGrantForLowerFlowElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 100 * time.Millisecond
		p1, p2, r1, r2, l1, a2 := twoReplicas(t, hold)
		l1.Release(Succeeded)
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a at once while b, below a by more than the margin, waits on replica 2")
		}
		if d := p1.Stats().Depth[0]; d != 1 {
			t.Fatalf("replica 1's depth %d, want a's request waiting", d)
		}
		// Half the hold later both sync again: still held.
		time.Sleep(hold / 2)
		syncBoth(t, p1, p2, r1, r2, hold)
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a before the hold ran out")
		}
		// The hold runs out: the next sync grants (the slot idled at
		// most hold and one sync interval).
		time.Sleep(hold / 2)
		contended, err := p1.SyncFlows(t.Context(), r1, hold)
		if err != nil {
			t.Fatal(err)
		}
		if !contended {
			t.Error("replica 1 not contended while b waits on replica 2")
		}
		if granted(a2) == nil {
			t.Fatal("replica 1 did not grant a once the hold ran out")
		}
	})
}

// TestFairSyncNoHoldWithinMargin: a grant is not held back for a flow on
// another replica whose counter there is not below the granted flow's by
// more than the margin (nor for the granted flow's own requests there).
func TestFairSyncNoHoldWithinMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p1, p2, r1, r2 := fairReplicas()
		mustAcquire(t, p2, "a", 50) // a, 50 above b there: within the margin
		acquireAsync(t, p2, "b", 10)
		acquireAsync(t, p2, "a", 10)
		l1 := mustAcquire(t, p1, "a", 100)
		a2 := acquireAsync(t, p1, "a", 100)
		syncBoth(t, p1, p2, r1, r2, time.Hour)
		l1.Release(Succeeded)
		if granted(a2) == nil {
			t.Fatal("replica 1 held a back for b, within the margin of a on replica 2")
		}
	})
}

// TestFairSyncDeadReplicaClaimsEnd: replica 2 stops syncing (it died);
// its claims end claimsTTL after its last sync, and from replica 1's next
// sync its slots are granted at once again, not held back for a flow
// nobody will serve.
func TestFairSyncDeadReplicaClaimsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p1, _, r1, _, l1, a2 := twoReplicas(t, time.Hour)
		l1.Release(Succeeded)
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a at once while b waits on replica 2")
		}
		// Replica 2 is dead from here. Within the claims' life, replica 1
		// keeps holding (its hold is an hour here).
		time.Sleep(claimsTTL / 2)
		if _, err := p1.SyncFlows(t.Context(), r1, time.Hour); err != nil {
			t.Fatal(err)
		}
		if granted(a2) != nil {
			t.Fatal("replica 1 stopped holding while replica 2's claims live")
		}
		time.Sleep(claimsTTL / 2)
		contended, err := p1.SyncFlows(t.Context(), r1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		l := granted(a2)
		if l == nil {
			t.Fatal("replica 1 still holds back for a dead replica's claims")
		}
		if contended {
			t.Error("replica 1 contended with nobody waiting anywhere")
		}
		// A new request is granted at once when the slot frees.
		a3 := acquireAsync(t, p1, "a", 100)
		l.Release(Succeeded)
		if granted(a3) == nil {
			t.Fatal("a's next request not granted at once after the dead replica's claims ended")
		}
	})
}

// TestFairSyncBackloggedFlowNotLiftedElsewhere: b waits on replica 2
// 1000 below a there; its request that reaches replica 1 (where a waits)
// is not a flow becoming active (VTC's lift to the least counter waiting)
// but one backlogged in the fleet: it keeps its lag below a, and replica
// 1 grants it before a's older request.
func TestFairSyncBackloggedFlowNotLiftedElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p1, p2, r1, r2 := fairReplicas()
		mustAcquire(t, p2, "a", 1000)
		acquireAsync(t, p2, "b", 10)
		acquireAsync(t, p2, "a", 10)
		l1 := mustAcquire(t, p1, "a", 100)
		a2 := acquireAsync(t, p1, "a", 100)
		syncBoth(t, p1, p2, r1, r2, time.Hour)
		b1 := acquireAsync(t, p1, "b", 10)
		ca, cb := -1.0, -1.0
		for _, f := range p1.Flows() {
			switch f.Name {
			case "a":
				ca = f.Counter
			case "b":
				cb = f.Counter
			}
		}
		if cb >= ca {
			t.Errorf("on replica 1 b's counter is %v, a's %v: b, backlogged 1000 below a on replica 2, was lifted as a flow becoming active", cb, ca)
		}
		l1.Release(Succeeded)
		if granted(b1) == nil {
			t.Fatalf("replica 1 did not grant b first (flows %+v)", p1.Flows())
		}
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a too")
		}
	})
}

// TestFairRefusedGrantKeepsLag: b waits 1000 below a; the slot freed is
// granted to b, but the shared account refuses it (another replica took
// the room first). b goes back to the queue keeping its counter, not
// lifted to a's as a flow becoming active: at the next free it is b that
// is granted, not a's request that came before it.
func TestFairRefusedGrantKeepsLag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sh := newFakeShared()
		p := testPool(one(2, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.Shared = sh })
		la := mustAcquire(t, p, "a", 1000)
		sh.set(func(f *fakeShared) { f.elsewhere["b0"] = 1 }) // the store is full
		a2 := acquireAsync(t, p, "a", 10)
		b1 := acquireAsync(t, p, "b", 10) // lifted to a's 1000
		la.Charge(500)                    // a's counter: 2000, b's 1000
		p.SharedFreed("b0")               // b granted here, refused there
		if granted(b1) != nil || granted(a2) != nil {
			t.Fatal("granted while the store is full")
		}
		counters := map[string]float64{}
		for _, f := range p.Flows() {
			counters[f.Name] = f.Counter
		}
		if counters["b"] >= counters["a"] {
			t.Fatalf("after the store refused b's grant b's counter is %v, a's %v: b was lifted as a flow becoming active", counters["b"], counters["a"])
		}
		sh.set(func(f *fakeShared) { f.elsewhere["b0"] = 0 })
		p.SharedFreed("b0")
		if granted(b1) == nil {
			t.Fatal("b, 1000 below a, not granted at the free")
		}
		if granted(a2) != nil {
			t.Fatal("a granted too: one slot was free")
		}
	})
}

// TestFairSyncCountsServiceTheClaimHasNotSeen: replica 2's claim has a
// within the margin of b waiting there; replica 1 then charges a far more
// (a long output), which replica 2's claim has not counted yet. Replica 1
// adds that service to a's counter on replica 2's scale, and holds the
// freed slot back for b without waiting for replica 2 to sync.
func TestFairSyncCountsServiceTheClaimHasNotSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p1, p2, r1, r2 := fairReplicas()
		mustAcquire(t, p2, "a", 100)
		acquireAsync(t, p2, "b", 10) // lifted to 0: 100 below a there
		l1 := mustAcquire(t, p1, "a", 100)
		a2 := acquireAsync(t, p1, "a", 100)
		for _, s := range []struct {
			p *Pool
			r flowReplica
		}{{p1, r1}, {p2, r2}, {p2, r2}, {p1, r1}} { // replica 2's claim counts what it saw at its first
			if _, err := s.p.SyncFlows(t.Context(), s.r, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		l1.Charge(500) // 1000 weighted, not yet synced
		l1.Release(Succeeded)
		if granted(a2) != nil {
			t.Fatal("replica 1 granted a at once: it did not add the 1000 it charged a since to a's counter in replica 2's claim")
		}
	})
}

// TestFairSyncFlowKeepsOrderAcrossReplicas: b's request has waited a
// second on replica 2 when another of b's reaches replica 1; the slot
// freed on replica 1 is held back for the older one (a flow's requests
// keep their order across replicas), not granted to the newer one here.
func TestFairSyncFlowKeepsOrderAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p1, p2, r1, r2 := fairReplicas()
		mustAcquire(t, p2, "a", 10)
		acquireAsync(t, p2, "b", 10)
		time.Sleep(time.Second)
		l1 := mustAcquire(t, p1, "a", 10)
		b2 := acquireAsync(t, p1, "b", 10)
		syncBoth(t, p1, p2, r1, r2, time.Hour)
		l1.Release(Succeeded)
		if granted(b2) != nil {
			t.Fatal("replica 1 granted b's new request while b's older one waits on replica 2")
		}
	})
}

// TestFairHoldEndsWhenNoRoom: replica 1 grants x and holds b back for b's
// older request on replica 2; the store refuses x (the slot went to
// another replica) and replica 1 finds no room for a second. When a slot
// frees again, b's grant is held back anew for its older request, not
// let through at once on the clock of the hold a second ago.
func TestFairHoldEndsWhenNoRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 100 * time.Millisecond
		fs := newFlowStore()
		r1, r2 := flowReplica{fs, "r1"}, flowReplica{fs, "r2"}
		sh := newFakeShared()
		p1 := testPool(one(2, 0), func(c *PoolConfig) { c.Fairness = Tokens; c.Shared = sh })
		p2 := testPool(one(1, 0), func(c *PoolConfig) { c.Fairness = Tokens })
		sync := func() {
			syncBoth(t, p1, p2, r1, r2, hold)
		}
		lx := mustAcquire(t, p2, "x", 0)
		acquireAsync(t, p2, "b", 10) // b's older request
		time.Sleep(time.Second)
		sh.set(func(f *fakeShared) { f.elsewhere["b0"] = 2 }) // the store is full
		x1 := acquireAsync(t, p1, "x", 1000)
		b2 := acquireAsync(t, p1, "b", 10)
		sync()
		// A replica's freed room is announced, and another replica takes
		// it before this one confirms: the store is full again when x's
		// grant is confirmed. It stays full throughout: freeing it here
		// and filling it again after SharedFreed raced x's confirmation,
		// which runs on x's goroutine (CI caught it granted).
		p1.SharedFreed("b0") // x granted here, b held back; x's confirmation refused
		if granted(x1) != nil || granted(b2) != nil {
			t.Fatal("granted over the store's room")
		}
		lx.Charge(1000) // x's counter rises above b's: b goes first from here
		for range 5 {
			time.Sleep(200 * time.Millisecond)
			sync()
		}
		sh.set(func(f *fakeShared) { f.elsewhere["b0"] = 1 })
		p1.SharedFreed("b0")
		if granted(b2) != nil {
			t.Fatal("replica 1 granted b's new request at once while b's older one waits on replica 2: the hold of a second ago was taken as still running")
		}
	})
}
