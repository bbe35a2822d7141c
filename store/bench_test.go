package store

import (
	"testing"

	"github.com/maitred-dev/maitred/internal/redistest"
)

// BenchmarkTake is one backend slot confirmed in the store: the round trip
// a request waits for before it is sent (the release follows the answer).
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	r := startReplicaB(b, srv)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		h, err := r.Take(ctx, "bench:8000", 100000, 0, 100)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		h.Release()
		b.StartTimer()
	}
}

// BenchmarkRelease is the release round trip.
func BenchmarkRelease(b *testing.B) {
	srv := redistest.Start(b)
	r := startReplicaB(b, srv)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		h, err := r.Take(ctx, "bench:8000", 100000, 0, 100)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		h.Release()
	}
}

func startReplicaB(b *testing.B, srv *redistest.Server) *Store {
	cfg := defaultTestConfig(srv)
	s, err := New(Options{Config: cfg, Replica: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
