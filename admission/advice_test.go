package admission

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdviceAfterIdleSpell: after two minutes without traffic, a burst that
// fills the queue used to be advised (depth+1) x the idle time (the release
// rate replaced by 1/idle): six minutes for a queue that drains in two
// seconds. With no recent release the advice now comes from capacity (the
// requests running and how long one holds its backend), never over
// queue_timeout, and within twice the time the queue really takes.
func TestAdviceAfterIdleSpell(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = time.Second
		p := testPool(one(1, 0), func(c *PoolConfig) { c.QueueSize = 2; c.QueueTimeout = 20 * time.Second })
		serve := func() {
			l, o := p.Acquire(t.Context(), Ticket{Tokens: 1})
			if o != Admitted {
				t.Errorf("%s", o)
				return
			}
			time.Sleep(hold)
			l.Release(Succeeded)
		}
		for range 5 {
			serve()
		}
		time.Sleep(120 * time.Second) // the idle spell

		var wg sync.WaitGroup
		start := time.Now()
		drained := make(chan time.Duration, 1)
		wg.Go(serve)
		synctest.Wait() // running
		for range 2 {
			wg.Go(serve)
			synctest.Wait() // queued
		}
		if _, o := p.Acquire(t.Context(), Ticket{Tokens: 1}); o != QueueFull {
			t.Fatalf("fourth request: %s, want queue_full", o)
		}
		w := p.Advice()
		go func() {
			for p.Advice().Depth > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			drained <- time.Since(start)
		}()
		wg.Wait()
		took := <-drained
		if w.Expected <= 0 || w.Expected > 20*time.Second {
			t.Errorf("expected wait %s after the idle spell: want (0, queue_timeout 20s]", w.Expected)
		}
		if w.Expected > 2*took {
			t.Errorf("expected wait %s, the queue drained in %s: want within 2x", w.Expected, took)
		}
	})
}

// TestAdviceNeverOverQueueTimeout: whatever the rate, the advice is at most
// queue_timeout, the longest a request would wait.
func TestAdviceNeverOverQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testPool(one(1, 0), func(c *PoolConfig) { c.QueueSize = 50; c.QueueTimeout = 5 * time.Second })
		for range 3 { // one release every 10 s: a fresh rate of 0.1/s
			l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
			time.Sleep(10 * time.Second)
			l.Release(Succeeded)
		}
		l, _ := p.Acquire(t.Context(), Ticket{Tokens: 1})
		for range 10 {
			go p.Acquire(t.Context(), Ticket{Tokens: 1})
		}
		synctest.Wait()
		if w := p.Advice(); w.Depth != 10 || w.Expected != 5*time.Second {
			t.Errorf("advice %+v: want depth 10, expected capped at queue_timeout 5s", w)
		}
		l.Release(Succeeded)
	})
}
