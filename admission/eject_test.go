package admission

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// failOn sends requests until slot name has failed n times in a row.
func failOn(t *testing.T, p *Pool, name string, n int) {
	t.Helper()
	for seen := 0; seen < n; {
		l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
		if o != Admitted {
			t.Fatalf("%s: %s", name, o)
		}
		if l.Slot.Name == name {
			seen++
			l.Release(ServerError)
		} else {
			l.Release(Succeeded)
		}
	}
}

type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (e *eventLog) add(ev Event) { e.mu.Lock(); e.ev = append(e.ev, ev); e.mu.Unlock() }

func (e *eventLog) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.ev {
		out = append(out, fmt.Sprintf("%s %s", ev.Kind, ev.Slot))
	}
	return out
}

func TestPoolNeverEjectsTheLastBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		p := testPool(one(0, 0), func(c *PoolConfig) { c.MaxEjectionPercent = 100; c.OnEvent = log.add })
		failOn(t, p, "b0", 10)
		if st := p.Stats().Slots[0]; st.Ejected || st.Ejections != 0 {
			t.Fatalf("the only backend was ejected: %+v", st)
		}
		if got := log.kinds(); len(got) != 1 || got[0] != "ejection_held b0" {
			t.Errorf("events %v, want one ejection_held", got)
		}
		// A success ends the run of failures; the next run is reported again.
		l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
		l.Release(Succeeded)
		failOn(t, p, "b0", 3)
		if got := log.kinds(); len(got) != 2 {
			t.Errorf("events %v, want a second ejection_held", got)
		}
	})
}

func TestPoolEjectionBound(t *testing.T) {
	for _, tc := range []struct {
		backends, percent, want int
	}{
		{2, 10, 1},   // at least one
		{10, 10, 1},  // 10% of 10
		{10, 30, 3},  // 30% of 10
		{3, 100, 2},  // never the last one in rotation
		{25, 10, 2},  // rounded down
		{4, 0, 1},    // 0 still ejects one, as Envoy
		{1, 100, 0},  // a single backend: never
		{20, 50, 10}, // half
	} {
		t.Run(fmt.Sprintf("%d backends %d%%", tc.backends, tc.percent), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var slots []SlotConfig
				for i := range tc.backends {
					slots = append(slots, SlotConfig{Name: fmt.Sprint("b", i), Ready: always})
				}
				p := testPool(slots, func(c *PoolConfig) { c.MaxEjectionPercent = tc.percent })
				// Every backend fails: release each grant as a failure.
				for range 20 * tc.backends {
					l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
					if o != Admitted {
						t.Fatal(o)
					}
					l.Release(ServerError)
				}
				if n := len(p.Ejected()); n != tc.want {
					t.Errorf("%d ejected, want %d", n, tc.want)
				}
			})
		})
	}
}

// TestPoolEjectionEnds: the end of an ejection is reported when eject_for
// has elapsed, and waiters are dispatched then without another event; an
// ejection also ends when its peers stop being ready.
func TestPoolEjectionEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		var goodReady atomic.Bool
		goodReady.Store(true)
		slots := []SlotConfig{{Name: "bad", Ready: always, MaxInFlight: 1}, {Name: "good", Ready: goodReady.Load, MaxInFlight: 1}}
		p := testPool(slots, func(c *PoolConfig) { c.OnEvent = log.add })
		failOn(t, p, "bad", 3)
		if got := log.kinds(); len(got) != 1 || got[0] != "ejected bad" {
			t.Fatalf("events %v", got)
		}
		hold, _ := p.Acquire(t.Context(), Ticket{Tokens: 1}) // the good one, now full
		if hold.Slot.Name != "good" {
			t.Fatal(hold.Slot.Name)
		}
		got := make(chan *Lease, 1)
		go func() { l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1}); got <- l }()
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("admitted to an ejected backend")
		}
		time.Sleep(5 * time.Second) // eject_for
		synctest.Wait()
		l := <-got
		if l.Slot.Name != "bad" {
			t.Fatalf("after the cool-off the waiter went to %s", l.Slot.Name)
		}
		if k := log.kinds(); len(k) != 2 || k[1] != "ejection_ended bad" {
			t.Errorf("events %v", k)
		}
		l.Release(Succeeded)
		hold.Release(Succeeded)

		// Ejected again, then its only peer turns unready: back in rotation.
		failOn(t, p, "bad", 3)
		goodReady.Store(false)
		if ej := p.Ejected(); len(ej) != 0 {
			t.Errorf("still ejected with no peer in rotation: %v", ej)
		}
		k := log.kinds()
		if last := log.last(); k[len(k)-1] != "ejection_ended bad" || last.Reason != "no other ready backend left in rotation" {
			t.Errorf("events %v, last %+v", k, last)
		}
	})
}

func (e *eventLog) last() Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ev[len(e.ev)-1]
}

func TestBlockageString(t *testing.T) {
	for _, tc := range []struct {
		b    Blockage
		want string
	}{
		{Blockage{Backends: 2, Ejected: 2}, "all 2 backends ejected after consecutive failures"},
		{Blockage{Backends: 1, Busy: 1}, "of 1 backend: 1 busy (at max_in_flight or its token budget)"},
		{Blockage{Backends: 3, NotReady: 1, Ejected: 1, Stale: 1}, "of 3 backends: 1 not ready, 1 ejected after consecutive failures, 1 with stale gauges (no recent /metrics scrape; counted as saturated)"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
}
