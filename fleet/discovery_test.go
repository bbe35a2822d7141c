package fleet

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/dnstest"
)

// hosts lists m's backends as host:port, draining ones marked with a "~".
func hosts(m *Model) []string {
	var out []string
	for _, b := range m.Backends() {
		h := b.URL.Host
		if b.Draining() {
			h = "~" + h
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// awaitMembers waits until m's backends read want (see hosts), woken by
// every membership change; a generous deadline ends a test that fails.
func awaitMembers(t *testing.T, m *Model, changed <-chan struct{}, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for !slices.Equal(hosts(m), want) {
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("backends %v, want %v", hosts(m), want)
		}
	}
}

// TestSRVDiscovery: an srv entry's records are the model's backends, each
// at its record's port, with the source named; an address that leaves
// drains and, with nothing running on it, is forgotten; one that comes
// back while draining is the same Backend. A lookup that fails, and an
// answer without any address, keep the last known set and are counted.
func TestSRVDiscovery(t *testing.T) {
	ns := dnstest.Start(t)
	ns.SetA("a.pods.test.", "10.1.0.1")
	ns.SetA("b.pods.test.", "10.1.0.2")
	ns.SetSRV("_http._tcp.vllm.test.", dnstest.SRV{Target: "a.pods.test.", Port: 8000}, dnstest.SRV{Target: "b.pods.test.", Port: 8001})
	cfg := config.Default()
	cfg.Resolver = ns.Addr
	cfg.Health.Interval = config.Duration(10 * time.Millisecond)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{
		{SRV: "_http._tcp.vllm.test.", DNSInterval: config.Duration(10 * time.Millisecond), MaxInFlight: 3},
	}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr, Timeout: 50 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 1)
	f.OnMembers(func(*Model) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	var hold atomic.Bool // a lease out on every backend: draining ones stay
	f.HoldDrain(func(*Model, *Backend) bool { return hold.Load() })
	m, _ := f.Model("m")
	f.ProbeAll(t.Context())
	if got := hosts(m); !slices.Equal(got, []string{"10.1.0.1:8000", "10.1.0.2:8001"}) {
		t.Fatalf("after the first lookup: %v", got)
	}
	first := m.Backends()[0]
	if st := first.Status(); st.Source != "srv:_http._tcp.vllm.test." || st.Draining {
		t.Fatalf("status %+v", st)
	}
	if n, _ := first.Limits(); n != 3 {
		t.Fatalf("max_in_flight of a discovered backend: %d, want the entry's 3", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	ns.SetSRV("_http._tcp.vllm.test.", dnstest.SRV{Target: "a.pods.test.", Port: 8000})
	awaitMembers(t, m, changed, "10.1.0.1:8000")

	// Gone, then back while draining: the same backend, state and all.
	hold.Store(true)
	ns.SetSRV("_http._tcp.vllm.test.") // no record at all: kept, counted
	ns.SetA("a.pods.test.")
	awaitDiscoveryErrors(t, f, 1)
	if got := hosts(m); !slices.Equal(got, []string{"10.1.0.1:8000"}) {
		t.Fatalf("an empty answer changed the fleet: %v", got)
	}
	ns.SetA("a.pods.test.", "10.1.0.1")
	ns.SetA("c.pods.test.", "10.1.0.3")
	ns.SetSRV("_http._tcp.vllm.test.", dnstest.SRV{Target: "c.pods.test.", Port: 8000})
	awaitMembers(t, m, changed, "~10.1.0.1:8000", "10.1.0.3:8000")
	ns.SetSRV("_http._tcp.vllm.test.", dnstest.SRV{Target: "a.pods.test.", Port: 8000}, dnstest.SRV{Target: "c.pods.test.", Port: 8000})
	awaitMembers(t, m, changed, "10.1.0.1:8000", "10.1.0.3:8000")
	if !slices.Contains(m.Backends(), first) {
		t.Fatal("the address came back as a new Backend: its state was lost")
	}

	// The DNS server stops: the fleet stays as it was.
	before := f.Discovery()[0].Errors
	ns.Stop()
	awaitDiscoveryErrors(t, f, before+2)
	if got := hosts(m); !slices.Equal(got, []string{"10.1.0.1:8000", "10.1.0.3:8000"}) {
		t.Fatalf("with the DNS server down: %v", got)
	}
	if d := f.Discovery()[0]; !d.Failing || d.LastError == "" || d.Source != "srv:_http._tcp.vllm.test." {
		t.Fatalf("discovery status %+v", d)
	}
}

func awaitDiscoveryErrors(t *testing.T, f *Fleet, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.Discovery()[0].Errors < n {
		if time.Now().After(deadline) {
			t.Fatalf("discovery errors %d, want %d", f.Discovery()[0].Errors, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
