package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/redistest"
)

// TestResponseOwnersShared: an owner one replica records is the other's
// answer, with ResponseTTL; an id nobody recorded is not found; an id too
// long is neither written nor asked; with the store stopped both say
// ErrStoreDown.
func TestResponseOwnersShared(t *testing.T) {
	srv := redistest.Start(t)
	a := startReplica(t, srv, "a", 5*time.Second, 200*time.Millisecond)
	b := startReplica(t, srv, "b", 5*time.Second, 200*time.Millisecond)
	ctx := t.Context()
	want := admission.ResponseOwner{Key: "alice", Model: "m", Backend: "http://10.0.0.1:8000"}
	if err := a.PutResponseOwner(ctx, "resp_1", want); err != nil {
		t.Fatal(err)
	}
	got, found, err := b.ResponseOwner(ctx, "resp_1")
	if err != nil || !found || got != want {
		t.Fatalf("replica b reads %+v %v %v; want %+v", got, found, err, want)
	}
	ttl, err := srv.Do("PTTL", responseKey("resp_1"))
	ms, _ := strconv.ParseInt(strings.TrimPrefix(ttl, ":"), 10, 64)
	if err != nil || ms <= 0 || time.Duration(ms)*time.Millisecond > ResponseTTL {
		t.Fatalf("PTTL %q %v", ttl, err)
	}
	if _, found, err := b.ResponseOwner(ctx, "resp_nobody"); err != nil || found {
		t.Fatalf("an unrecorded id: found %v, %v", found, err)
	}
	long := strings.Repeat("x", maxResponseID+1)
	if err := a.PutResponseOwner(ctx, long, want); err == nil {
		t.Fatal("an over-long id was recorded")
	}
	if _, found, err := a.ResponseOwner(ctx, long); found || err != nil {
		t.Fatalf("an over-long id: found %v, %v", found, err)
	}
	srv.Stop()
	for a.State().Up {
		if _, _, err := a.ResponseOwner(ctx, "resp_1"); err != nil && !errors.Is(err, admission.ErrStoreDown) {
			t.Fatalf("store stopped: %v, want ErrStoreDown", err)
		}
	}
	if err := a.PutResponseOwner(ctx, "resp_2", want); !errors.Is(err, admission.ErrStoreDown) {
		t.Fatalf("put while down: %v", err)
	}
	if _, found, err := a.ResponseOwner(ctx, "resp_1"); found || !errors.Is(err, admission.ErrStoreDown) {
		t.Fatalf("get while down: found %v, %v", found, err)
	}
}
