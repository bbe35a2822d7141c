package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/redistest"
)

// TestHeartbeatSentWhileDownKeepsWriteBack: redis-server frozen (SIGSTOP).
// A heartbeat sent while the store is down and answered once it is thawed
// used to end the write-back, so a holding taken locally while that
// heartbeat was on its way never reached the store: the other replicas
// counted the backend short (and sent it more than max_in_flight) until the
// request ended. Only a heartbeat sent while the store is taken as up ends
// the write-back now.
func TestHeartbeatSentWhileDownKeepsWriteBack(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(Options{Config: defaultTestConfig(srv), Replica: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	s.beat(ctx)
	if _, err := s.Take(ctx, "v", 4, 0, 1); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	// Times out (store_timeout 2 s): the store is down from here on.
	if _, err := s.Take(ctx, "v", 4, 0, 1); !errors.Is(err, admission.ErrStoreDown) {
		t.Fatalf("take on a frozen store: %v, want ErrStoreDown", err)
	}
	beat := make(chan struct{})
	go func() { s.beat(ctx); close(beat) }()
	// The heartbeat took its snapshot and waits on the frozen store once a
	// connection is in use.
	deadline := time.Now().Add(30 * time.Second)
	for st := s.rdb.PoolStats(); st.TotalConns == st.IdleConns; st = s.rdb.PoolStats() {
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat did not reach the store's socket")
		}
		time.Sleep(time.Millisecond)
	}
	// Taken while the heartbeat is on its way: local only.
	if h, err := s.Take(ctx, "v", 4, 0, 1); !errors.Is(err, admission.ErrStoreDown) || h == nil {
		t.Fatalf("take while down: %v, %v", h, err)
	}
	srv.Thaw()
	thawed = true
	<-beat
	if !s.State().Up {
		t.Fatalf("the heartbeat answered after the thaw did not find the store: %+v", s.State())
	}
	s.beat(ctx) // sent while up
	if n, err := srv.Do("HLEN", backendKey("v")); err != nil || n != ":3" {
		t.Fatalf("HLEN = %q, %v; want the 3 holdings this replica has, the one taken while the late heartbeat ran included", n, err)
	}
}
