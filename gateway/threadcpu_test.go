package gateway

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// threadCPU sums the CPU time of a benchmark's thread over the timed
// parts of its iterations (cpu-ns/op): on a shared machine it does not
// count the time the thread waited for a core, which the wall clock
// (ns/op) does. Reported only where the thread's clock can be read
// (threadTime: Linux).
type threadCPU struct {
	total, at time.Duration
	ok        bool
}

func (c *threadCPU) start() {
	runtime.LockOSThread()
	c.at, c.ok = threadTime()
}

func (c *threadCPU) stop() {
	if t, ok := threadTime(); ok && c.ok {
		c.total += t - c.at
	}
	runtime.UnlockOSThread()
}

func (c *threadCPU) report(b *testing.B) {
	if c.ok && b.N > 0 {
		b.ReportMetric(float64(c.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// pairedCPU takes the thread CPU time of a benchmark's two arms run side
// by side, one pair an iteration, and reports each arm's median
// (off-cpu-ns, on-cpu-ns) and the median of the paired differences
// (added-cpu-ns: on minus off), which a busy machine's swings move far
// less than the difference of two runs' means.
type pairedCPU struct{ off, on, diff []float64 }

// pair runs off and on (on first when onFirst) on one locked thread and
// records their CPU times.
func (p *pairedCPU) pair(onFirst bool, off, on func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	timed := func(f func()) (float64, bool) {
		t0, ok0 := threadTime()
		f()
		t1, ok1 := threadTime()
		return float64(t1 - t0), ok0 && ok1
	}
	var a, b float64
	var oka, okb bool
	if onFirst {
		b, okb = timed(on)
		a, oka = timed(off)
	} else {
		a, oka = timed(off)
		b, okb = timed(on)
	}
	if oka && okb {
		p.off, p.on, p.diff = append(p.off, a), append(p.on, b), append(p.diff, b-a)
	}
}

func (p *pairedCPU) report(b *testing.B) {
	if len(p.diff) == 0 {
		return
	}
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	b.ReportMetric(median(p.off), "off-cpu-ns")
	b.ReportMetric(median(p.on), "on-cpu-ns")
	b.ReportMetric(median(p.diff), "added-cpu-ns")
}
