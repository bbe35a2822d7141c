package replicas

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/sim"
)

// timed is one request's outcome and how long it took.
type timed struct {
	result
	start time.Time
	took  time.Duration
}

// loadTimed runs clients[i] looping clients on replica i until ctx ends,
// recording each request's outcome and duration.
func loadTimed(ctx context.Context, rs []*replica, clients []int, maxTokens int) func() []timed {
	var mu sync.Mutex
	var out []timed
	var wg sync.WaitGroup
	for i, n := range clients {
		for range n {
			wg.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					res := chat(context.Background(), rs[i], maxTokens)
					mu.Lock()
					out = append(out, timed{result: res, start: start, took: time.Since(start)})
					mu.Unlock()
				}
			})
		}
	}
	return func() []timed {
		wg.Wait()
		return out
	}
}

// TestStoreFrozenKeepsMaxInFlight: redis-server frozen (SIGSTOP) while
// replica a holds the whole max_in_flight (4) of a backend and replica b
// has requests waiting for room there. Each replica used to fall back to
// its share of the limit (2) as soon as it saw the store down, so b took 2
// while a still ran its 4, and a's own clients were cut to 2 at once. Now a
// replica keeps the room it held in the store plus its share of the room
// nobody held (also for a moment after the store is back, until every
// replica has written back what it took meanwhile): the backend, whose own
// peak records it, never runs more than 4, and every request succeeds.
// b's requests wait for the room a holds until the store is back: with no
// word from a, b cannot know that any is free (the price of never
// exceeding max_in_flight; TestStoreFrozenHoldsNoRequest is the case with
// room to spare).
func TestStoreFrozenKeepsMaxInFlight(t *testing.T) {
	srv := redistest.Start(t)
	// About 3 s a request (30 tokens), so that a still runs most of its 4
	// when b finds the store down; room for far more than 4.
	b := startBackend(t, sim.Config{TTFT: 20 * time.Millisecond, ITL: 100 * time.Millisecond, OutputTokens: 30, MaxNumSeqs: 256})
	cfg := fleetConfig([]*backend{b}, 4, srv.URL(), "store_lease: 60s\nstore_heartbeat: 500ms\nstore_timeout: 250ms\non_store_error: local\n")
	rs := startFleet(t, 2, cfg)
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 2 }, 30*time.Second)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	const tokens = 30
	// a's four requests start together and run about 3 s; b's two queue
	// behind them (held elsewhere), and the store freezes at once.
	onA := loadTimed(ctx, rs[:1], []int{4}, tokens)
	awaitStats(t, b, "replica a holding all 4", func(st sim.Stats) bool { return st.Running == 4 })
	onB := loadTimed(ctx, rs[1:], []int{2}, tokens)
	awaitQueued(t, rs[1], 2)
	completed := func(more int) {
		t.Helper()
		n := b.sim.Stats().Completed
		awaitStats(t, b, "requests completed", func(st sim.Stats) bool { return st.Completed >= n+more })
	}

	srv.Freeze()
	frozen := time.Now()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 0 }, 30*time.Second)
	}
	completed(8) // served while the store is frozen
	srv.Thaw()
	thawed := time.Now()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 1 }, 30*time.Second)
	}
	completed(8) // and after it is back
	stop()
	resA, resB := onA(), onB()

	st := b.sim.Stats()
	t.Logf("store frozen for %s; %d+%d requests, backend peak %d running", thawed.Sub(frozen).Round(time.Millisecond), len(resA), len(resB), st.PeakRunning)
	if st.PeakRunning > 4 {
		t.Errorf("the backend ran %d requests at once; max_in_flight is 4 across the replicas", st.PeakRunning)
	}
	var plain []result
	for _, r := range append(resA, resB...) {
		plain = append(plain, r.result)
	}
	if f := failures(plain); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(plain), f[0])
	}
}

// awaitQueued polls r's maitred_queue_depth (every class) until n wait.
func awaitQueued(t *testing.T, r *replica, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(r.url + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			total := 0.0
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "maitred_queue_depth{") {
					var v float64
					if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
						total += v
					}
				}
			}
			if total >= float64(n) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s: %d requests not queued within 30s", r.name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStoreFrozenHoldsNoRequest: with room to spare on the backend (one
// client on each replica, max_in_flight 4), redis-server frozen costs a
// request at most store_timeout (the operation that finds it down); every
// later one is admitted on the replica's allowance at once.
func TestStoreFrozenHoldsNoRequest(t *testing.T) {
	srv := redistest.Start(t)
	// About 200 ms a request.
	b := startBackend(t, sim.Config{TTFT: 20 * time.Millisecond, ITL: 20 * time.Millisecond, OutputTokens: 10, MaxNumSeqs: 256})
	cfg := fleetConfig([]*backend{b}, 4, srv.URL(), "store_lease: 60s\nstore_heartbeat: 500ms\nstore_timeout: 250ms\non_store_error: local\n")
	rs := startFleet(t, 2, cfg)
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 2 }, 30*time.Second)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	results := loadTimed(ctx, rs, []int{1, 1}, 10)
	completed := func(more int) {
		t.Helper()
		n := b.sim.Stats().Completed
		awaitStats(t, b, "requests completed", func(st sim.Stats) bool { return st.Completed >= n+more })
	}
	completed(10)
	srv.Freeze()
	frozen := time.Now()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 0 }, 30*time.Second)
	}
	completed(10)
	srv.Thaw()
	thawed := time.Now()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 1 }, 30*time.Second)
	}
	completed(10)
	stop()
	res := results()

	var plain []result
	var before, during []time.Duration
	for _, r := range res {
		plain = append(plain, r.result)
		switch {
		case r.start.Add(r.took).Before(frozen):
			before = append(before, r.took)
		case r.start.After(frozen) && r.start.Before(thawed):
			during = append(during, r.took)
		}
	}
	if f := failures(plain); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(plain), f[0])
	}
	if len(before) == 0 || len(during) == 0 {
		t.Fatalf("%d requests done before the freeze, %d started during it", len(before), len(during))
	}
	slices.Sort(before)
	slices.Sort(during)
	usual, worst := before[len(before)/2], during[len(during)-1]
	t.Logf("store frozen for %s; usual %s, worst started while frozen %s (of %d)", thawed.Sub(frozen).Round(time.Millisecond), usual, worst, len(during))
	// Its usual time, store_timeout 250 ms, and two seconds of slack for a
	// loaded machine (CI runs every package at once on two cores). The
	// requests that completed while the store was frozen (completed(10)
	// above) already show none waits for the store to come back.
	if bound := usual + 250*time.Millisecond + 2*time.Second; worst > bound {
		t.Errorf("a request started while the store was frozen took %s; usual %s, bound %s", worst, usual, bound)
	}
	if st := b.sim.Stats(); st.PeakRunning > 4 {
		t.Errorf("the backend ran %d requests at once; max_in_flight is 4", st.PeakRunning)
	}
}
