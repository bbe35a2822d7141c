package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// The waiting dimension as users run it: the built maitred with n short
// chats waiting for a backend that has room for one (held by a request
// the simulator does not finish). Its goroutine stacks and heap in use
// (from its /metrics) with the n waiting, less with none waiting, per
// waiting request, less what a connection open and idle costs (what a
// client's connection costs whether or not it waits). Beside it, in the
// same run, the floor net/http puts under any request in flight: the same
// n chats held in flight (by the same simulator, which answers none) by a
// bare httputil.ReverseProxy in its own process (this program re-run),
// per request from none open: its handler goroutine, both connections'
// buffers and goroutines, the request. With -pprof, both are read after
// two collections too (what is live, and stacks the runtime shrank), and
// maitred's heap profile and goroutines are saved in -scale-out.

var bareStats = flag.String("bare-stats", "", "bare-proxy: the address to serve its memory figures on (go_memstats_stack_inuse_bytes, go_memstats_heap_inuse_bytes; ?gc=1: after two collections)")

// parkedRequests counts the requests parkedHandler holds.
var parkedRequests atomic.Int64

// parkedHandler serves on listen, with its memory figures on -bare-stats,
// a handler that reads each request's body, keeps it and waits, never
// answering, until its client goes: what net/http holds for any request
// read and not yet answered (the connection's goroutine parked in a
// handler, its buffers, the request, its body and the background read),
// the floor under a waiting request in any Go server. The waiting
// dimension's second baseline: a waiting request "beyond its body".
func parkedHandler(listen string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		parkedRequests.Add(1)
		<-r.Context().Done()
		parkedRequests.Add(-1)
		runtime.KeepAlive(body)
	})
	if *bareStats != "" {
		go serveMemStats(*bareStats)
	}
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// serveMemStats serves this process's stack and heap in use on addr, as
// the lines of a Prometheus exposition that scrapeMetric reads, and the
// requests parkedHandler holds.
func serveMemStats(addr string) error {
	return http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") != "" {
			runtime.GC()
			runtime.GC()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fmt.Fprintf(w, "go_memstats_stack_inuse_bytes %d\ngo_memstats_heap_inuse_bytes %d\nbench_parked_requests %d\n", m.StackInuse, m.HeapInuse, parkedRequests.Load())
	}))
}

// waitingBuilt is the waiting figures of the built maitred and of the
// bare proxy, in bytes per request: stack and heap, before a collection
// and (gc, with -pprof for maitred; NaN without) after two.
type waitingBuilt struct {
	stack, heap     float64 // maitred, beyond an idle connection
	gcStack, gcHeap float64 // maitred, from nothing open, after two collections
	total, gcTotal  float64 // maitred, from nothing open: stack and heap
	bare, gcBare    float64 // the bare proxy, from nothing open: stack and heap
	held, gcHeld    float64 // a parked handler, from nothing open: stack and heap
}

// waitingBuiltFigures measures n chats waiting in the built maitred and n
// in flight through the bare proxy.
func waitingBuiltFigures(e *scaleEnv, n int) (f waitingBuilt, err error) {
	gate := make(chan struct{})
	defer close(gate)
	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return f, err
	}
	defer stopSim()
	dir, err := e.pointDir(fmt.Sprintf("waiting-%d", n))
	if err != nil {
		return f, err
	}
	admin := freeAddr()
	cfg := fmt.Sprintf("admin_listen: %s\nmodels:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    queue_size: %d\n    queue_timeout: 10m\n    backends:\n      - url: %s\n        max_in_flight: 1\n",
		admin, n+10, simURL)
	pp := ""
	if *pprofOn {
		pp = freeAddr()
	}
	gw, err := startMaitred(e.bin, dir, cfg, pp)
	if err != nil {
		return f, err
	}
	defer gw.stop()
	// Held from now on (maitred's warm-up ran before it was ready).
	backend.Update(func(c *sim.Config) { c.TokenGate = gate })
	metrics := "http://" + admin + "/metrics"
	collect := func() {
		if pp != "" {
			for range 2 {
				if res, err := http.Get("http://" + pp + "/debug/pprof/heap?gc=1"); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		}
	}
	idleStack, idleHeap, err := idleConnFigures(gw.url, metrics, n)
	if err != nil {
		return f, err
	}
	tr := poolTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	go func() { doChat(client, gw.url) }() // holds the one slot; ends when the gate closes
	if err := awaitMetric(metrics, "maitred_backend_inflight_requests", 1, time.Minute); err != nil {
		return f, err
	}
	collect()
	stack0, heap0 := memFigures(metrics)
	for range n {
		go func() { doChat(client, gw.url) }()
	}
	if err := awaitMetric(metrics, "maitred_queue_depth", float64(n), time.Minute); err != nil {
		return f, err
	}
	time.Sleep(time.Second)
	stack1, heap1 := memFigures(metrics)
	f.stack, f.heap = (stack1-stack0)/float64(n)-idleStack, (heap1-heap0)/float64(n)-idleHeap
	f.total = (stack1 - stack0 + heap1 - heap0) / float64(n)
	f.gcStack, f.gcHeap, f.gcTotal = math.NaN(), math.NaN(), math.NaN()
	if pp != "" {
		collect()
		stack2, heap2 := memFigures(metrics)
		f.gcStack, f.gcHeap = (stack2-stack0)/float64(n), (heap2-heap0)/float64(n)
		f.gcTotal = f.gcStack + f.gcHeap
		if err := os.MkdirAll(*scaleOut, 0o755); err == nil {
			(&streamsProbe{pid: gw.pid, metrics: gw.url + "/metrics", pprof: pp, heapOut: filepath.Join(*scaleOut, fmt.Sprintf("waiting-%d-heap.pb.gz", n))}).saveHeap()
		}
	}
	if f.bare, f.gcBare, err = bareInFlight(simURL, n); err != nil {
		return f, err
	}
	f.held, f.gcHeld, err = heldInHandler(n)
	fmt.Fprintf(os.Stderr, "  %d waiting: maitred %.0f B/req from nothing open (%.0f after two collections: stack %.0f, heap %.0f); the bare proxy, %d in flight, %.0f B/req (%.0f after two collections); a parked handler %.0f B/req (%.0f after two collections)\n",
		n, f.total, f.gcTotal, f.gcStack, f.gcHeap, n, f.bare, f.gcBare, f.held, f.gcHeld)
	return f, err
}

