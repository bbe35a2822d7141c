package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batchSettings are the batcher's, as the SDK's batch span processor
// names them (OTEL_BSP_*) and with its defaults.
type batchSettings struct {
	delay    time.Duration // the longest a span waits for its batch
	timeout  time.Duration // one export's limit
	maxQueue int           // spans held; more are dropped
	maxBatch int           // spans in one export
}

// readBatchSettings reads OTEL_BSP_SCHEDULE_DELAY and _EXPORT_TIMEOUT
// (milliseconds), OTEL_BSP_MAX_QUEUE_SIZE and _MAX_EXPORT_BATCH_SIZE; a
// malformed value is an error naming the variable.
func readBatchSettings(getenv func(string) string) (batchSettings, error) {
	s := batchSettings{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}
	for _, v := range []struct {
		name string
		ms   *time.Duration
		n    *int
	}{
		{name: "OTEL_BSP_SCHEDULE_DELAY", ms: &s.delay},
		{name: "OTEL_BSP_EXPORT_TIMEOUT", ms: &s.timeout},
		{name: "OTEL_BSP_MAX_QUEUE_SIZE", n: &s.maxQueue},
		{name: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", n: &s.maxBatch},
	} {
		str := strings.TrimSpace(getenv(v.name))
		if str == "" {
			continue
		}
		n, err := strconv.Atoi(str)
		if err != nil || n <= 0 {
			return s, fmt.Errorf("%s: want a positive integer, got %q", v.name, str)
		}
		if v.ms != nil {
			*v.ms = time.Duration(n) * time.Millisecond
		} else {
			*v.n = n
		}
	}
	s.maxBatch = min(s.maxBatch, s.maxQueue)
	return s, nil
}

// batcher is an sdktrace.SpanProcessor that exports sampled spans in
// batches from a goroutine of its own, like the SDK's batch span
// processor, but a span's end only appends it to a queue under a mutex:
// it wakes the exporting goroutine once a batch is full, not once per
// span (the SDK's hands each span over a channel, waking its goroutine
// for nearly every one: a scheduler round trip per span on the request's
// path). A full queue drops spans; it never blocks a request.
type batcher struct {
	exp sdktrace.SpanExporter
	set batchSettings

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	stopped bool

	kick  chan struct{}      // a batch is full (buffered: one is enough)
	flush chan chan struct{} // ForceFlush: export what is queued, then close
	stop  chan struct{}      // Shutdown: export what is queued, then end
	done  chan struct{}      // the goroutine ended
	once  sync.Once
	batch []sdktrace.ReadOnlySpan // the goroutine's
}

func newBatcher(exp sdktrace.SpanExporter, s batchSettings) *batcher {
	b := &batcher{
		exp:   exp,
		set:   s,
		queue: make([]sdktrace.ReadOnlySpan, 0, s.maxBatch),
		kick:  make(chan struct{}, 1),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go b.run()
	return b
}

func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.stopped || len(b.queue) >= b.set.maxQueue {
		b.mu.Unlock()
		return
	}
	b.queue = append(b.queue, s)
	full := len(b.queue) == b.set.maxBatch
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

func (b *batcher) run() {
	defer close(b.done)
	t := time.NewTimer(b.set.delay)
	defer t.Stop()
	for {
		select {
		case <-b.kick:
			b.export(true)
			continue
		case <-t.C:
			b.export(false)
		case ack := <-b.flush:
			b.export(false)
			close(ack)
		case <-b.stop:
			b.export(false)
			return
		}
		t.Reset(b.set.delay)
	}
}

// export sends the queue in batches: full ones only, or all.
func (b *batcher) export(fullOnly bool) {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.set.maxBatch)
		if n == 0 || (fullOnly && n < b.set.maxBatch) {
			b.mu.Unlock()
			return
		}
		b.batch = append(b.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), b.set.timeout)
		if err := b.exp.ExportSpans(ctx, b.batch); err != nil {
			otel.Handle(err)
		}
		cancel()
		clear(b.batch)
	}
}

// ForceFlush exports the spans queued, within ctx.
func (b *batcher) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case b.flush <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports the spans queued and stops the exporter, within ctx.
// Spans that end later are dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		close(b.stop)
		select {
		case <-b.done:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if e := b.exp.Shutdown(ctx); err == nil {
			err = e
		}
	})
	return err
}
