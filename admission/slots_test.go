package admission

import (
	"testing"
	"testing/synctest"
)

// Slots are the backends by name, added and removed while requests run: a
// slot that stays keeps its state (leases, ejection), a waiting request
// is granted a slot added after it queued, a removed slot gets nothing new
// and its leases still release, and the pool's order and tickets never
// depend on where a slot sits in the list.
func TestPoolSlotsChangeAtRuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool([]SlotConfig{{Name: "a", Ready: always, MaxInFlight: 1}, {Name: "b", Ready: always, MaxInFlight: 1}}, nil)
		la, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Only: []string{"a"}})
		lb, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Only: []string{"b"}})
		if la == nil || lb == nil || la.Slot.Name != "a" || lb.Slot.Name != "b" {
			t.Fatalf("leases %v %v", la, lb)
		}
		// Both are full: the next request waits, and is granted the slot
		// that joins, listed first.
		got := make(chan *Lease, 1)
		go func() {
			l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
			if o != Admitted {
				t.Errorf("waiter: %s", o)
			}
			got <- l
		}()
		synctest.Wait()
		p.SetSlots([]SlotConfig{{Name: "c", Ready: always, MaxInFlight: 1}, {Name: "b", Ready: always, MaxInFlight: 1}})
		lc := <-got
		if lc.Slot.Name != "c" {
			t.Fatalf("waiter granted %s, want the new slot c", lc.Slot.Name)
		}
		// a left with a lease out: it still releases, says nothing, and a
		// is never granted again.
		if p.Idle("a") != true {
			t.Error("a slot no longer in the pool should read idle")
		}
		if p.Idle("b") {
			t.Error("b has a lease out and stays: not idle")
		}
		la.Release(ServerError)
		st := p.Stats()
		if len(st.Slots) != 2 || st.Slots[0].Name != "c" || st.Slots[1].Name != "b" || st.Slots[1].InFlight != 1 {
			t.Fatalf("slots after the change: %+v", st.Slots)
		}
		if _, o := p.Acquire(t.Context(), Ticket{Tokens: 1, Only: []string{"a"}}); o != NoBackend {
			t.Fatalf("a request only a removed slot could serve: %s, want %s", o, NoBackend)
		}
		lb.Release(Succeeded)
		lc.Release(Succeeded)
		if !p.Idle("b") || !p.Idle("c") {
			t.Error("every lease released: idle")
		}
		// Gauges and scrape failures name slots; an unknown name is ignored.
		p.SetGauges("gone", Gauges{})
		p.ScrapeFailed("gone", true, "x")
	})
}

// An ejection belongs to the backend: a SetSlots that keeps the slot keeps
// it ejected.
func TestPoolSlotStateSurvivesSetSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots := []SlotConfig{{Name: "bad", Ready: always}, {Name: "good", Ready: always}, {Name: "other", Ready: always}}
		p := testPool(slots, func(c *PoolConfig) { c.EjectAfter, c.MaxEjectionPercent = 1, 50 })
		for {
			l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1, Only: []string{"bad"}})
			l.Release(ServerError)
			if len(p.Ejected()) == 1 {
				break
			}
		}
		p.SetSlots(append(slots, SlotConfig{Name: "new", Ready: always}))
		if ej := p.Ejected(); len(ej) != 1 || ej[0] != "bad" {
			t.Fatalf("ejected after SetSlots: %v, want [bad]", ej)
		}
	})
}
