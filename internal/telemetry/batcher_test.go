package telemetry

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// batchRecorder records the batches it is given.
type batchRecorder struct {
	mu       sync.Mutex
	batches  []int
	names    []string
	shutdown bool
	block    chan struct{} // when set, each export waits for it
}

func (r *batchRecorder) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, len(spans))
	for _, s := range spans {
		r.names = append(r.names, s.Name())
	}
	return nil
}

func (r *batchRecorder) Shutdown(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shutdown = true
	return nil
}

func (r *batchRecorder) got() ([]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.batches...), append([]string(nil), r.names...)
}

func endSpans(tp trace.TracerProvider, n int, name string) {
	for range n {
		_, sp := tp.Tracer("t").Start(context.Background(), name)
		sp.End()
	}
}

func TestBatcher(t *testing.T) {
	long := batchSettings{delay: time.Hour, timeout: time.Second, maxQueue: 8, maxBatch: 3}
	t.Run("a full batch goes at once, the rest at a flush, in order", func(t *testing.T) {
		rec := &batchRecorder{}
		b := newBatcher(rec, long)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithResource(resource.Empty()))
		defer tp.Shutdown(context.Background())
		endSpans(tp, 3, "a")
		for deadline := time.Now().Add(5 * time.Second); ; {
			if batches, _ := rec.got(); len(batches) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a full batch was not exported")
			}
			time.Sleep(time.Millisecond)
		}
		endSpans(tp, 2, "b")
		if err := tp.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		batches, names := rec.got()
		if len(batches) != 2 || batches[0] != 3 || batches[1] != 2 || strings.Join(names, "") != "aaabb" {
			t.Fatalf("batches %v, names %v", batches, names)
		}
	})
	t.Run("the delay sends a partial batch", func(t *testing.T) {
		rec := &batchRecorder{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(newBatcher(rec, batchSettings{delay: 5 * time.Millisecond, timeout: time.Second, maxQueue: 8, maxBatch: 3})))
		defer tp.Shutdown(context.Background())
		endSpans(tp, 1, "a")
		for deadline := time.Now().Add(5 * time.Second); ; {
			if batches, _ := rec.got(); len(batches) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the delay did not export")
			}
			time.Sleep(time.Millisecond)
		}
	})
	t.Run("a full queue drops, never blocks; unsampled spans are not queued", func(t *testing.T) {
		rec := &batchRecorder{block: make(chan struct{})}
		b := newBatcher(rec, long)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
		endSpans(tp, 3, "a") // a full batch: the export takes it and blocks
		for {
			b.mu.Lock()
			n := len(b.queue)
			b.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		endSpans(tp, 20, "b") // 8 queued, 12 dropped
		never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(b))
		endSpans(never, 5, "c")
		close(rec.block)
		if err := tp.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, names := rec.got()
		if got := strings.Join(names, ""); got != "aaa"+strings.Repeat("b", 8) {
			t.Fatalf("exported %q", got)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if !rec.shutdown {
			t.Fatal("the exporter was not shut down")
		}
	})
	t.Run("shutdown flushes; later spans are dropped", func(t *testing.T) {
		rec := &batchRecorder{}
		b := newBatcher(rec, long)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
		endSpans(tp, 2, "a")
		if err := b.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.OnEnd(record(t, resource.Empty(), sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) { endSpans(tp, 1, "late") })[0])
		if err := b.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, names := rec.got(); strings.Join(names, "") != "aa" {
			t.Fatalf("exported %v", names)
		}
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
