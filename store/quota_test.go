package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/quota"
)

// quotaReplica is a Store with a scaled quota minute, and its Run loop.
func quotaReplica(t *testing.T, srv *redistest.Server, name string, minute, lease time.Duration) (*Store, *Quotas, func()) {
	t.Helper()
	cfg := defaultTestConfig(srv)
	cfg.Lease, cfg.Heartbeat = config.Duration(lease), config.Duration(lease/4)
	s, err := New(Options{Config: cfg, Replica: name, QuotaMinute: minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait(); s.Close() }) }
	t.Cleanup(stop)
	return s, s.Quotas(), stop
}

func TestQuotaReserveSettleDeny(t *testing.T) {
	srv := redistest.Start(t)
	_, q, _ := quotaReplica(t, srv, "a", 4*time.Second, 10*time.Second)
	ctx := t.Context()
	lim := quota.Limits{TokensPerMinute: 1000, RequestsPerMinute: 10, MaxConcurrent: 2}

	var d *quota.Denied
	if _, err := q.Reserve(ctx, "k", lim, 1001); !errors.As(err, &d) || !d.Never || d.Kind != quota.Tokens {
		t.Fatalf("ask over the limit: %v; want Never", err)
	}
	r1, err := q.Reserve(ctx, "k", lim, 800)
	if err != nil {
		t.Fatal(err)
	}
	if st := r1.Status(); st.LimitTokens != 1000 || st.RemainingTokens != 200 || st.LimitRequests != 10 || st.RemainingRequests != 9 {
		t.Errorf("status after reserving 800: %+v", st)
	}
	if _, err := q.Reserve(ctx, "k", lim, 300); !errors.As(err, &d) || d.Kind != quota.Tokens || d.InUse != 800 || d.Asked != 300 || !d.Estimated {
		t.Fatalf("800 in flight + 300 on 1000: %v (%+v); want a tokens denial that waits for the request in flight", err, d)
	}
	r1.Settle(100) // gives back 700
	r1.Settle(5)   // ignored
	r2, err := q.Reserve(ctx, "k", lim, 800)
	if err != nil {
		t.Fatalf("after settling 100 of 800: %v", err)
	}
	r3, err := q.Reserve(ctx, "k", lim, 50)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Reserve(ctx, "k", lim, 1); !errors.As(err, &d) || d.Kind != quota.Concurrent {
		t.Fatalf("third in flight on max_concurrent 2: %v", err)
	}
	r2.Settle(800)
	r3.Settle(-1) // as reserved
	// 100 + 800 + 50 settled: 950 of 1000 until they expire, exactly.
	_, err = q.Reserve(ctx, "k", lim, 100)
	if !errors.As(err, &d) || d.Kind != quota.Tokens || d.Estimated || d.InUse != 950 {
		t.Fatalf("950 settled + 100: %v (%+v); want an exact tokens denial", err, d)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > 4*time.Second+100*time.Millisecond {
		t.Errorf("RetryAfter %s: want within the (scaled) minute", d.RetryAfter)
	}
	if st := q.Status("k", lim); st.RemainingTokens != 50 || st.ResetTokens <= 0 {
		t.Errorf("Status = %+v", st)
	}
}

// Three replicas, one key: the tokens of the requests whose processing
// overlaps any window stay within the limit (the window scaled to 2 s).
func TestQuotaWindowHoldsAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	const minute = 2 * time.Second
	const T = 10_000
	lim := quota.Limits{TokensPerMinute: T}
	var qs []*Quotas
	for _, n := range []string{"a", "b", "c"} {
		_, q, _ := quotaReplica(t, srv, n, minute, 10*time.Second)
		qs = append(qs, q)
	}
	type rec struct {
		start, stop time.Time
		used        int64
	}
	var mu sync.Mutex
	var recs []rec
	denied := 0
	var wg sync.WaitGroup
	end := time.Now().Add(3 * minute)
	for g := range 30 {
		q := qs[g%3]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(end) {
				ask := 100 + rng.Int64N(1500)
				r, err := q.Reserve(context.Background(), "k", lim, ask)
				if err != nil {
					var d *quota.Denied
					if !errors.As(err, &d) {
						t.Error(err)
						return
					}
					mu.Lock()
					denied++
					mu.Unlock()
					time.Sleep(min(d.RetryAfter, 100*time.Millisecond))
					continue
				}
				start := time.Now()
				time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
				used := ask * (1 + rng.Int64N(100)) / 100
				stop := time.Now()
				r.Settle(used)
				mu.Lock()
				recs = append(recs, rec{start, stop, used})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var worst int64
	for _, w := range recs { // the busiest windows start where a request ends
		var sum int64
		for _, r := range recs {
			if r.start.Before(w.stop.Add(minute)) && !r.stop.Before(w.stop) {
				sum += r.used
			}
		}
		if sum > T {
			t.Fatalf("window from %v: %d tokens used by the requests active in it across 3 replicas, limit %d", w.stop, sum, T)
		}
		worst = max(worst, sum)
	}
	t.Logf("%d requests, %d denials, busiest window %d of %d", len(recs), denied, worst, T)
	if denied == 0 || worst < T/3 {
		t.Fatalf("the run never pressed on the limit: busiest %d, denials %d", worst, denied)
	}
}

// A replica that dies with a reservation in flight does not hold the key's
// concurrency for ever: when its lease has ended, the next reserve counts
// the reservation as used and admits.
func TestQuotaDeadReplicaReservationEnds(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	_, qa, stopA := quotaReplica(t, srv, "a", 4*time.Second, lease)
	_, qb, _ := quotaReplica(t, srv, "b", 4*time.Second, lease)
	lim := quota.Limits{MaxConcurrent: 1, TokensPerMinute: 1000}
	if _, err := qa.Reserve(t.Context(), "k", lim, 300); err != nil {
		t.Fatal(err)
	}
	stopA() // dies: no settle, no heartbeat
	var d *quota.Denied
	if _, err := qb.Reserve(t.Context(), "k", lim, 1); !errors.As(err, &d) || d.Kind != quota.Concurrent {
		t.Fatalf("while a's lease runs: %v; want a concurrency denial", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := qb.Reserve(t.Context(), "k", lim, 1)
		if err == nil {
			if st := r.Status(); st.RemainingTokens != 1000-300-1 {
				t.Errorf("a's 300 tokens should count as used: remaining %d", st.RemainingTokens)
			}
			r.Settle(1)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's reservation still held 30s after it died (lease %s): %v", lease, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
