package replicas

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/dnstest"
	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/sim"
)

// backendsOnOnePort serves n simulators on 127.0.0.2, 127.0.0.3, ... all
// on the same port, as the pods behind a headless Service are: one DNS
// name, one port, one address each.
func backendsOnOnePort(t *testing.T, n int, c sim.Config) (string, []*backend) {
	t.Helper()
	c.Model = "m"
	port, lns := dnstest.ListenOnOnePort(t, n)
	var out []*backend
	for _, ln := range lns {
		s := sim.New(c, nil)
		srv := &http.Server{Handler: s.Handler()}
		go srv.Serve(ln)
		t.Cleanup(func() { s.Close(); srv.Close() })
		out = append(out, &backend{sim: s, addr: ln.Addr().String()})
	}
	return port, out
}

// dnsConfig is a replica's config: the shared store, the test's DNS
// server, and one model whose backends are the addresses of name.
func dnsConfig(store, resolver, name, port string, maxIn int) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
drain_delay: 0s
drain_timeout: 10s
scrape_interval: 100ms
health: {interval: 50ms, timeout: 2s}
store: %s
resolver: %s
models:
  - name: m
    queue_size: 2000
    queue_timeout: 60s
    backends:
      - dns: %s:%s
        dns_interval: 50ms
        max_in_flight: %d
`, store, resolver, name, port, maxIn)
}

type debugBackend struct {
	URL         string `json:"url"`
	Source      string `json:"source"`
	Draining    bool   `json:"draining"`
	State       string `json:"state"`
	MaxInFlight int    `json:"max_in_flight"`
}

// awaitBackends polls the replica's /debug/backends until ok holds (no
// event to wait on from outside the process; the deadline is generous).
func (r *replica) awaitBackends(t *testing.T, what string, ok func([]debugBackend) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var bs []debugBackend
		resp, err := http.Get(r.url + "/debug/backends")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&bs)
			resp.Body.Close()
		}
		if err == nil && ok(bs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s, %s: /debug/backends %+v (%v)", r.name, what, bs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyAt reports whether the ready backends are exactly addrs, each with
// max_in_flight maxIn, and nothing else is listed (drained ones are gone).
func readyAt(bs []debugBackend, maxIn int, addrs ...string) bool {
	if len(bs) != len(addrs) {
		return false
	}
	want := map[string]bool{}
	for _, a := range addrs {
		want["http://"+a] = true
	}
	for _, b := range bs {
		if !want[b.URL] || b.State != "ready" || b.Draining || b.MaxInFlight != maxIn || !strings.HasPrefix(b.Source, "dns:") {
			return false
		}
	}
	return true
}

// Two replicas sharing a store, their backends from one DNS name served by
// a real DNS server: each resolves and reloads on its own while clients
// keep both busy. The records go 2 -> 3 -> 1 addresses and each replica's
// config file changes max_in_flight (SIGHUP): both follow every change,
// no request fails, no backend aborts or fails a request, and the shared
// accounting still holds each backend within max_in_flight across both.
func TestReplicasFollowDNSAndReload(t *testing.T) {
	store := redistest.Start(t)
	ns := dnstest.Start(t)
	port, bs := backendsOnOnePort(t, 3, fastBackend)
	ip := func(i int) string { h, _, _ := net.SplitHostPort(bs[i].addr); return h }
	const name = "vllm.maitred.test."
	ns.SetA(name, ip(0), ip(1))
	cfg := dnsConfig(store.URL(), ns.Addr, name, port, 4)
	rs := startFleet(t, 2, cfg)
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 2 }, 30*time.Second)
		r.awaitBackends(t, "2 backends", func(b []debugBackend) bool { return readyAt(b, 4, bs[0].addr, bs[1].addr) })
	}

	stop := make(chan struct{})
	var res []result
	var wg sync.WaitGroup
	wg.Go(func() { res = load(rs, 24, 0, 16, stop) })
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()

	// 2 -> 3 addresses: both replicas find and warm the new one.
	ns.SetA(name, ip(0), ip(1), ip(2))
	for _, r := range rs {
		r.awaitBackends(t, "3 backends", func(b []debugBackend) bool { return readyAt(b, 4, bs[0].addr, bs[1].addr, bs[2].addr) })
	}
	awaitStats(t, bs[2], "traffic on the new backend", func(s sim.Stats) bool { return s.Completed >= 20 })

	// A reload on each replica: max_in_flight 4 -> 6.
	for _, r := range rs {
		if err := os.WriteFile(r.path, []byte(dnsConfig(store.URL(), ns.Addr, name, port, 6)), 0o600); err != nil {
			t.Fatal(err)
		}
		r.cmd.Process.Signal(syscall.SIGHUP)
	}
	for _, r := range rs {
		r.awaitBackends(t, "the reload", func(b []debugBackend) bool { return readyAt(b, 6, bs[0].addr, bs[1].addr, bs[2].addr) })
	}

	// 3 -> 1: the leaving two drain on both replicas.
	ns.SetA(name, ip(2))
	for _, r := range rs {
		r.awaitBackends(t, "1 backend", func(b []debugBackend) bool { return readyAt(b, 6, bs[2].addr) })
	}
	before := bs[2].sim.Stats().Completed
	awaitStats(t, bs[2], "traffic after the removal", func(s sim.Stats) bool { return s.Completed >= before+20 })
	close(stop)
	wg.Wait()

	if f := failures(res); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(res), f[0])
	}
	for i, b := range bs {
		st := b.sim.Stats()
		t.Logf("backend %d: %d completed, peak %d running", i, st.Completed, st.PeakRunning)
		if st.Aborted != 0 || st.Failed != 0 {
			t.Errorf("backend %d: %d aborted, %d failed", i, st.Aborted, st.Failed)
		}
		if st.PeakRunning > 6 {
			t.Errorf("backend %d ran %d at once: max_in_flight is at most 6 across both replicas", i, st.PeakRunning)
		}
	}
	for _, r := range rs {
		if v, _ := r.metric(t, "maitred_store_up"); v != 1 {
			t.Errorf("replica %s: maitred_store_up %v", r.name, v)
		}
	}
	t.Logf("%d requests through 2 replicas, none failed", len(res))
}
