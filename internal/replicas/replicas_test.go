package replicas

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/redistest"
	"github.com/maitred-dev/maitred/sim"
)

// The simulated backends: short generations (8 tokens, ~60 ms) and room for
// far more than max_in_flight, so that their own peak shows what the
// gateways let through.
var fastBackend = sim.Config{TTFT: 20 * time.Millisecond, ITL: 5 * time.Millisecond, MaxNumSeqs: 256}

func startFleet(t *testing.T, n int, cfg string) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	for i := range rs {
		rs[i] = startReplica(t, string(rune('a'+i)), cfg)
	}
	return rs
}

// Three replicas share two backends with max_in_flight 4 through one
// redis-server: under 60 concurrent clients spread over them, neither
// backend ever runs more than 4 requests (the simulator's own peak), and
// every request succeeds.
func TestReplicasShareBackendBudgets(t *testing.T) {
	srv := redistest.Start(t)
	bs := []*backend{startBackend(t, fastBackend), startBackend(t, fastBackend)}
	rs := startFleet(t, 3, fleetConfig(bs, 4, srv.URL(), ""))
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 3 }, 30*time.Second)
	}
	res := load(rs, 60, 5, 8, nil)
	if f := failures(res); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(res), f[0])
	}
	for i, b := range bs {
		st := b.sim.Stats()
		t.Logf("backend %d: peak %d running, %d completed", i, st.PeakRunning, st.Completed)
		if st.PeakRunning > 4 {
			t.Errorf("backend %d ran %d requests at once; max_in_flight is 4 across all replicas", i, st.PeakRunning)
		}
		if st.PeakRunning < 2 {
			t.Errorf("backend %d peak %d: the load did not exercise it", i, st.PeakRunning)
		}
	}
}

// The same run without the store: each replica grants each backend its
// whole max_in_flight, so a backend runs more than 4 at once. This is why
// the store exists.
func TestReplicasWithoutStoreOversubscribe(t *testing.T) {
	bs := []*backend{startBackend(t, fastBackend), startBackend(t, fastBackend)}
	rs := startFleet(t, 3, fleetConfig(bs, 4, "", ""))
	res := load(rs, 60, 5, 8, nil)
	if f := failures(res); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(res), f[0])
	}
	peak := 0
	for i, b := range bs {
		st := b.sim.Stats()
		t.Logf("backend %d: peak %d running (max_in_flight 4 per replica, 3 replicas)", i, st.PeakRunning)
		peak = max(peak, st.PeakRunning)
	}
	if peak <= 4 {
		t.Errorf("without the store the backends' peak is %d: the replicas did not oversubscribe max_in_flight 4", peak)
	}
}

// A replica killed with SIGKILL while holding all of a backend's room frees
// it when its lease ends: the backend's capacity comes back for the other
// replicas, whose requests wait in their queues meanwhile and none fails.
func TestKilledReplicaFreesItsHoldings(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 2 * time.Second
	b := startBackend(t, fastBackend)
	cfg := fleetConfig([]*backend{b}, 4, srv.URL(), "store_lease: 2s\nstore_heartbeat: 500ms\n")
	rs := startFleet(t, 3, cfg)
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 3 }, 30*time.Second)
	}
	victim, others := rs[2], rs[:2]
	// The victim holds the backend's 4 slots with long generations
	// (about 10 s each).
	for range 4 {
		go chat(t.Context(), victim, 2000)
	}
	awaitStats(t, b, "the victim's 4 requests running", func(st sim.Stats) bool { return st.Running == 4 })
	// The others' clients queue behind the victim's holdings.
	stop := make(chan struct{})
	done := make(chan []result)
	go func() { done <- load(others, 8, 0, 8, stop) }()
	victim.kill()
	killed := time.Now()
	// The backend aborts the victim's requests at once (their
	// connections closed); its room in the store comes back when the
	// victim's lease ends, and the others fill all of it again.
	awaitStats(t, b, "the victim's 4 requests aborted", func(st sim.Stats) bool { return st.Aborted >= 4 })
	awaitStats(t, b, "4 requests of the survivors running", func(st sim.Stats) bool { return st.Running == 4 })
	back := time.Since(killed)
	time.AfterFunc(time.Second, func() { close(stop) })
	res := <-done
	t.Logf("backend's 4 slots running the other replicas' requests %s after the kill (lease %s)", back.Round(10*time.Millisecond), lease)
	if back > lease+5*time.Second {
		t.Errorf("capacity came back %s after the kill; the lease is %s", back, lease)
	}
	if f := failures(res); len(f) > 0 {
		t.Fatalf("%d of %d requests through the surviving replicas failed, e.g. %s", len(f), len(res), f[0])
	}
	if len(res) < 8 {
		t.Errorf("only %d requests completed through the survivors", len(res))
	}
	if p := b.sim.Stats().PeakRunning; p > 4 {
		t.Errorf("backend peak %d > max_in_flight 4", p)
	}
}

