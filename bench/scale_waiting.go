package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// The waiting dimension as users run it: the built maitred with n short
// chats waiting for a backend that has room for one (held by a request
// the simulator does not finish). Its goroutine stacks and heap in use
// (from its /metrics) with the n waiting, less with none waiting, per
// waiting request, less what a connection open and idle costs (what a
// client's connection costs whether or not it waits).

// waitingBuiltFigures returns the stack and heap per waiting request in
// the built maitred, in bytes.
func waitingBuiltFigures(e *scaleEnv, n int) (stack, heap float64, err error) {
	gate := make(chan struct{})
	defer close(gate)
	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return 0, 0, err
	}
	defer stopSim()
	dir, err := e.pointDir(fmt.Sprintf("waiting-%d", n))
	if err != nil {
		return 0, 0, err
	}
	admin := freeAddr()
	cfg := fmt.Sprintf("admin_listen: %s\nmodels:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    queue_size: %d\n    queue_timeout: 10m\n    backends:\n      - url: %s\n        max_in_flight: 1\n",
		admin, n+10, simURL)
	gw, err := e.startIn(dir, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer gw.stop()
	// Held from now on (maitred's warm-up ran before it was ready).
	backend.Update(func(c *sim.Config) { c.TokenGate = gate })
	metrics := "http://" + admin + "/metrics"
	idleStack, idleHeap, err := idleConnFigures(gw.url, metrics, n)
	if err != nil {
		return 0, 0, err
	}
	tr := poolTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	errs := make(chan error, n+1)                                 // the requests end when the gate closes
	go func() { _, err := doChat(client, gw.url); errs <- err }() // holds the one slot
	if err := awaitMetric(metrics, "maitred_backend_inflight_requests", 1, time.Minute); err != nil {
		return 0, 0, err
	}
	stack0, _ := scrapeMetric(metrics, "go_memstats_stack_inuse_bytes")
	heap0, _ := scrapeMetric(metrics, "go_memstats_heap_inuse_bytes")
	for range n {
		go func() { _, err := doChat(client, gw.url); errs <- err }()
	}
	if err := awaitMetric(metrics, "maitred_queue_depth", float64(n), time.Minute); err != nil {
		return 0, 0, err
	}
	time.Sleep(time.Second)
	stack1, _ := scrapeMetric(metrics, "go_memstats_stack_inuse_bytes")
	heap1, _ := scrapeMetric(metrics, "go_memstats_heap_inuse_bytes")
	return (stack1-stack0)/float64(n) - idleStack, (heap1-heap0)/float64(n) - idleHeap, nil
}

// idleConnFigures is the stack and heap per connection open to maitred
// and idle (nothing sent), from its /metrics.
func idleConnFigures(base, metrics string, n int) (stack, heap float64, err error) {
	addr := strings.TrimPrefix(base, "http://")
	stack0, _ := scrapeMetric(metrics, "go_memstats_stack_inuse_bytes")
	heap0, _ := scrapeMetric(metrics, "go_memstats_heap_inuse_bytes")
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, 0, err
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second) // accepted, each parked in its first read
	stack1, _ := scrapeMetric(metrics, "go_memstats_stack_inuse_bytes")
	heap1, _ := scrapeMetric(metrics, "go_memstats_heap_inuse_bytes")
	return (stack1 - stack0) / float64(n), (heap1 - heap0) / float64(n), nil
}
