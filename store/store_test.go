package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// replica is one Store with its Run loop, and the frees it heard.
type replica struct {
	*Store
	freed chan string
	stop  func()
}

func startReplica(t *testing.T, srv *redistest.Server, name string, lease, beat time.Duration) *replica {
	t.Helper()
	cfg := defaultTestConfig(srv)
	cfg.Lease, cfg.Heartbeat = config.Duration(lease), config.Duration(beat)
	s, err := New(Options{Config: cfg, Replica: name})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{Store: s, freed: make(chan string, 1024)}
	s.Watch(func(b string) {
		if b != "" {
			select {
			case r.freed <- b:
			default:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			s.Close()
		})
	}
	t.Cleanup(r.stop)
	return r
}

// awaitFreed waits for a free announced on backend.
func (r *replica) awaitFreed(t *testing.T, backend string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case b := <-r.freed:
			if b == backend {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no free announced on %s", r.replica, backend)
		}
	}
}

func TestTakeCountsEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv, "a", 10*time.Second, time.Second)
	b := startReplica(t, srv, "b", 10*time.Second, time.Second)
	ctx := t.Context()
	ha, err := a.Take(ctx, "vllm-0:8000", 2, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Take(ctx, "vllm-0:8000", 2, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Take(ctx, "vllm-0:8000", 2, 0, 100); !errors.Is(err, admission.ErrHeldElsewhere) {
		t.Fatalf("third take on a backend with max_in_flight 2: err = %v, want ErrHeldElsewhere", err)
	}
	// Another backend is accounted apart.
	if h, err := a.Take(ctx, "vllm-1:8000", 2, 0, 100); err != nil {
		t.Fatal(err)
	} else {
		h.Release()
	}
	hb.Release()
	a.awaitFreed(t, "vllm-0:8000") // b's release is announced to a
	h, err := a.Take(ctx, "vllm-0:8000", 2, 0, 100)
	if err != nil {
		t.Fatalf("after b released: %v", err)
	}
	h.Release()
	ha.Release()
	hb.Release() // idempotent
}

func TestTakeKeepsTheTokenBudget(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv, "a", 10*time.Second, time.Second)
	b := startReplica(t, srv, "b", 10*time.Second, time.Second)
	ctx := t.Context()
	// An idle backend takes even a request over its budget.
	h1, err := a.Take(ctx, "k", 0, 1000, 1500)
	if err != nil {
		t.Fatalf("idle backend: %v", err)
	}
	h1.Release()
	h2, err := a.Take(ctx, "k", 0, 1000, 600)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release()
	if _, err := b.Take(ctx, "k", 0, 1000, 500); !errors.Is(err, admission.ErrHeldElsewhere) {
		t.Fatalf("600 + 500 tokens on a budget of 1000: err = %v, want ErrHeldElsewhere", err)
	}
	h3, err := b.Take(ctx, "k", 0, 1000, 400)
	if err != nil {
		t.Fatalf("600 + 400 tokens on a budget of 1000: %v", err)
	}
	h3.Release()
}

// A replica that dies without releasing frees its holdings when its lease
// ends: the survivors' heartbeat drops them and announces the room.
func TestDeadReplicaFreedWithinLease(t *testing.T) {
	srv := redistest.Start(t)
	lease := time.Second
	a := startReplica(t, srv, "a", lease, 300*time.Millisecond)
	b := startReplica(t, srv, "b", lease, 300*time.Millisecond)
	ctx := t.Context()
	for range 2 {
		if _, err := a.Take(ctx, "v", 2, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	a.stop() // dies holding both: no release, no more heartbeats
	died := time.Now()
	if _, err := b.Take(ctx, "v", 2, 0, 1); !errors.Is(err, admission.ErrHeldElsewhere) {
		t.Fatalf("while a's lease runs: err = %v, want ErrHeldElsewhere", err)
	}
	b.awaitFreed(t, "v")
	h, err := b.Take(ctx, "v", 2, 0, 1)
	if err != nil {
		t.Fatalf("after a's lease ended: %v", err)
	}
	h.Release()
	if d := time.Since(died); d < lease-100*time.Millisecond {
		t.Errorf("a's holdings were freed %s after it died, before its lease (%s) ended", d, lease)
	}
}

// A store that restarts empty is refilled by each replica's next
// heartbeat: holdings of requests still running count again, each once.
func TestRestartedStoreRefilled(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv, "a", 5*time.Second, 200*time.Millisecond)
	ctx := t.Context()
	h, err := a.Take(ctx, "v", 1, 0, 7)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	// The first operation on the new server either succeeds on a fresh
	// connection or marks the store down; either way a heartbeat must
	// bring the holding back.
	awaitWrittenBack(t, srv, a.Store)
	if _, err := a.Take(ctx, "v", 1, 0, 7); err == nil {
		t.Fatal("the written-back holding did not count: a second take on max_in_flight 1 succeeded")
	}
	h.Release()
	if n, _ := srv.Do("HLEN", backendKey("v")); n != ":0" {
		t.Errorf("after release HLEN = %s, want 0", n)
	}
}

// A store that restarts between a replica's first take and its first
// heartbeat is refilled too: the take told the replica the epoch its
// holding went into, and the heartbeat finds another.
func TestStoreRestartedBeforeFirstHeartbeat(t *testing.T) {
	srv := redistest.Start(t)
	cfg := defaultTestConfig(srv)
	cfg.Lease, cfg.Heartbeat = config.Duration(5*time.Second), config.Duration(200*time.Millisecond)
	s, err := New(Options{Config: cfg, Replica: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := s.Take(t.Context(), "v", 1, 0, 7) // Run has not started: no heartbeat yet
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	srv.Restart()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	awaitWrittenBack(t, srv, s)
}

// awaitWrittenBack waits until backend v's hash holds one holding again
// after the store restarted empty.
func awaitWrittenBack(t *testing.T, srv *redistest.Server, s *Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := srv.Do("HLEN", backendKey("v"))
		if err == nil && n == ":1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("holding not written back after the restart: HLEN = %q, %v; store state %+v", n, err, s.State())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A store that cannot be reached is marked down at the first failed
// operation; Take then answers at once with a local holding.
func TestStoreDownAnswersLocally(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv, "a", 5*time.Second, 200*time.Millisecond)
	ctx := t.Context()
	h, err := a.Take(ctx, "v", 4, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	srv.Stop()
	for a.State().Up {
		h, err := a.Take(ctx, "v", 4, 0, 1)
		if h != nil {
			h.Release()
		}
		if err != nil && !errors.Is(err, admission.ErrStoreDown) {
			t.Fatalf("store stopped: err = %v, want ErrStoreDown", err)
		}
	}
	h, err = a.Take(ctx, "v", 4, 0, 1)
	if !errors.Is(err, admission.ErrStoreDown) || h == nil {
		t.Fatalf("while down: %v, %v; want a local holding and ErrStoreDown", h, err)
	}
	h.Release()
	if st := a.State(); st.Err == "" || st.Since.IsZero() {
		t.Errorf("state while down = %+v: want the error and since when", st)
	}
}

func defaultTestConfig(srv *redistest.Server) config.StoreConfig {
	cfg := config.Default().Store
	cfg.URL = srv.URL()
	cfg.Timeout = config.Duration(2 * time.Second)
	return cfg
}
