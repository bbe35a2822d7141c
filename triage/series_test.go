package triage

import (
	"testing"
	"time"
)

// TestSeries: the window bucket by bucket, newest last; what was not
// observed is absent, not zero; buckets that left the window are gone.
func TestSeries(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	// A minute at one request and one sample a second, then an idle minute.
	run(c, time.Minute, time.Second, func(int, float64) {
		ok(e, c.t, be1, warmTTFT, warmTPOT)
		sample(e, c.t, be1, 3, 1, 0.25, 0)
	})
	e.GatewayQueue(mdl, 2, c.t)
	c.t = c.t.Add(time.Minute)
	s := e.Series()
	if s.Buckets != numBuckets || s.Width != 10*time.Second || len(s.Models) != 1 || len(s.Models[0].Backends) != 1 {
		t.Fatalf("shape: %+v", s)
	}
	pts := s.Models[0].Backends[0].Points
	var reqs, drawn int
	for i, p := range pts {
		reqs += p.Requests
		if p.TPOTP50.Has {
			drawn++
			if p.TPOTP50.V < 19 || p.TPOTP50.V > 21 || !p.TPOTP99.Has || !p.Running.Has || p.Running.V != 3 || p.KV.V != 0.25 {
				t.Errorf("bucket %d: %+v", i, p)
			}
		} else if p.Requests != 0 || p.Waiting.Has {
			t.Errorf("bucket %d has requests or gauges but no TPOT: %+v", i, p)
		}
	}
	if reqs != 60 || drawn != 6 {
		t.Errorf("requests %d in %d buckets, want 60 in 6", reqs, drawn)
	}
	if !pts[23].TPOTP50.Has || pts[24].TPOTP50.Has || pts[29].TPOTP50.Has {
		t.Errorf("the busy minute should be buckets 18-23 of 30 (an idle minute since)")
	}
	q := s.Models[0].Queue
	if !q[23].Has || q[23].V != 2 || q[22].Has || q[24].Has { // sampled once, in the last busy bucket
		t.Errorf("queue: %+v", q)
	}
	// Five minutes on, all of it has left the window.
	c.t = c.t.Add(5 * time.Minute)
	for _, p := range e.Series().Models[0].Backends[0].Points {
		if p.Requests != 0 || p.TTFTP50.Has || p.KV.Has {
			t.Fatalf("an old bucket is still shown: %+v", p)
		}
	}
}
