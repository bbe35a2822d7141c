package admission

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestPoolGaugesStates walks the rule that tells stale gauges (held back)
// from unavailable ones (not checked) along a timeline.
func TestPoolGaugesStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log eventLog
		p := testPool(one(0, 0), func(c *PoolConfig) {
			c.SaturatedWaiting, c.StaleAfter, c.GaugesUnavailableAfter = 4, time.Second, 10*time.Second
			c.OnEvent = log.add
		})
		state := func() GaugesState { return p.Stats().Slots[0].GaugesState }
		admitted := func() bool {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			got := make(chan *Lease, 1)
			go func() { l, _ := p.Acquire(ctx, Ticket{Tokens: 1}); got <- l }()
			synctest.Wait()
			select {
			case l := <-got:
				l.Release(Succeeded)
				return true
			default:
				cancel() // it leaves the queue
				if l := <-got; l != nil {
					l.Release(Succeeded)
				}
				return false
			}
		}
		if state() != GaugesUnknown || !admitted() {
			t.Fatal("a backend never scraped is admitted on its limits")
		}
		p.SetGauges("b0", Gauges{Waiting: 5, At: time.Now()})
		if state() != GaugesFresh || admitted() {
			t.Fatal("fresh saturated gauges must hold work back")
		}
		p.SetGauges("b0", Gauges{At: time.Now()})
		// Scrapes time out under load for a few seconds: stale, held back.
		for range 4 {
			time.Sleep(time.Second)
			p.ScrapeFailed("b0", false, "timed out")
		}
		if state() != GaugesStale || admitted() {
			t.Fatalf("missed scrapes: %s, want stale and held back", state())
		}
		// ... for longer than GaugesUnavailableAfter: unavailable, admitted.
		for range 7 {
			time.Sleep(time.Second)
			p.ScrapeFailed("b0", false, "timed out")
		}
		if state() != GaugesUnavailable || !admitted() {
			t.Fatalf("persistent failures: %s, want unavailable and admitted", state())
		}
		p.SetGauges("b0", Gauges{At: time.Now()})
		if state() != GaugesFresh {
			t.Fatal(state())
		}
		// Three unreadable answers in a row: unavailable at once.
		for i := range UnreadableScrapes {
			if state() == GaugesUnavailable {
				t.Fatalf("unavailable after %d unreadable answers", i)
			}
			p.ScrapeFailed("b0", true, "/metrics answered 404")
		}
		if state() != GaugesUnavailable || !admitted() {
			t.Fatalf("unreadable answers: %s", state())
		}
		if got := log.kinds(); len(got) != 3 {
			t.Errorf("events %v: want unavailable, fresh again, unavailable", got)
		}
		st := p.Stats().Slots[0]
		if st.ScrapeErrors != 14 || st.LastScrapeError != "/metrics answered 404" {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestStretchedScrapeLimits: gauges read on an interval 4x
// ScrapeInterval (a large fleet's, past its scrape budget) turn stale
// after 4x StaleAfter and unavailable after 4x GaugesUnavailableAfter of
// failures, not after the limits set for ScrapeInterval.
func TestStretchedScrapeLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(0, 0), func(c *PoolConfig) {
			c.SaturatedWaiting, c.StaleAfter, c.GaugesUnavailableAfter = 4, time.Second, 10*time.Second
			c.ScrapeInterval = 250 * time.Millisecond
		})
		state := func() GaugesState { return p.Stats().Slots[0].GaugesState }
		p.SetGauges("b0", Gauges{At: time.Now(), Every: time.Second})
		time.Sleep(4*time.Second - time.Millisecond)
		if st := state(); st != GaugesFresh {
			t.Fatalf("3.999 s after a scrape read every 1 s: %s, want fresh (stale after 4 s)", st)
		}
		time.Sleep(2 * time.Millisecond)
		if st := state(); st != GaugesStale {
			t.Fatalf("4.001 s after: %s, want stale", st)
		}
		for range 39 {
			p.ScrapeFailed("b0", false, "timed out")
			time.Sleep(time.Second)
		}
		if st := state(); st != GaugesStale {
			t.Fatalf("failing for 39 s: %s, want stale (unavailable after 40 s)", st)
		}
		time.Sleep(time.Second)
		if st := state(); st != GaugesUnavailable {
			t.Fatalf("failing for 40 s: %s, want unavailable", st)
		}
	})
}
