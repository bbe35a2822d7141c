package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/admission"
)

// The in-process lines of the scale scenario: admission.Pool's pick at N
// backends and its grants at N waiters, measured with testing.Benchmark
// and runtime.MemStats in this process (labelled "in-process").

func always() bool { return true }

// benchPool is a pool of n ready backends with room for everything, as
// the gateway builds one (a token budget, no in-flight cap).
func benchPool(n, maxInFlight int) *admission.Pool {
	slots := make([]admission.SlotConfig, n)
	for i := range slots {
		slots[i] = admission.SlotConfig{Name: "10.0.0." + strconv.Itoa(i) + ":8000", Ready: always, KVTokens: 1 << 30, MaxInFlight: maxInFlight}
	}
	return admission.NewPool("bench", admission.PoolConfig{QueueSize: 1 << 20, QueueTimeout: time.Hour, Classes: 1}, slots, nil)
}

// pickCost is one Acquire and Release on an idle pool of n backends
// (the p2c pick over the eligible slots), in ns.
func pickCost(n int) float64 {
	p := benchPool(n, 0)
	ctx := context.Background()
	r := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			l, o := p.Acquire(ctx, admission.Ticket{Tokens: 1000})
			if o != admission.Admitted {
				b.Fatal(o)
			}
			l.Release(admission.Succeeded)
		}
	})
	return float64(r.NsPerOp())
}

// heapStack is the heap and the goroutine stacks in use, after a GC.
func heapStack() (heap, stack int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}

// waitingFigures queues n requests behind one backend with room for one
// (its lease held), then releases it: each grant's holder releases at
// once, so the queue drains one grant at a time. It returns the memory
// per waiting request (heap and stacks in use, after a GC, with all n
// queued, less before), the time to drain, and the drain per grant.
func waitingFigures(n int) (heapPerWaiter, stackPerWaiter float64, drain time.Duration) {
	p := benchPool(1, 1)
	ctx := context.Background()
	first, o := p.Acquire(ctx, admission.Ticket{Tokens: 1})
	if o != admission.Admitted {
		panic(o)
	}
	heap0, stack0 := heapStack()
	done := make(chan struct{}, n)
	// As the gateway waits: each ticket in a record on the heap (the
	// exchange's), passed by reference.
	tickets := make([]admission.Ticket, n)
	for i := range n {
		tickets[i].Tokens = 1
		go func() {
			l, o := p.AcquireTicket(ctx, &tickets[i])
			if o == admission.Admitted {
				l.Release(admission.Succeeded)
			}
			done <- struct{}{}
		}()
	}
	for depth(p) < n {
		time.Sleep(time.Millisecond)
	}
	heap1, stack1 := heapStack()
	heapPerWaiter, stackPerWaiter = float64(heap1-heap0)/float64(n), float64(stack1-stack0)/float64(n)
	t0 := time.Now()
	first.Release(admission.Succeeded)
	for range n {
		<-done
	}
	return heapPerWaiter, stackPerWaiter, time.Since(t0)
}

func depth(p *admission.Pool) int {
	d := 0
	for _, x := range p.Stats().Depth {
		d += x
	}
	return d
}

// parkedFigure is the baseline of waitingFigures: the memory of n
// goroutines parked on a channel (what a waiting request's handler
// goroutine costs with no queue at all), per goroutine.
func parkedFigure(n int) float64 {
	before := inUse()
	release := make(chan struct{})
	var parked sync.WaitGroup
	parked.Add(n)
	done := make(chan struct{}, n)
	for range n {
		go func() {
			parked.Done()
			<-release
			done <- struct{}{}
		}()
	}
	parked.Wait()
	per := float64(int64(inUse())-int64(before)) / float64(n)
	close(release)
	for range n {
		<-done
	}
	return per
}

