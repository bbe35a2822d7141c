// Command bench measures what maitred adds on top of the floor any Go proxy
// pays, in one run with requests interleaved at a fixed rate across three
// paths to the same simulated vLLM backend:
//
//	direct   client -> sim
//	bare     client -> net/http/httputil.ReverseProxy -> sim
//	maitred  client -> maitred gateway -> sim
//
// Phases: (1) short non-streaming chat requests at -rate requests/s, the
// three paths interleaved request by request, reporting p50/p99 latency and
// maitred's margin over bare; (2) streaming requests, reporting each SSE
// event's delay from the moment the simulator wrote it to the moment the
// client read it; (3) maximum throughput of each path with -conc closed-loop
// workers. Everything runs in this process on loopback, so the three paths
// share the machine's cores equally.
//
// Usage: go run ./bench [-rate 300] [-duration 20s] [-json]
//
//	go run ./bench -scenario overload [-capacity 40] [-overload-3x 30s]
//	go run ./bench -scenario soak [-streams 1000] [-hold 20s]
//	go run ./bench -scenario quota [-quota-clients 50] [-quota-tpm 20000] [-quota-duration 2m]
//	go run ./bench -scenario store [-rate 300] [-duration 20s]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/gateway"
	"github.com/maitred-dev/maitred/sim"
)

var (
	rate         = flag.Int("rate", 300, "non-streaming requests per second, all paths together x3 (each path gets this rate)")
	duration     = flag.Duration("duration", 20*time.Second, "length of the fixed-rate phase")
	streamRate   = flag.Int("stream-rate", 30, "streaming requests per second per path")
	streamDur    = flag.Duration("stream-duration", 10*time.Second, "length of the streaming phase")
	events       = flag.Int("events", 20, "tokens per streamed answer")
	maxDur       = flag.Duration("max-duration", 5*time.Second, "length of each path's throughput run")
	conc         = flag.Int("conc", 32, "closed-loop workers in the throughput phase")
	jsonOut      = flag.Bool("json", false, "print results as JSON")
	scenario     = flag.String("scenario", "proxy", "proxy: direct vs bare vs maitred; overload: the admission queue at 1x and 3x capacity; soak: memory and goroutines per open stream; slowbody: memory and timeouts under declared-but-unsent bodies; quota: an API key's tokens_per_minute under concurrent clients; store: the shared store (a redis-server it starts) against in-process accounting")
	quotaClients = flag.Int("quota-clients", 50, "quota scenario: concurrent clients on one key")
	quotaTPM     = flag.Int64("quota-tpm", 20000, "quota scenario: the key's tokens_per_minute")
	quotaDur     = flag.Duration("quota-duration", 2*time.Minute, "quota scenario: how long the clients run")
	capacity     = flag.Int("capacity", 40, "overload: the backend's capacity in requests/s")
	over1        = flag.Duration("overload-1x", 10*time.Second, "overload: length of the 1x phase")
	over3        = flag.Duration("overload-3x", 30*time.Second, "overload: length of the 3x phase")
	soakN        = flag.Int("streams", 1000, "soak: streams held open at once")
	soakHold     = flag.Duration("hold", 20*time.Second, "soak: how long each stream stays open")
	slowN        = flag.Int("conns", 400, "slowbody: connections each declaring a large body and sending one byte")
	slowDeclared = flag.Int64("declared", 8<<20, "slowbody: the Content-Length each declares")
)

const chatBody = `{"model":"demo","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words."}],"max_tokens":8}`

type path struct {
	name string
	url  string
}

