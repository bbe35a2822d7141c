package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/dnstest"
	"github.com/maitred-dev/maitred/sim"
)

// TestDNSFleetFollowsRecords runs the gateway in front of a dns: entry
// answered by a real DNS server, under streaming load, while the records
// go from 2 to 5 to 1 simulated backends and then the DNS server stops:
//
//   - a backend that appears gets client requests only after its warm-up
//     generation completed (the backend's own accounting);
//   - a backend whose record goes drains: every stream open on it ends
//     with [DONE] (none cut), and once the gateway has forgotten it, it
//     receives nothing new;
//   - with the DNS server down the fleet stays as it was, and the failed
//     lookups are counted.
func TestDNSFleetFollowsRecords(t *testing.T) {
	port, sims := simsOnOnePort(t, 5, sim.Config{Model: "m", OutputTokens: 24, ITL: 5 * time.Millisecond})
	ip := func(i int) string { h, _, _ := net.SplitHostPort(sims[i].addr); return h }
	ns := dnstest.Start(t)
	const name = "vllm-headless.maitred.test."
	ns.SetA(name, ip(0), ip(1))

	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DrainDelay = 0
	cfg.DrainTimeout = config.Duration(30 * time.Second)
	cfg.Resolver = ns.Addr
	cfg.Health.Interval = config.Duration(20 * time.Millisecond)
	cfg.ScrapeInterval = config.Duration(50 * time.Millisecond)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{
		{DNS: name + ":" + port, DNSInterval: config.Duration(20 * time.Millisecond)},
	}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	base, stop := startGateway(t, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	defer stop()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	awaitDebug(t, c, base, "2 backends ready", func(bs []debugBackend) bool { return readyOnly(bs, sims[0].addr, sims[1].addr) })
	if bs, _ := debugBackends(c, base); bs[0].Source != "dns:"+name+":"+port {
		t.Fatalf("source %q", bs[0].Source)
	}
	load := startStreams(base, c, 16, `{"model":"m","prompt":"hi","stream":true,"max_tokens":24}`)
	defer load.end()

	// 2 -> 5: the new three warm up, then take traffic.
	ns.SetA(name, ip(0), ip(1), ip(2), ip(3), ip(4))
	all := []string{sims[0].addr, sims[1].addr, sims[2].addr, sims[3].addr, sims[4].addr}
	awaitDebug(t, c, base, "5 backends ready", func(bs []debugBackend) bool { return readyOnly(bs, all...) })
	awaitCond(t, "every new backend got traffic", func() bool {
		return sims[2].clients() > 0 && sims[3].clients() > 0 && sims[4].clients() > 0
	})

	// 5 -> 1 while streams are open on the leaving ones.
	awaitCond(t, "streams open on backends about to leave", func() bool {
		return sims[0].sim.Stats().Running+sims[1].sim.Stats().Running > 0
	})
	openAtRemoval := 0
	for _, i := range []int{0, 1, 2, 3} {
		openAtRemoval += sims[i].sim.Stats().Running
	}
	ns.SetA(name, ip(4))
	awaitDebug(t, c, base, "only the remaining backend", func(bs []debugBackend) bool { return readyOnly(bs, sims[4].addr) })
	gone := map[int]int{}
	for _, i := range []int{0, 1, 2, 3} {
		gone[i] = sims[i].clients()
	}
	kept := sims[4].clients()
	awaitCond(t, "more traffic after the removal", func() bool { return sims[4].clients() >= kept+40 })
	for i, n := range gone {
		if got := sims[i].clients(); got != n {
			t.Errorf("backend %s received %d requests after it was removed", sims[i].addr, got-n)
		}
	}

	// The DNS server stops: lookups fail, the fleet stays.
	before := scrapeCounter(t, c, base, "maitred_discovery_errors_total")
	ns.Stop()
	awaitCond(t, "failed lookups counted", func() bool { return scrapeCounter(t, c, base, "maitred_discovery_errors_total") >= before+3 })
	kept = sims[4].clients()
	awaitCond(t, "traffic with the DNS server down", func() bool { return sims[4].clients() >= kept+20 })
	if bs, err := debugBackends(c, base); err != nil || !readyOnly(bs, sims[4].addr) {
		t.Fatalf("with the DNS server down: %+v %v", bs, err)
	}
	load.end()

	for i, s := range sims {
		if n := s.beforeWarm(); n > 0 {
			t.Errorf("backend %d got %d client requests before its warm-up completed", i, n)
		}
		if st := s.sim.Stats(); st.Aborted != 0 || st.Failed != 0 {
			t.Errorf("backend %d: %d streams aborted, %d failed", i, st.Aborted, st.Failed)
		}
	}
	if f := load.failed.Load(); f != 0 {
		t.Errorf("%d of %d streams failed: %v", f, f+load.ok.Load(), load.errors())
	}
	t.Logf("%d streams, %d open on the 4 backends at their removal, none cut", load.ok.Load(), openAtRemoval)
}

// startGateway runs the gateway as `maitred serve` does (runGateway) and
// returns its base URL once the first probe round is done; stop drains it.
func startGateway(t *testing.T, cfg config.Config, log *zap.Logger) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- runGateway(ctx, cfg, log, runOptions{started: func(a net.Addr) { addr <- a }}) }()
	select {
	case a := <-addr:
		return "http://" + a.String(), func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("gateway: %v", err)
			}
		}
	case err := <-done:
		cancel()
		t.Fatalf("gateway did not start: %v", err)
	}
	return "", nil
}

