package quota

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Fifty clients share one key for ten (virtual) minutes, each reserving a
// random amount, holding it a random time and settling a random usage:
// mostly less than reserved, sometimes more (debt), sometimes unknown. For
// every 60 s window, the usage of the requests active in it (started before
// its end, ended after its start) must stay within T plus their debt; the
// requests started in it within the request limit; and the requests in
// flight within the concurrency limit.
func TestWindowsHoldUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			T       = 100_000
			RPM     = 300
			slots   = 30
			clients = 50
			run     = 10 * time.Minute
		)
		lim := Limits{TokensPerMinute: T, RequestsPerMinute: RPM, MaxConcurrent: slots}
		l := NewLocal(time.Now)
		type rec struct {
			start, stop    time.Time
			reserved, used int64
		}
		var (
			mu       sync.Mutex
			recs     []rec
			inflight atomic.Int64
			denials  = map[Kind]int{}
			wg       sync.WaitGroup
		)
		end := time.Now().Add(run)
		for g := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 13))
				for time.Now().Before(end) {
					ask := 1 + rng.Int64N(5000)
					r, err := l.Reserve(context.Background(), "k", lim, ask)
					if err != nil {
						var d *Denied
						if !errors.As(err, &d) || d.Never || d.RetryAfter <= 0 {
							t.Errorf("Reserve(%d): %v", ask, err)
							return
						}
						mu.Lock()
						denials[d.Kind]++
						mu.Unlock()
						time.Sleep(d.RetryAfter + time.Duration(rng.Int64N(int64(time.Second))))
						continue
					}
					if n := inflight.Add(1); n > slots {
						t.Errorf("%d requests in flight, limit %d", n, slots)
					}
					start := time.Now()
					time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Second))))
					used := ask * (1 + rng.Int64N(100)) / 100
					switch rng.IntN(20) {
					case 0:
						used = ask + rng.Int64N(ask) // debt
					case 1:
						used = ask
						r.Settle(-1)
					}
					inflight.Add(-1)
					r.Settle(used)
					mu.Lock()
					recs = append(recs, rec{start: start, stop: time.Now(), reserved: ask, used: used})
					mu.Unlock()
				}
			})
		}
		wg.Wait()

		var worst int64
		for _, w := range recs { // the busiest windows start where a request ends
			var sum, debt int64
			for _, r := range recs {
				if r.start.Before(w.stop.Add(time.Minute)) && !r.stop.Before(w.stop) {
					sum += r.used
					debt += max(0, r.used-r.reserved)
				}
			}
			if sum > T+debt {
				t.Fatalf("window from %v: %d tokens used by the requests active in it, limit %d + debt %d",
					w.stop, sum, T, debt)
			}
			worst = max(worst, sum-debt)
		}
		starts := make([]time.Time, len(recs))
		for i, r := range recs {
			starts[i] = r.start
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		for i, s := range starts {
			j, _ := slices.BinarySearchFunc(starts, s.Add(time.Minute), func(a, b time.Time) int { return a.Compare(b) })
			if n := j - i; n > RPM {
				t.Fatalf("%d requests started in the minute from %v, limit %d", n, s, RPM)
			}
		}
		t.Logf("%d requests admitted; busiest window %d tokens (limit %d) without debt; denials %v", len(recs), worst, T, denials)
		// the limits bit: a checker that never sees a busy window proves nothing
		if worst < T/2 || denials[Tokens] == 0 || denials[Concurrent] == 0 {
			t.Fatalf("the run never pressed on the limits: busiest window %d of %d, denials %v", worst, T, denials)
		}
	})
}
