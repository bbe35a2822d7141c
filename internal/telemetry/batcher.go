package telemetry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
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

// exporter sends batches of traces to a collector. It is called from the
// batcher's goroutine only (or, with Options.Sync, from the request's).
type exporter interface {
	export(ctx context.Context, traces []*Trace) error
	shutdown(ctx context.Context) error
}

// batcher exports finished traces in batches from a goroutine of its own,
// with the SDK's batch span processor's settings and behaviour: it counts
// spans (a batch holds up to maxBatch spans, the queue up to maxQueue; a
// full queue drops traces, it never blocks a request) and exports what it
// holds every delay. A trace's finish only appends it to the queue under
// a mutex, and the goroutine is woken once a batch is full, not once per
// span. Exported traces go back to the provider's pool.
type batcher struct {
	exp     exporter
	set     batchSettings
	release func(*Trace)

	mu      sync.Mutex
	queue   []*Trace
	spans   int // in queue
	stopped bool

	kick  chan struct{}      // a batch is full (buffered: one is enough)
	flush chan chan struct{} // ForceFlush: export what is queued, then close
	stop  chan struct{}      // Shutdown: export what is queued, then end
	done  chan struct{}      // the goroutine ended
	once  sync.Once
	batch []*Trace // the goroutine's
}

func newBatcher(exp exporter, s batchSettings, release func(*Trace)) *batcher {
	b := &batcher{
		exp:     exp,
		set:     s,
		release: release,
		kick:    make(chan struct{}, 1),
		flush:   make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go b.run()
	return b
}

// add queues t (a trace, or a carrier of encoded spans) for export; false
// when it was dropped (a full queue, or the batcher stopped), and then t
// is still the caller's.
func (b *batcher) add(t *Trace) bool {
	n := t.spanCount()
	b.mu.Lock()
	if b.stopped || b.spans+n > b.set.maxQueue {
		b.mu.Unlock()
		return false
	}
	b.queue = append(b.queue, t)
	b.spans += n
	full := b.spans >= b.set.maxBatch
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return true
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

// export sends the queue in batches of up to maxBatch spans (a trace is
// never split; one with more spans than that goes alone): full batches
// only, or all.
func (b *batcher) export(fullOnly bool) {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 || (fullOnly && b.spans < b.set.maxBatch) {
			b.mu.Unlock()
			return
		}
		n, spans := 0, 0
		for n < len(b.queue) && (n == 0 || spans+b.queue[n].spanCount() <= b.set.maxBatch) {
			spans += b.queue[n].spanCount()
			n++
		}
		b.batch = append(b.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.spans -= spans
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), b.set.timeout)
		if err := b.exp.export(ctx, b.batch); err != nil {
			otel.Handle(err)
		}
		cancel()
		for _, t := range b.batch {
			b.release(t)
		}
		clear(b.batch)
	}
}

// ForceFlush exports the traces queued, within ctx.
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

// Shutdown exports the traces queued and stops the exporter, within ctx.
// Traces finished later are dropped.
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
		if e := b.exp.shutdown(ctx); err == nil {
			err = e
		}
	})
	return err
}