// awaitCond polls cond until it holds; a generous deadline ends a test
// that fails.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a deadline for failing, not a timing assertion
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scrapeCounter sums the samples of a metric family on /metrics.
func scrapeCounter(t *testing.T, c *http.Client, base, family string) float64 {
	t.Helper()
	res, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, res.Body); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for line := range strings.SplitSeq(b.String(), "\n") {
		if strings.HasPrefix(line, family+"{") || strings.HasPrefix(line, family+" ") {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// TestDrainingBackendShown: a backend whose address left the DNS answer
// while a stream is open on it is listed as draining, with its source, in
// /debug/backends and on the status page until the stream ends ([DONE],
// not cut); then it is forgotten. The stream is held open by the
// simulator's token gate, not by time.
func TestDrainingBackendShown(t *testing.T) {
	gate := make(chan struct{})
	port, sims := simsOnOnePort(t, 2, sim.Config{Model: "m", OutputTokens: 8, TokenGate: gate})
	ip := func(i int) string { h, _, _ := net.SplitHostPort(sims[i].addr); return h }
	// feed lets generations run until the returned stop is called.
	feed := func() (stop func()) {
		done := make(chan struct{})
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			for {
				select {
				case gate <- struct{}{}:
				case <-done:
					return
				}
			}
		}()
		return func() { close(done); <-fed }
	}
	stopFeed := feed()
	ns := dnstest.Start(t)
	const name = "vllm-drain.maitred.test."
	ns.SetA(name, ip(0))
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DrainDelay = 0
	cfg.DrainTimeout = config.Duration(30 * time.Second)
	cfg.Resolver = ns.Addr
	cfg.Health.Interval = config.Duration(20 * time.Millisecond)
	cfg.ScrapeInterval = config.Duration(50 * time.Millisecond)
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{
		{DNS: name + ":" + port, DNSInterval: config.Duration(20 * time.Millisecond)},
	}}}
	base, stop := startGateway(t, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	defer stop()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	awaitDebug(t, c, base, "backend 0 ready", func(bs []debugBackend) bool { return readyOnly(bs, sims[0].addr) })

	// One stream on backend 0, held mid-generation by the gate.
	stopFeed()
	streamDone := make(chan error, 1)
	go func() { streamDone <- oneStream(c, base, `{"model":"m","prompt":"hi","stream":true,"max_tokens":8}`) }()
	awaitCond(t, "the stream running on backend 0", func() bool { return sims[0].sim.Stats().Running == 1 })

	// Backend 1 joins (its warm-up waits on the gate too), backend 0 leaves.
	source := "dns:" + name + ":" + port
	ns.SetA(name, ip(1))
	awaitDebug(t, c, base, "backend 0 draining, backend 1 added", func(bs []debugBackend) bool {
		for _, b := range bs {
			if b.URL == "http://"+sims[0].addr && b.Draining && b.Source == source {
				return len(bs) == 2
			}
		}
		return false
	})
	res, err := c.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	row := string(page)
	if i := strings.Index(row, sims[0].addr); i < 0 || !strings.Contains(row[i:], source) || !strings.Contains(row[i:], "draining") {
		t.Errorf("status page lacks backend 0 with its source and draining:\n%s", page)
	}

	// The stream finishes on the draining backend, backend 1 warms up, and
	// backend 0 is forgotten.
	stopFeed = feed()
	defer stopFeed()
	if err := <-streamDone; err != nil {
		t.Fatalf("the stream on the draining backend: %v", err)
	}
	awaitDebug(t, c, base, "backend 0 forgotten", func(bs []debugBackend) bool { return readyOnly(bs, sims[1].addr) })
	if st := sims[0].sim.Stats(); st.Aborted != 0 || st.Failed != 0 {
		t.Errorf("backend 0: %d aborted, %d failed", st.Aborted, st.Failed)
	}
}