func main() {
	flag.Parse()
	run := run
	switch *scenario {
	case "overload":
		run = func() error { return overload(*capacity, *over1, *over3) }
	case "soak":
		run = func() error { return soak(*soakN, *soakHold) }
	case "slowbody":
		run = func() error { return slowBodies(*slowN, *slowDeclared) }
	case "quota":
		run = func() error { return quotaRun(*quotaClients, *quotaTPM, *quotaDur) }
	case "store":
		run = func() error { return storeScenario(*rate, *duration) }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	stamps := &stampBook{m: map[string][]time.Time{}}

	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 100000, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(stamps.wrap(backend.Handler()))
	if err != nil {
		return err
	}
	defer stopSim()

	target, _ := url.Parse(simURL)
	bare := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     poolTransport(),
		FlushInterval: -1,
	}
	bareURL, stopBare, err := serve(bare)
	if err != nil {
		return err
	}
	defer stopBare()

	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "demo", Backends: []config.BackendConfig{{URL: simURL}}}}
	// The access log is on, at info, as in production; it is encoded as JSON
	// and discarded so that the terminal is not the bottleneck.
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	gwURL, _, stopGW, err := serveGateway(cfg, log)
	if err != nil {
		return err
	}
	defer stopGW()

	paths := []path{{"direct", simURL}, {"bare", bareURL}, {"maitred", gwURL}}
	client := &http.Client{Transport: poolTransport()}
	res := results{GOMAXPROCS: runtime.GOMAXPROCS(0), Rate: *rate, Duration: duration.String()}

	// Warm connection pools and code paths.
	for _, p := range paths {
		for range 200 {
			if _, err := doChat(client, p.url); err != nil {
				return fmt.Errorf("%s warm-up: %w", p.name, err)
			}
		}
	}

	fmt.Fprintf(os.Stderr, "phase 1: %d req/s per path for %s, interleaved\n", *rate, *duration)
	lat, errs := fixedRate(client, paths, *rate, *duration)
	for i, p := range paths {
		res.Latency = append(res.Latency, summarize(p.name, lat[i], errs[i]))
	}
	b, m := res.Latency[1], res.Latency[2]
	res.MarginP50ms, res.MarginP99ms = m.P50ms-b.P50ms, m.P99ms-b.P99ms

	fmt.Fprintf(os.Stderr, "phase 2: streaming, %d req/s per path for %s, %d events each\n", *streamRate, *streamDur, *events)
	backend.Update(func(c *sim.Config) { c.OutputTokens = *events; c.ITL = 2 * time.Millisecond })
	for i, d := range streamDelays(client, paths, stamps, *streamRate, *streamDur, *events) {
		res.Stream = append(res.Stream, summarize(paths[i].name, d, 0))
	}
	res.StreamMarginP99ms = res.Stream[2].P99ms - res.Stream[1].P99ms
	backend.Update(func(c *sim.Config) { c.OutputTokens = 8; c.ITL = 0 })

	fmt.Fprintf(os.Stderr, "phase 3: max throughput, %d workers, %s per path\n", *conc, *maxDur)
	for _, p := range paths {
		res.Throughput = append(res.Throughput, throughput(client, p, *conc, *maxDur))
	}
	return report(res)
}

// serve runs h on a fresh loopback port.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// serveGateway runs a gateway for cfg on loopback, probes its backends
// once and marks it serving. It returns its URL, the transport it reaches
// backends with, and how to stop it.
func serveGateway(cfg config.Config, log *zap.Logger) (string, *http.Transport, func(), error) {
	return serveGatewayShared(cfg, log, nil)
}

// serveGatewayShared is serveGateway with a shared store (nil: none).
func serveGatewayShared(cfg config.Config, log *zap.Logger, shared gateway.SharedStore) (string, *http.Transport, func(), error) {
	fl, err := fleet.New(cfg, &http.Client{Transport: poolTransport()}, log, nil)
	if err != nil {
		return "", nil, nil, err
	}
	tr := gateway.NewTransport(cfg)
	gw, err := gateway.New(gateway.Options{Config: cfg, Fleet: fl, Logger: log, Registry: prometheus.NewRegistry(), Transport: tr, Shared: shared})
	if err != nil {
		return "", nil, nil, err
	}
	fl.ProbeAll(context.Background())
	gw.SetPhase(gateway.Serving)
	// As in production: the gateway's own server and listener (its
	// timeouts, connection cap and framing watch).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	srv := gw.Server()
	go srv.Serve(gw.Listener(ln))
	return "http://" + ln.Addr().String(), tr, func() { srv.Close(); tr.CloseIdleConnections(); gw.Close() }, nil
}

func poolTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute, DisableCompression: true}
}

func doChat(c *http.Client, base string) (time.Duration, error) {
	start := time.Now()
	res, err := c.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(chatBody)))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return 0, err
	}
	if res.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", res.StatusCode)
	}
	return time.Since(start), nil
}