// heldInHandler is the stack and heap per request of parkedHandler, in
// its own process, with n chats held: before a collection and after two,
// from none open.
func heldInHandler(n int) (perReq, gcPerReq float64, err error) {
	return heldInProcess(n, []string{"-scenario", "parked-handler"}, func(stats string) error {
		return awaitMetric("http://"+stats+"/", "bench_parked_requests", float64(n), time.Minute)
	})
}

// bareInFlight is the stack and heap per request of the bare proxy, in its
// own process, with n chats in flight to simURL (which holds them): before
// a collection and after two, from none open.
func bareInFlight(simURL string, n int) (perReq, gcPerReq float64, err error) {
	return heldInProcess(n, []string{"-scenario", "bare-proxy", "-bare-target", simURL}, func(string) error {
		// In flight: the simulator holds them all (its requests in flight).
		for deadline := time.Now().Add(time.Minute); backendConns(simURL) < n && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
}

// heldInProcess runs this program with args (a scenario serving on
// -bare-listen, its memory figures on -bare-stats), sends it n chats that
// it holds, awaits held, and returns the stack and heap per request it
// holds: before a collection and after two, from none open. The chats end
// when the process does (or what holds them lets go).
func heldInProcess(n int, args []string, held func(stats string) error) (perReq, gcPerReq float64, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	addr, stats := freeAddr(), freeAddr()
	p, err := startServing("", nil, addr, "/health", self, append(args, "-bare-listen", addr, "-bare-stats", stats)...)
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	statsURL := "http://" + stats + "/?gc=1"
	s0, h0 := memFigures(statsURL)
	tr := poolTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range n {
		go func() { doChat(client, p.url) }()
	}
	if err := held(stats); err != nil {
		return 0, 0, err
	}
	time.Sleep(time.Second)
	s1, h1 := memFigures("http://" + stats + "/")
	perReq = (s1 - s0 + h1 - h0) / float64(n)
	s2, h2 := memFigures(statsURL)
	fmt.Fprintf(os.Stderr, "  %d held by %s, after two collections: stack %.0f, heap %.0f B/req\n", n, args[1], (s2-s0)/float64(n), (h2-h0)/float64(n))
	return perReq, (s2 - s0 + h2 - h0) / float64(n), nil
}

// backendConns is the number of TCP connections established to the
// simulator at url (its port, from /proc/net/tcp), -1 when unknown.
func backendConns(url string) int {
	_, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		return -1
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	var p int
	fmt.Sscan(port, &p)
	local := fmt.Sprintf(":%04X ", p)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && strings.HasSuffix(f[1]+" ", local) && f[3] == "01" { // established, on the simulator's side
			n++
		}
	}
	return n
}

// memFigures is the stack and heap in use from a metrics url.
func memFigures(url string) (stack, heap float64) {
	v := make([]float64, 2)
	scrapeMetrics(url, []string{"go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes"}, v)
	return v[0], v[1]
}

// idleConnFigures is the stack and heap per connection open to maitred
// and idle (nothing sent), from its /metrics.
func idleConnFigures(base, metrics string, n int) (stack, heap float64, err error) {
	addr := strings.TrimPrefix(base, "http://")
	stack0, heap0 := memFigures(metrics)
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
	stack1, heap1 := memFigures(metrics)
	return (stack1 - stack0) / float64(n), (heap1 - heap0) / float64(n), nil
}
