package fleet

import (
	"context"
	"sync"
	"time"
)

// beat is a fleet-wide clock: every interval it wakes at once every
// goroutine waiting on it. The probers wait on one, the scrapers on
// another, so that all backends' probes (and scrapes) of a round start
// together, backends that joined later included, rather than each on its
// own ticker's phase. An idle process pays for each wake-up (the
// scheduler, the timer, caches gone cold) more than for the request it
// wakes up for: measured at 8 and 64 backends, scrapes spread over the
// interval cost twice the CPU of scrapes sent together (issue 30's
// backends curve; docs/performance.md).
type beat struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next beat
}

func newBeat() *beat { return &beat{ch: make(chan struct{})} }

// next is closed at the next beat. A waiter busy through a beat misses
// it and waits for the one after, as a ticker drops the ticks of a slow
// receiver.
func (b *beat) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// run beats every interval() until ctx is done. The interval is read
// again after each beat: it grows and shrinks with the fleet (budget.go),
// and a change takes effect from the beat after the next.
func (b *beat) run(ctx context.Context, interval func() time.Duration) {
	t := time.NewTimer(interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		close(b.ch)
		b.ch = make(chan struct{})
		b.mu.Unlock()
		t.Reset(interval())
	}
}