// fixedRate sends one request to each path in turn (rotating which goes
// first) every 1/rate seconds, open loop: a slow answer never delays the
// next send.
func fixedRate(c *http.Client, paths []path, rate int, d time.Duration) ([][]time.Duration, []int) {
	lat := make([][]time.Duration, len(paths))
	errs := make([]int, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	for n := 0; time.Now().Before(deadline); n++ {
		<-tick.C
		for k := range paths {
			i := (n + k) % len(paths)
			wg.Go(func() {
				l, err := doChat(c, paths[i].url)
				mu.Lock()
				if err != nil {
					errs[i]++
				} else {
					lat[i] = append(lat[i], l)
				}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return lat, errs
}

// stampBook records when the simulator wrote each chunk of each request,
// keyed by the X-Bench-Id header every path forwards.
type stampBook struct {
	mu sync.Mutex
	m  map[string][]time.Time
}

func (s *stampBook) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Bench-Id")
		if id == "" {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&stampWriter{ResponseWriter: w, book: s, id: id}, r)
	})
}

type stampWriter struct {
	http.ResponseWriter
	book  *stampBook
	id    string
	dirty bool
}

func (w *stampWriter) Write(p []byte) (int, error) {
	w.dirty = w.dirty || len(p) > 0
	return w.ResponseWriter.Write(p)
}

// Flush stamps the moment an event leaves the simulator. A flush with no
// body bytes (headers only) is not an event.
func (w *stampWriter) Flush() {
	w.ResponseWriter.(http.Flusher).Flush()
	if !w.dirty {
		return
	}
	w.dirty = false
	now := time.Now()
	w.book.mu.Lock()
	w.book.m[w.id] = append(w.book.m[w.id], now)
	w.book.mu.Unlock()
}

func (w *stampWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *stampBook) take(id string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.m[id]
	delete(s.m, id)
	return t
}

var benchID atomic.Int64

// streamDelays sends streaming requests at a fixed rate per path and returns,
// per path, the delay of every event: read by the client minus flushed by
// the simulator.
func streamDelays(c *http.Client, paths []path, book *stampBook, rate int, d time.Duration, n int) [][]time.Duration {
	out := make([][]time.Duration, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"model":"demo","messages":[{"role":"user","content":"Count."}],"max_tokens":%d,"stream":true}`, n)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	for k := 0; time.Now().Before(deadline); k++ {
		<-tick.C
		for j := range paths {
			i := (k + j) % len(paths)
			wg.Go(func() {
				id := strconv.FormatInt(benchID.Add(1), 10)
				req, _ := http.NewRequest(http.MethodPost, paths[i].url+"/v1/chat/completions", bytes.NewReader([]byte(body)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Bench-Id", id)
				res, err := c.Do(req)
				if err != nil {
					return
				}
				defer res.Body.Close()
				recv := readEvents(res.Body)
				sent := book.take(id)
				mu.Lock()
				defer mu.Unlock()
				for e := 0; e < min(len(sent), len(recv)); e++ {
					out[i] = append(out[i], recv[e].Sub(sent[e]))
				}
			})
		}
	}
	wg.Wait()
	return out
}

// readEvents returns the time each SSE event ("\n\n"-terminated) was read.
func readEvents(r io.Reader) []time.Time {
	var times []time.Time
	buf := make([]byte, 64<<10)
	var pending []byte
	for {
		n, err := r.Read(buf)
		now := time.Now()
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			times = append(times, now)
			pending = pending[i+2:]
		}
		if err != nil {
			return times
		}
	}
}

func throughput(c *http.Client, p path, workers int, d time.Duration) tput {
	var ok, failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := doChat(c, p.url); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return tput{Path: p.name, RPS: float64(ok.Load()) / d.Seconds(), Errors: int(failed.Load())}
}

type stat struct {
	Path   string  `json:"path"`
	N      int     `json:"n"`
	Errors int     `json:"errors"`
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
	Maxms  float64 `json:"max_ms"`
}

type tput struct {
	Path   string  `json:"path"`
	RPS    float64 `json:"rps"`
	Errors int     `json:"errors"`
}

type results struct {
	GOMAXPROCS        int     `json:"gomaxprocs"`
	Rate              int     `json:"rate_per_path"`
	Duration          string  `json:"duration"`
	Latency           []stat  `json:"latency"`
	MarginP50ms       float64 `json:"maitred_over_bare_p50_ms"`
	MarginP99ms       float64 `json:"maitred_over_bare_p99_ms"`
	Stream            []stat  `json:"stream_event_delay"`
	StreamMarginP99ms float64 `json:"stream_maitred_over_bare_p99_ms"`
	Throughput        []tput  `json:"max_throughput"`
}

func summarize(name string, d []time.Duration, errs int) stat {
	slices.Sort(d)
	q := func(p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(len(d)-1, int(p*float64(len(d))))]) / 1e6
	}
	return stat{Path: name, N: len(d), Errors: errs, P50ms: q(.50), P90ms: q(.90), P99ms: q(.99), Maxms: q(1)}
}

func report(r results) error {
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Printf("GOMAXPROCS=%d, non-streaming chat at %d req/s per path for %s\n\n", r.GOMAXPROCS, r.Rate, r.Duration)
	fmt.Printf("%-8s %7s %6s %8s %8s %8s %8s\n", "path", "n", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms")
	for _, s := range r.Latency {
		fmt.Printf("%-8s %7d %6d %8.3f %8.3f %8.3f %8.3f\n", s.Path, s.N, s.Errors, s.P50ms, s.P90ms, s.P99ms, s.Maxms)
	}
	fmt.Printf("maitred over bare proxy: p50 %+.3f ms, p99 %+.3f ms\n\n", r.MarginP50ms, r.MarginP99ms)
	fmt.Println("streamed event delay (simulator flush -> client read)")
	for _, s := range r.Stream {
		fmt.Printf("%-8s %7d %6s %8.3f %8.3f %8.3f %8.3f\n", s.Path, s.N, "", s.P50ms, s.P90ms, s.P99ms, s.Maxms)
	}
	fmt.Printf("maitred over bare proxy: p99 %+.3f ms per event\n\n", r.StreamMarginP99ms)
	fmt.Println("max throughput (closed loop)")
	for _, t := range r.Throughput {
		fmt.Printf("%-8s %9.0f req/s  errors %d\n", t.Path, t.RPS, t.Errors)
	}
	return nil
}
