package admission

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
)

// fakeShared is a shared account in memory: other replicas' holdings per
// backend are set by the test.
type fakeShared struct {
	mu        sync.Mutex
	elsewhere map[string]int // other replicas' requests in flight
	mine      map[string]int
	down      bool
	replicas  int
	takes     int
	// seen: what the store counted at its last answer (Seen); nil: none.
	seen map[string][2]int
}

type fakeHold struct {
	f       *fakeShared
	backend string
	once    sync.Once
}

func (h *fakeHold) Release() {
	h.once.Do(func() {
		h.f.mu.Lock()
		h.f.mine[h.backend]--
		h.f.mu.Unlock()
	})
}

func newFakeShared() *fakeShared {
	return &fakeShared{elsewhere: map[string]int{}, mine: map[string]int{}, replicas: 1}
}

func (f *fakeShared) Take(ctx context.Context, backend string, maxIn, budget, tokens int) (Hold, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takes++
	h := &fakeHold{f: f, backend: backend}
	if f.down {
		f.mine[backend]++
		return h, ErrStoreDown
	}
	if maxIn > 0 && f.elsewhere[backend]+f.mine[backend] >= maxIn {
		return nil, ErrHeldElsewhere
	}
	f.mine[backend]++
	return h, nil
}

func (f *fakeShared) State() SharedState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return SharedState{Up: !f.down, Replicas: f.replicas}
}

func (f *fakeShared) Seen(backend string) (int, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.seen[backend]
	return c[0], c[1], ok
}

func (f *fakeShared) set(fn func(*fakeShared)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

// A backend whose room other replicas hold is not granted: the request
// waits in the queue, and is granted when the account says room was freed.
func TestSharedHeldElsewhereWaitsForAFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeShared()
		f.elsewhere["b0"] = 2
		p := testPool(one(2, 0), func(c *PoolConfig) { c.Shared = f })
		got := make(chan Outcome, 1)
		go func() {
			l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
			if l != nil {
				defer l.Release(Succeeded)
			}
			got <- o
		}()
		synctest.Wait()
		select {
		case o := <-got:
			t.Fatalf("granted while other replicas hold the backend's room: %s", o)
		default:
		}
		if st := p.Stats(); st.Depth[0] != 1 {
			t.Fatalf("depth %v: the request should wait in the queue", st.Depth)
		}
		// Waiting asks nothing more of the account: no polling.
		f.mu.Lock()
		takes := f.takes
		f.mu.Unlock()
		if takes != 1 {
			t.Errorf("%d takes while held elsewhere, want 1", takes)
		}
		f.set(func(f *fakeShared) { f.elsewhere["b0"] = 1 })
		p.SharedFreed("b0")
		if o := <-got; o != Admitted {
			t.Fatalf("after a free: %s", o)
		}
	})
}

// Requests refused by the account keep their order: a refused head goes
// back to the head of its class.
func TestSharedRefusalKeepsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeShared()
		p := testPool(one(1, 0), func(c *PoolConfig) { c.Shared = f; c.QueueSize = 10 })
		first, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
		if o != Admitted {
			t.Fatal(o)
		}
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
				if o != Admitted {
					t.Errorf("%d: %s", i, o)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				l.Release(Succeeded)
			})
			synctest.Wait()
		}
		// Another replica takes the room the moment it frees: the head
		// is refused once, and must stay the head.
		f.set(func(f *fakeShared) { f.elsewhere["b0"] = 1 })
		first.Release(Succeeded)
		synctest.Wait()
		f.set(func(f *fakeShared) { f.elsewhere["b0"] = 0 })
		p.SharedFreed("b0")
		wg.Wait()
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Errorf("order %v, want [0 1 2]", order)
		}
	})
}

// While the account cannot be reached, the pool admits on its share: the
// limit divided by the live replicas last counted, at least 1.
func TestSharedStoreDownAdmitsOnTheShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeShared()
		f.down, f.replicas = true, 3
		p := testPool(one(4, 0), func(c *PoolConfig) { c.Shared = f })
		l1, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
		if o != Admitted {
			t.Fatal(o)
		}
		got := make(chan *Lease, 1)
		go func() {
			l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
			got <- l
		}()
		synctest.Wait()
		if st := p.Stats(); st.Depth[0] != 1 || st.Slots[0].InFlight != 1 {
			t.Fatalf("max_in_flight 4 over 3 replicas is 1 each: in flight %d, waiting %v", st.Slots[0].InFlight, st.Depth)
		}
		l1.Release(Succeeded)
		l2 := <-got
		if l2 == nil {
			t.Fatal("the waiting request was not admitted after the release")
		}
		l2.Release(Succeeded)
	})
}

// While the account cannot be reached, a replica keeps the room it held
// there at its last answer plus its share of the room nobody held: another
// replica held the whole limit, so this one admits nothing (its share of
// the limit, 2, used to be admitted: 6 on a backend of max_in_flight 4),
// and one that held 3 of the 4 keeps 3 (not 2).
func TestSharedStoreDownKeepsTheRoomItHeld(t *testing.T) {
	for _, c := range []struct {
		name         string
		mine, others int
		want         int
	}{
		{"others held all", 0, 4, 0},
		{"held 3 of 4", 3, 1, 3},
		{"held 1, 2 free", 1, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeShared()
				f.down, f.replicas = true, 2
				f.seen = map[string][2]int{"b0": {c.mine, c.others}}
				p := testPool(one(4, 0), func(c *PoolConfig) { c.Shared = f; c.QueueSize = 10 })
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var leases []*Lease
				var mu sync.Mutex
				for range 4 {
					go func() {
						if l, o := p.Acquire(ctx, Ticket{Tokens: 1}); o == Admitted {
							mu.Lock()
							leases = append(leases, l)
							mu.Unlock()
						}
					}()
				}
				synctest.Wait()
				if n := p.Stats().Slots[0].InFlight; n != c.want {
					t.Errorf("in flight %d while the store is down, want %d", n, c.want)
				}
				cancel()
				synctest.Wait()
				for _, l := range leases {
					l.Release(Succeeded)
				}
			})
		})
	}
}

func TestSharedStoreDownRejects(t *testing.T) {
	f := newFakeShared()
	f.down = true
	p := testPool(one(4, 0), func(c *PoolConfig) { c.Shared = f; c.RejectWhenStoreDown = true })
	if l, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); o != StoreDown || l != nil {
		t.Fatalf("store down, reject: %v %s; want StoreDown", l, o)
	}
	if st := p.Stats(); st.Slots[0].InFlight != 0 {
		t.Errorf("in flight %d after the refusal", st.Slots[0].InFlight)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mine["b0"] != 0 {
		t.Errorf("the local holding was not given back: %d", f.mine["b0"])
	}
}
