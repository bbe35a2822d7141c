package main

import (
	"testing"
	"time"
)

// A point's CPU per event counts only the events the clients read inside
// the window, and divides each process's CPU by them.
func TestCPUPerEvent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := cpuWindow{from: t0, to: t0.Add(10 * time.Second), maitred: 2 * time.Millisecond, sim: time.Millisecond, client: 500 * time.Microsecond, ok: true}
	reads := []streamReads{
		{recv: []time.Time{t0.Add(-time.Second), t0, t0.Add(time.Second)}},
		{recv: []time.Time{t0.Add(9 * time.Second), t0.Add(10 * time.Second), t0.Add(11 * time.Second)}},
	}
	c := w.perEvent(reads)
	if c.events != 3 || c.maitred != 2000.0/3 || c.sim != 1000.0/3 || c.client != 500.0/3 {
		t.Fatalf("per event %+v, want 3 events, maitred 666.7 µs, simulator 333.3, clients 166.7", c)
	}
	if got := (cpuWindow{}).perEvent(reads); got.events != 0 || got.total() != 0 {
		t.Errorf("a window not read gave %+v", got)
	}
}
