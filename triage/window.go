package triage

import (
	"math"
	"time"
)

// numBuckets is the number of time buckets in the sliding window; each is
// Window/numBuckets wide.
const numBuckets = 30

// gauge aggregates samples of one gauge in one bucket. Times are seconds
// from the bucket's start, so that the least-squares sums stay well
// conditioned however long the process runs.
type gauge struct {
	n                        uint32
	first, last, min, max    float64
	firstT, lastT            float64
	sumV, sumT, sumTT, sumTV float64
}

func (g *gauge) add(t, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if g.n == 0 || t < g.firstT {
		g.first, g.firstT = v, t
	}
	if g.n == 0 || t >= g.lastT {
		g.last, g.lastT = v, t
	}
	if g.n == 0 || v < g.min {
		g.min = v
	}
	if g.n == 0 || v > g.max {
		g.max = v
	}
	g.n++
	g.sumV += v
	g.sumT += t
	g.sumTT += t * t
	g.sumTV += t * v
}

// mergeShift adds o, whose times are relative to an origin d seconds after
// g's origin.
func (g *gauge) mergeShift(o *gauge, d float64) {
	if o.n == 0 {
		return
	}
	n := float64(o.n)
	ft, lt := o.firstT+d, o.lastT+d
	if g.n == 0 || ft < g.firstT {
		g.first, g.firstT = o.first, ft
	}
	if g.n == 0 || lt >= g.lastT {
		g.last, g.lastT = o.last, lt
	}
	if g.n == 0 || o.min < g.min {
		g.min = o.min
	}
	if g.n == 0 || o.max > g.max {
		g.max = o.max
	}
	g.n += o.n
	g.sumV += o.sumV
	g.sumT += o.sumT + n*d
	g.sumTT += o.sumTT + 2*d*o.sumT + n*d*d
	g.sumTV += o.sumTV + d*o.sumV
}

// gaugeStat is what the rules read from a gauge over the window.
type gaugeStat struct {
	N                     int
	First, Last, Min, Max float64
	Mean                  float64
	SlopePerMin           float64 // least-squares slope, units per minute; 0 with < 2 distinct times
}

func (g *gauge) stat() gaugeStat {
	if g.n == 0 {
		return gaugeStat{}
	}
	n := float64(g.n)
	st := gaugeStat{N: int(g.n), First: g.first, Last: g.last, Min: g.min, Max: g.max, Mean: g.sumV / n}
	den := n*g.sumTT - g.sumT*g.sumT
	if g.n >= 2 && den > 1e-9*n*n {
		st.SlopePerMin = (n*g.sumTV - g.sumT*g.sumV) / den * 60
	}
	return st
}

// bucket is one time slice of one model+backend series.
type bucket struct {
	idx  int64 // bucket number: unix ns / width
	used bool

	requests, ok uint32
	layers       [numLayers]uint32
	ttft, tpot   hist
	stalled      uint32 // requests with ClientStall >= StallFraction of Total
	stallNs      int64
	totalNs      int64

	running, waiting, kv gauge
	samples, notReady    uint32
	preemptDelta         float64 // preemptions counted in this bucket (counter deltas)
	preemptSpan          float64 // seconds of sampling the deltas cover
}

func (b *bucket) reset(idx int64) {
	*b = bucket{idx: idx, used: true}
}

// mbucket is one time slice of a model: gateway queue depth and reason
// counts (reasons are per model: door rejections rarely have a backend).
type mbucket struct {
	idx   int64
	used  bool
	queue gauge
	door  [maxReasonSlots]uint32 // door rejections by reason slot
	fail  [maxReasonSlots]uint32 // other failures by reason slot
}

// ewma is an exponentially weighted mean with time constant horizon,
// without start-up bias: value = S/W with both decayed by exp(-dt/horizon).
type ewma struct {
	s, w     float64
	lastIdx  int64
	set      bool
	coverage time.Duration // total width of the buckets folded in
}

func (e *ewma) decay(idx int64, width, horizon time.Duration) {
	if e.set && idx > e.lastIdx {
		f := math.Exp(-float64(time.Duration(idx-e.lastIdx)*width) / float64(horizon))
		e.s *= f
		e.w *= f
	}
	if !e.set || idx > e.lastIdx {
		e.lastIdx = idx
	}
	e.set = true
}

func (e *ewma) add(idx int64, x, weight float64, width, horizon time.Duration) {
	e.decay(idx, width, horizon)
	e.s += x * weight
	e.w += weight
	e.coverage += width
}

func (e *ewma) value() (float64, bool) {
	if !e.set || e.w <= 0 {
		return 0, false
	}
	return e.s / e.w, true
}

// baseline is a series' long moving baseline, fed from buckets as they
// leave the window.
type baseline struct {
	ttft, tpot ewma
	// preemption rate: decayed sums of counter deltas and of the time they cover
	pre ewma // s = deltas, w = seconds
}