// awaitStats polls the simulator's counters until want holds (no event
// to wait on; the deadline is generous).
func awaitStats(t *testing.T, b *backend, what string, want func(sim.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !want(b.sim.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("not seen within 30s: %s (backend stats %+v)", what, b.sim.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redis-server stopped under load, on_store_error local: no request fails
// because of it, maitred_store_up reads 0 (with a log line and the detail
// in /readyz, still ready), and after a restart shared accounting resumes
// within 5 s: every replica up, holdings back in the store.
func TestStoreDownUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	bs := []*backend{startBackend(t, fastBackend), startBackend(t, fastBackend)}
	cfg := fleetConfig(bs, 4, srv.URL(), "store_lease: 2s\nstore_heartbeat: 500ms\non_store_error: local\n")
	rs := startFleet(t, 3, cfg)
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_replicas", func(v float64) bool { return v == 3 }, 30*time.Second)
	}
	stop := make(chan struct{})
	done := make(chan []result)
	go func() { done <- load(rs, 30, 0, 8, stop) }()
	awaitStats(t, bs[0], "load running", func(st sim.Stats) bool { return st.Running > 0 })

	srv.Stop()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 0 }, 30*time.Second)
	}
	for _, r := range rs {
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Store struct {
				Up     bool   `json:"up"`
				Detail string `json:"detail"`
			} `json:"store"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || body.Store.Up || !strings.Contains(body.Store.Detail, "share") {
			t.Errorf("replica %s /readyz while the store is down: %d %+v; want 200 with the store's detail", r.name, resp.StatusCode, body.Store)
		}
		if !strings.Contains(r.storeLog(), "shared store unavailable") {
			t.Errorf("replica %s logged no transition: %q", r.name, r.storeLog())
		}
	}
	// Requests keep being served on each replica's share meanwhile.
	before := bs[0].sim.Stats().Completed + bs[1].sim.Stats().Completed
	for bs[0].sim.Stats().Completed+bs[1].sim.Stats().Completed < before+30 {
		time.Sleep(20 * time.Millisecond)
	}

	srv.Restart()
	restarted := time.Now()
	for _, r := range rs {
		r.awaitMetric(t, "maitred_store_up", func(v float64) bool { return v == 1 }, 30*time.Second)
	}
	resumed := time.Since(restarted)
	// Shared accounting is back: the replicas' holdings are in the store.
	for {
		n1, _ := srv.Do("HLEN", "{maitred}:b:"+strings.TrimPrefix(bs[0].srv.URL, "http://"))
		n2, _ := srv.Do("HLEN", "{maitred}:b:"+strings.TrimPrefix(bs[1].srv.URL, "http://"))
		if n1 != ":0" && n1 != "" || n2 != ":0" && n2 != "" {
			break
		}
		if time.Since(restarted) > 30*time.Second {
			t.Fatal("no holdings in the restarted store")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("shared accounting resumed %s after redis-server restarted", resumed.Round(10*time.Millisecond))
	if resumed > 5*time.Second {
		t.Errorf("shared accounting resumed %s after the restart, want within 5s", resumed)
	}
	for _, r := range rs {
		if !strings.Contains(r.storeLog(), "shared store reachable again") {
			t.Errorf("replica %s logged no return: %q", r.name, r.storeLog())
		}
	}
	close(stop)
	res := <-done
	if f := failures(res); len(f) > 0 {
		t.Fatalf("%d of %d requests failed, e.g. %s", len(f), len(res), f[0])
	}
	t.Logf("%d requests, none failed", len(res))
}
