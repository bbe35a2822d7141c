package gateway

import (
	"runtime"
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
