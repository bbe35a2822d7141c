package telemetry

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// releases counts the traces a batcher gives back, per trace.
type releases struct {
	mu sync.Mutex
	n  map[*Trace]int
}

func (r *releases) release(t *Trace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[*Trace]int{}
	}
	r.n[t]++
}

// check fails unless each of want was released exactly once, and no
// other trace was.
func (r *releases) check(t *testing.T, want []*Trace) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tr := range want {
		if r.n[tr] != 1 {
			t.Errorf("trace %s released %d times, want once", tr.spans[0].name, r.n[tr])
		}
	}
	if len(r.n) != len(want) {
		t.Errorf("%d traces released, want %d", len(r.n), len(want))
	}
}

// spanTrace is a finished trace of n spans, all named name.
func spanTrace(p *Provider, name string, n int) *Trace {
	now := time.Now()
	tr := p.Begin(context.Background(), name, "", trace.SpanKindServer, now)
	for range n - 1 {
		tr.Start(name, "", trace.SpanKindInternal, now).End(now)
	}
	tr.Root().End(now)
	return tr
}

// batchNames is batches of span names, each written as one string.
func batchNames(batches [][]string) []string {
	var out []string
	for _, b := range batches {
		out = append(out, strings.Join(b, ""))
	}
	return out
}

// TestBatcher: batches are counted in spans (up to maxBatch; a trace is
// never split, one larger than maxBatch goes alone), the queue holds up
// to maxQueue spans and refuses more (the refused trace stays the
// caller's), ForceFlush and Shutdown export what is queued, Shutdown stops
// the exporter and refuses later traces, and every exported trace is
// released exactly once. The delay is an hour: nothing here waits on the
// timer (TestBatcherDelay does, in a synctest bubble).
func TestBatcher(t *testing.T) {
	long := batchSettings{delay: time.Hour, timeout: time.Second, maxQueue: 8, maxBatch: 3}
	p := testProvider(sdktrace.AlwaysSample(), nil)

	t.Run("a full batch goes at once, the rest at a flush, in order", func(t *testing.T) {
		f, r := &fakeExporter{exported: make(chan []string, 10)}, &releases{}
		b := newBatcher(f, long, r.release)
		defer b.Shutdown(context.Background())
		a := spanTrace(p, "a", 3)
		if !b.add(a) {
			t.Fatal("refused")
		}
		if got := strings.Join(<-f.exported, ""); got != "aaa" {
			t.Fatalf("first batch %q", got)
		}
		x, y := spanTrace(p, "b", 1), spanTrace(p, "c", 1)
		if !b.add(x) || !b.add(y) {
			t.Fatal("refused")
		}
		if err := b.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if batches, _ := f.got(); !slices.Equal(batchNames(batches), []string{"aaa", "bc"}) {
			t.Fatalf("batches %v", batches)
		}
		r.check(t, []*Trace{a, x, y})
	})

	t.Run("traces are never split; a large one goes alone", func(t *testing.T) {
		f, r := &fakeExporter{exported: make(chan []string, 10)}, &releases{}
		b := newBatcher(f, long, r.release)
		defer b.Shutdown(context.Background())
		x, y, z := spanTrace(p, "x", 2), spanTrace(p, "y", 2), spanTrace(p, "z", 5)
		b.add(x)
		b.add(y) // 4 spans: a full batch, of x alone
		if got := strings.Join(<-f.exported, ""); got != "xx" {
			t.Fatalf("first batch %q, want x's 2 spans", got)
		}
		b.add(z) // y and z: 7 spans, y goes, then z alone
		if got := strings.Join(<-f.exported, ""); got != "yy" {
			t.Fatalf("second batch %q, want y's 2 spans", got)
		}
		if got := strings.Join(<-f.exported, ""); got != "zzzzz" {
			t.Fatalf("third batch %q, want z's 5 spans", got)
		}
		if err := b.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if batches, _ := f.got(); len(batches) != 3 {
			t.Fatalf("batches %v", batches)
		}
		r.check(t, []*Trace{x, y, z})
	})

	t.Run("a full queue refuses, never blocks", func(t *testing.T) {
		f, r := &fakeExporter{started: make(chan int, 10), block: make(chan struct{})}, &releases{}
		b := newBatcher(f, long, r.release)
		a := spanTrace(p, "a", 3)
		b.add(a) // a full batch: the export takes it and blocks
		if n := <-f.started; n != 3 {
			t.Fatalf("first export of %d spans", n)
		}
		accepted := []*Trace{a}
		var refused []*Trace
		for range 20 {
			tr := spanTrace(p, "b", 1)
			if b.add(tr) {
				accepted = append(accepted, tr)
			} else {
				refused = append(refused, tr)
			}
		}
		if len(accepted) != 1+8 || len(refused) != 12 {
			t.Fatalf("%d accepted, %d refused; want 1+8, 12", len(accepted), len(refused))
		}
		if huge := spanTrace(p, "h", 9); b.add(huge) {
			t.Fatal("a trace larger than the queue was accepted")
		}
		close(f.block)
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		batches, shutdowns := f.got()
		if !slices.Equal(batchNames(batches), []string{"aaa", "bbb", "bbb", "bb"}) || shutdowns != 1 {
			t.Fatalf("batches %v, shutdowns %d", batches, shutdowns)
		}
		r.check(t, accepted) // the refused ones are still the caller's
	})

	t.Run("shutdown exports the rest and stops; later traces are refused", func(t *testing.T) {
		f, r := &fakeExporter{}, &releases{}
		b := newBatcher(f, long, r.release)
		x, y := spanTrace(p, "a", 1), spanTrace(p, "a", 1)
		b.add(x)
		b.add(y)
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		if late := spanTrace(p, "late", 1); b.add(late) {
			t.Fatal("a trace was accepted after Shutdown")
		}
		if err := b.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		batches, shutdowns := f.got()
		if !slices.Equal(batchNames(batches), []string{"aa"}) || shutdowns != 1 {
			t.Fatalf("batches %v, shutdowns %d; want [aa], 1", batches, shutdowns)
		}
		r.check(t, []*Trace{x, y})
	})

	t.Run("a failed export still releases its traces", func(t *testing.T) {
		f, r := &fakeExporter{err: context.DeadlineExceeded}, &releases{}
		b := newBatcher(f, long, r.release)
		x := spanTrace(p, "a", 1)
		b.add(x)
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.check(t, []*Trace{x})
	})

	t.Run("a carrier's pre-encoded spans go to the exporter", func(t *testing.T) {
		f, r := &fakeExporter{}, &releases{}
		b := newBatcher(f, long, r.release)
		x, y := p.carry(spanTrace(p, "a", 2)), spanTrace(p, "b", 1)
		b.add(x)
		b.add(y)
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.traces != 2 || f.wired != 1 {
			t.Fatalf("%d traces exported, %d of them pre-encoded; want 2, 1", f.traces, f.wired)
		}
		r.check(t, []*Trace{x, y})
	})

	t.Run("a Provider's finish with a stopped batcher releases the trace", func(t *testing.T) {
		f := &fakeExporter{}
		p := testProvider(sdktrace.AlwaysSample(), f)
		p.queue = newBatcher(f, long, p.release)
		if err := p.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		tr := spanTrace(p, "late", 1)
		p.Finish(tr)
		if len(p.free) != 1 || p.free[0] != tr {
			t.Fatal("the refused trace was not released")
		}
	})
}