// scaleWaitingRun is the waiting dimension: grant cost per request (drain
// time / waiters, the median of repeated drains for small queues), memory
// per waiting request (heap and stack apart) and time to drain, with the
// smallest point as the baseline of the ratio column; and, in the built
// maitred (scale_waiting.go), stack and heap per waiting request beyond
// an idle connection's, and from nothing open beside the bare proxy's
// request in flight and a request parked in a handler that holds its body
// (the net/http floor under any request waiting: "beyond its body"),
// before and (with -pprof) after two collections.
func scaleWaitingRun(e *scaleEnv, ns []int) (*curve, error) {
	c := &curve{dim: "waiting requests (in-process admission.Pool: one backend with room for one, n queued, then drained; maitred: the built binary, n chats waiting, beyond an idle connection each)",
		note:  "target: grant cost at 10k waiters <= 2x its cost at 10; <= 2 KB per waiting request beyond its body (bytes/waiter: its goroutine and the pool's waiter; parked: a goroutine parked on a channel, the baseline)",
		xName: "waiters", cols: []string{"grant us", "grant/base", "bytes/waiter", "heap B/waiter", "stack B/waiter", "parked B/gor", "waiter-parked B", "drain ms", "maitred stack B/req", "maitred heap B/req", "maitred B/req", "bare B/req", "maitred-bare B", "maitred GC'd B/req", "bare GC'd B/req", "GC'd maitred-bare B", "handler B/req", "maitred-handler B", "handler GC'd B/req", "GC'd maitred-handler B"},
		charts: []chartSpec{{file: "waiting-grant.svg", title: "grant cost per request by waiting requests (in-process)", yLabel: "us per grant", cols: []string{"grant us"}},
			{file: "waiting-memory.svg", title: "memory per waiting request (in-process, incl. its goroutine)", yLabel: "bytes", cols: []string{"bytes/waiter", "parked B/gor"}}}}
	base := math.NaN()
	for _, n := range ns {
		// Small queues drain in microseconds: repeated, the median.
		reps := min(max(1, 10000/n), 100)
		// n goroutines made once beforehand: neither figure then counts
		// the runtime's goroutine records, made once and reused.
		parkedFigure(n)
		var drains []time.Duration
		var heaps, stacks []float64
		for range min(reps, 20) {
			h, st, d := waitingFigures(n)
			heaps, stacks, drains = append(heaps, h), append(stacks, st), append(drains, d)
		}
		slices.Sort(drains)
		slices.Sort(heaps)
		slices.Sort(stacks)
		drain, heap, stack := quantile(drains, .5), quantile(heaps, .5), quantile(stacks, .5)
		per := heap + stack
		grant := float64(drain.Nanoseconds()) / 1e3 / float64(n)
		if math.IsNaN(base) {
			base = grant
		}
		parked := parkedFigure(n)
		// As users run it (the built maitred), up to 1000 waiting: each
		// is a connection on both sides, and the open files are limited.
		nan := math.NaN()
		b := waitingBuilt{nan, nan, nan, nan, nan, nan, nan, nan, nan, nan}
		if n <= maxBuiltWaiting {
			var err error
			if b, err = waitingBuiltFigures(e, n); err != nil {
				return nil, fmt.Errorf("%d waiting in the built maitred: %w", n, err)
			}
		}
		c.add(n, grant, grant/base, per, heap, stack, parked, per-parked, float64(drain.Microseconds())/1e3, b.stack, b.heap,
			b.total, b.bare, b.total-b.bare, b.gcTotal, b.gcBare, b.gcTotal-b.gcBare, b.held, b.total-b.held, b.gcHeld, b.gcTotal-b.gcHeld)
		runtime.GC()
	}
	return c, nil
}

// maxBuiltWaiting is the most waiting requests measured in the built
// maitred.
const maxBuiltWaiting = 1000

// pickLine is the backends dimension's in-process pick figures.
func pickLine(ns []int) map[int]float64 {
	out := map[int]float64{}
	for _, n := range ns {
		out[n] = pickCost(n) / 1e3
		fmt.Printf("  pick at %d backends: %.2f us (in-process Acquire+Release)\n", n, out[n])
	}
	return out
}
