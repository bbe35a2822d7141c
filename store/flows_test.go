package store

import (
	"testing"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/redistest"
)

// fairPool is a model's pool under fairness tokens, in front of one
// backend of room for one request.
func fairPool() *admission.Pool {
	return admission.NewPool("m", admission.PoolConfig{QueueSize: 10, QueueTimeout: 30 * time.Second, Classes: 1, Fairness: admission.Tokens},
		[]admission.SlotConfig{{Name: "b0", Ready: func() bool { return true }, MaxInFlight: 1}}, nil)
}

// serve runs one request of flow on p: prompt tokens in, output out.
func serve(t *testing.T, p *admission.Pool, flow string, prompt int, output int64) {
	t.Helper()
	l, o := p.Acquire(t.Context(), admission.Ticket{Tokens: 1, Exact: true, Flow: flow, Prompt: prompt})
	if o != admission.Admitted {
		t.Fatalf("%s: %s", flow, o)
	}
	l.SettleOutput(output)
	l.Release(admission.Succeeded)
}

func counter(p *admission.Pool, flow string) float64 {
	for _, f := range p.Flows() {
		if f.Name == flow {
			return f.Counter
		}
	}
	return -1
}

// TestFlowsSharedBetweenReplicas: two replicas' pools of one model sync
// their flows' service through a real redis-server. Service flow a gets
// on the first is added to a's counter on the second at its next sync,
// so that there b, with no service anywhere, is granted before a.
func TestFlowsSharedBetweenReplicas(t *testing.T) {
	srv := redistest.Start(t)
	r1 := startReplica(t, srv, "r1", 10*time.Second, time.Second)
	r2 := startReplica(t, srv, "r2", 10*time.Second, time.Second)
	p1, p2 := fairPool(), fairPool()
	ctx := t.Context()
	sync := func() {
		t.Helper()
		for _, c := range []struct {
			p *admission.Pool
			s *replica
		}{{p1, r1}, {p2, r2}} {
			if _, err := c.p.SyncFlows(ctx, c.s, time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Both replicas know both flows, with no service yet.
	for _, p := range []*admission.Pool{p1, p2} {
		serve(t, p, "a", 0, 0)
		serve(t, p, "b", 0, 0)
	}
	sync()
	// On r2, a and b wait behind a request of c's, a first: even
	// counters, so a would go first.
	hold, _ := p2.Acquire(ctx, admission.Ticket{Tokens: 1, Flow: "c"})
	granted := make(chan string, 2)
	for _, f := range []string{"a", "b"} {
		go func() {
			l, o := p2.Acquire(ctx, admission.Ticket{Tokens: 1, Flow: f})
			if o == admission.Admitted {
				granted <- f
				l.Release(admission.Succeeded)
			}
		}()
		awaitDepth(t, p2, map[string]int{"a": 1, "b": 2}[f])
	}
	before := counter(p2, "a")
	if b := counter(p2, "b"); b != before {
		t.Fatalf("counters before: a %v, b %v", before, b)
	}
	serve(t, p1, "a", 1000, 500) // 1000 x 1 + 500 x 2
	sync()
	if got := counter(p2, "a") - before; got != 2000 {
		t.Fatalf("a's counter on r2 grew by %v after r1 served it 2000, want 2000", got)
	}
	if got := counter(p1, "a"); got != 2000 {
		t.Errorf("a's counter on r1 is %v, want 2000 (its own service, once)", got)
	}
	// The backend frees on r2: b goes first, a having been served on r1.
	hold.Release(admission.Succeeded)
	if first := <-granted; first != "b" {
		t.Errorf("r2 granted %s first, want b (a was served on r1)", first)
	}
	<-granted
}

// awaitDepth waits until n requests wait in p.
func awaitDepth(t *testing.T, p *admission.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats().Depth[0] != n {
		if time.Now().After(deadline) {
			t.Fatalf("depth %v, want %d", p.Stats().Depth, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFlowClaimsHoldGrantAcrossReplicas: through a real redis-server,
// replica 1 holds back a grant to flow a while replica 2 claims b waiting
// there far below a; once replica 2 stops syncing (it died), its claims
// end FlowClaimsTTL after its last sync, on the store's clock, and
// replica 1's next sync grants a.
func TestFlowClaimsHoldGrantAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	r1 := startReplica(t, srv, "r1", 10*time.Second, time.Second)
	r2 := startReplica(t, srv, "r2", 10*time.Second, time.Second)
	p1, p2 := fairPool(), fairPool()
	ctx := t.Context()
	acquire := func(p *admission.Pool, flow string, prompt int) <-chan *admission.Lease {
		ch := make(chan *admission.Lease, 1)
		go func() {
			if l, o := p.Acquire(ctx, admission.Ticket{Tokens: 1, Exact: true, Flow: flow, Prompt: prompt}); o == admission.Admitted {
				ch <- l
			}
		}()
		return ch
	}
	<-acquire(p2, "a", 1000) // a runs on replica 2, charged 1000
	acquire(p2, "b", 10)     // b waits there, at 0
	awaitDepth(t, p2, 1)
	l1 := <-acquire(p1, "a", 100)
	a2 := acquire(p1, "a", 100)
	awaitDepth(t, p1, 1)
	for _, c := range []struct {
		p *admission.Pool
		s *replica
	}{{p2, r2}, {p1, r1}} {
		if _, err := c.p.SyncFlows(ctx, c.s, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	l1.Release(admission.Succeeded)
	if d := p1.Stats().Depth[0]; d != 1 {
		t.Fatalf("replica 1 granted a at once (depth %d) while b, 1000 below a, waits on replica 2", d)
	}
	r2.stop()
	deadline := time.Now().Add(20 * time.Second) // within the queue's timeout
	for granted := false; !granted; {
		select {
		case l := <-a2:
			l.Release(admission.Succeeded)
			granted = true
			continue
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 1 still holds a back 20 s after replica 2 stopped syncing")
		}
		if _, err := p1.SyncFlows(ctx, r1, time.Hour); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, err := srv.Do("HLEN", claimsKey("m")); err != nil || n != ":1" {
		t.Errorf("claims hash holds %q replicas (%v), want replica 1's alone: replica 2's dropped", n, err)
	}
}

// TestFlowClaimsCarrySeenAndWaited: through a real redis-server, a
// replica's claims reach the others whole: the service their counters
// counted (Seen) and how long the flow's first request waited (Waited),
// which the others' hold-backs weigh.
func TestFlowClaimsCarrySeenAndWaited(t *testing.T) {
	srv := redistest.Start(t)
	r1 := startReplica(t, srv, "r1", 10*time.Second, time.Second)
	r2 := startReplica(t, srv, "r2", 10*time.Second, time.Second)
	ctx := t.Context()
	want := []admission.FlowClaim{
		{Flow: "a", Counter: 2000.5, Seen: 1800.25},
		{Flow: "b", Counter: 900, Class: 1, Waiting: true, Seen: 300, Waited: 750 * time.Millisecond},
	}
	if _, err := r1.SyncFlows(ctx, "m", nil, want); err != nil {
		t.Fatal(err)
	}
	v, err := r2.SyncFlows(ctx, "m", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := v.Others["r1"]
	if len(got) != len(want) {
		t.Fatalf("replica 2 read %+v from replica 1, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("claim %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