// TestBatcherDelay: a partial batch goes once the delay has passed since
// the last export, not before. In a synctest bubble: the clock is the
// bubble's, and synctest.Wait returns once the batcher is idle.
func TestBatcherDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := testProvider(sdktrace.AlwaysSample(), nil)
		f, r := &fakeExporter{}, &releases{}
		b := newBatcher(f, batchSettings{delay: 5 * time.Second, timeout: time.Second, maxQueue: 8, maxBatch: 3}, r.release)
		x := spanTrace(p, "a", 1)
		b.add(x)
		time.Sleep(5*time.Second - time.Nanosecond)
		synctest.Wait()
		if batches, _ := f.got(); len(batches) != 0 {
			t.Fatalf("exported before the delay: %v", batches)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if batches, _ := f.got(); !slices.Equal(batchNames(batches), []string{"a"}) {
			t.Fatalf("batches %v at the delay", batches)
		}
		y := spanTrace(p, "b", 2)
		b.add(y)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if batches, _ := f.got(); !slices.Equal(batchNames(batches), []string{"a", "bb"}) {
			t.Fatalf("batches %v a delay later", batches)
		}
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		r.check(t, []*Trace{x, y})
	})
}

func TestReadBatchSettings(t *testing.T) {
	s, err := readBatchSettings(env("OTEL_BSP_SCHEDULE_DELAY", "100", "OTEL_BSP_EXPORT_TIMEOUT", "2000", "OTEL_BSP_MAX_QUEUE_SIZE", "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"))
	if err != nil {
		t.Fatal(err)
	}
	if s != (batchSettings{delay: 100 * time.Millisecond, timeout: 2 * time.Second, maxQueue: 100, maxBatch: 100}) {
		t.Fatalf("got %+v", s)
	}
	if s, _ := readBatchSettings(env()); s != (batchSettings{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}) {
		t.Fatalf("defaults %+v", s)
	}
	if _, err := readBatchSettings(env("OTEL_BSP_MAX_QUEUE_SIZE", "lots")); err == nil || !strings.Contains(err.Error(), "OTEL_BSP_MAX_QUEUE_SIZE") {
		t.Fatalf("error %v", err)
	}
}
