// Command bench measures what maitred adds on top of the floor any proxy
// pays, in one run with requests interleaved at a fixed rate across four
// paths to the same simulated vLLM backend:
//
//	direct   client -> sim
//	nginx    client -> nginx -> sim  (Debian's /usr/sbin/nginx; skipped, with a note, when not installed)
//	bare     client -> net/http/httputil.ReverseProxy -> sim
//	maitred  client -> maitred gateway -> sim
//
// maitred counts every request's prompt with a real tokenizer and chat
// template (-tokenizer qwen3, the fixture `make fixtures` downloads; or the
// built-in demo), and the simulator counts with the same one, as vLLM
// would. Every request's chat names its own ticket number, so no two share
// a rendered prefix and the gateway's count cache cannot answer one from
// another.
//
// nginx runs as a child process with a config generated in a temp dir (see
// nginxConf): one upstream with keep-alive connections, HTTP/1.1, no
// buffering, no access log, -nginx-workers worker processes (default 1,
// see nginxWorkersWhy), as the current user; it is stopped on exit.
//
// Run first as users run it (separate.go): maitred the built binary (go
// build ./cmd/maitred into a temp dir) with its production JSON log
// written to a file, the simulator as `maitred sim`, the bare proxy as
// this program re-run (-scenario bare-proxy) and nginx, each in its own
// process, the load generator alone in this one: phase 1 below, with
// each process's CPU per request. Then, as a second labelled line
// (-inprocess=false skips it), every phase with the simulator and the Go
// proxies in this process.
//
// Phases: (1) for each size, a short chat and a ten-turn chat of about
// 1,000 tokens, non-streaming requests at -rate requests/s per path, the
// paths interleaved request by request, reporting p50/p99 latency, what
// each proxy adds over direct, the verdicts of issue 17's target 1
// (maitred's added p50 and p99 at most the bare proxy's) and its moonshot
// (maitred's added p50 within 2x nginx's), the mean of each of maitred's
// request phases (gateway/triage.go), and the p50/p90/p99 of the door,
// queue and backend times its answers' Server-Timing headers name; (2)
// streaming requests, reporting each SSE event's delay from the moment the
// simulator wrote it to the moment the client read it; (3) for each size,
// maximum throughput of each path with -conc closed-loop workers,
// -max-duration per path in one-second rounds, the paths taking turns,
// and maitred/bare against target 5 (>= 95%), with this process's CPU time
// per answered request on each path: direct's is the client's and the
// simulator's, and a Go proxy's own cost is its figure less direct's
// (CPU-bound, the throughput ratio of two paths is about the inverse
// ratio of their figures). Everything but nginx runs in this process on
// loopback, so the paths share the machine's cores. -cpuprofile writes a
// CPU profile of the whole run.
//
// Usage: go run ./bench [-rate 300] [-duration 20s] [-tokenizer qwen3|demo] [-nginx-workers 1] [-cpuprofile FILE] [-json] [-inprocess=false] [-pprof] [-paths direct,maitred]
//
//	go run ./bench -scenario scale [-dims backends,keys,streams,waiting,prompt] [-scale-out DIR] (scale.go)
//	go run ./bench -scenario overload [-capacity 40] [-overload-3x 30s]
//	go run ./bench -scenario soak [-streams 1000] [-hold 20s]
//	go run ./bench -scenario quota [-quota-clients 50] [-quota-tpm 20000] [-quota-duration 2m]
//	go run ./bench -scenario store [-rate 300] [-duration 20s]
//	go run ./bench -scenario localwork [-maitred BIN] [-local-requests 8] [-local-bytes 7000000]
//	go run ./bench -scenario prefix [-prefix-duration 10m] [-prefix-scale 2] [-prefix-load 0.7] [-prefix-policies round-robin,least-load,affinity,precise,precise-3,oracle] [-prefix-weights 1,1]
//	go run ./bench -scenario fairness [-maitred BIN] [-fair-duration 20s] [-fair-long 1m] [-fair-idle 1m] [-fair-backlog 8,16] [-fair-items 1,2,3,4]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"github.com/maitred-dev/maitred/internal/upstream"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/gateway"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

var (
	rate         = flag.Int("rate", 300, "non-streaming requests per second per path (every path gets this rate)")
	duration     = flag.Duration("duration", 20*time.Second, "length of each size's fixed-rate phase")
	streamRate   = flag.Int("stream-rate", 30, "streaming requests per second per path")
	streamDur    = flag.Duration("stream-duration", 10*time.Second, "length of the streaming phase")
	events       = flag.Int("events", 20, "tokens per streamed answer")
	maxDur       = flag.Duration("max-duration", 5*time.Second, "length of each path's throughput run, per size, in one-second rounds")
	conc         = flag.Int("conc", 32, "closed-loop workers in the throughput phase")
	jsonOut      = flag.Bool("json", false, "print results as JSON")
	scenario     = flag.String("scenario", "proxy", "proxy: direct vs nginx vs bare vs maitred; overload: the admission queue at 1x and 3x capacity; soak: memory and goroutines per open stream; slowbody: memory and timeouts under declared-but-unsent bodies; quota: an API key's tokens_per_minute under concurrent clients; store: the shared store (a redis-server it starts) against in-process accounting; prefix: routing policies against four prefix-caching simulators (issue 29); models: RSS and start time with 1, 10, 100 models sharing a tokenizer and 10 distinct ones (issue 30); localwork: the built gateway's memory and CPU under concurrent 7 MB /tokenize and 3.9M-id /detokenize requests (issue 26); scale: how cost grows with backends, keys, open streams, waiting requests and prompt size (issue 30); fairness: two keyed tenants on one backend, fifo vs tokens (issue 28)")
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
	tokName      = flag.String("tokenizer", "qwen3", "proxy: the tokenizer maitred and the simulator count every request with: qwen3 (the fixture, see make fixtures) or demo (built in)")
	fixturesDir  = flag.String("fixtures", "", "proxy: the folder holding the fixture models (default .fixtures/models under the repository root)")
	nginxWorkers = flag.String("nginx-workers", "1", "proxy: nginx's worker_processes (a number or auto)")
	sizesFlag    = flag.String("sizes", "short,1k", "proxy: the chat sizes to run, comma-separated (short, 1k)")
	cpuProfile   = flag.String("cpuprofile", "", "proxy: write a CPU profile of the whole run (client, simulator, proxies) to this file")
	maitredBin   = flag.String("maitred", "", "localwork, fairness: the maitred binary to run (default: go build ./cmd/maitred into a temp dir)")
	localN       = flag.Int("local-requests", 8, "localwork: concurrent requests")
	localSize    = flag.Int("local-bytes", 7_000_000, "localwork: bytes of each whitespace-free /tokenize prompt")
	inProcess    = flag.Bool("inprocess", true, "proxy: after the separate-process run, run every phase again with the simulator and the Go proxies in this process (the second, labelled line)")
	pprofOn      = flag.Bool("pprof", false, "proxy: build maitred with net/http/pprof on a port of its own (printed), to profile the built binary while it runs")
	pathsFlag    = flag.String("paths", "", "proxy: the separate-process paths to run, comma-separated (direct, nginx, bare, maitred; default all)")
	bareListen   = flag.String("bare-listen", "", "bare-proxy: the address to serve on")
	bareTarget   = flag.String("bare-target", "", "bare-proxy: the URL to forward to")
	bareH2C      = flag.Bool("bare-h2c", false, "bare-proxy: serve HTTP/2 cleartext (prior knowledge) beside HTTP/1.1")
	fairDur      = flag.Duration("fair-duration", 20*time.Second, "fairness: length of each run of items 1 and 4, and of item 3 after B starts")
	fairLong     = flag.Duration("fair-long", time.Minute, "fairness: length of each run of item 2 (key weights 1 and 3)")
	fairIdle     = flag.Duration("fair-idle", time.Minute, "fairness: item 3: how long A runs alone before B starts")
	fairWindow   = flag.Duration("fair-window", 5*time.Second, "fairness: item 3's service windows after B starts (item 2's are twice as long)")
	fairBacklogs = flag.String("fair-backlog", "8,16", "fairness: A's concurrent long requests in item 1, one run per value and policy (the first is used in items 2-4)")
	fairItems    = flag.String("fair-items", "1,2,3,4", "fairness: the items of issue 28 to measure")
	fairSlots    = flag.Int("fair-slots", 4, "fairness: the backend's max_in_flight (the issue's is 4; 1 shows VTC's one-request-at-a-time bound, as the gap grows with the slots)")
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
	case "localwork":
		run = func() error { return localWork(*maitredBin, *localN, *localSize) }
	case "bare-proxy":
		run = func() error { return bareProxy(*bareListen, *bareTarget) }
	case "parked-handler":
		run = func() error { return parkedHandler(*bareListen) }
	case "streams-sim":
		run = func() error { return streamsSim(*streamsSimListen) }
	case "scale":
		run = func() error { return scale(scaleOptionsFromFlags()) }
	case "prefix":
		run = prefix
	case "models":
		run = func() error { return modelsScenario(*maitredBin, *modelsBaseline, *modelsRuns) }
	case "fairness":
		run = func() error { return fairnessFromFlags() }
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	tok, err := loadTokenizer(*tokName, *fixturesDir)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// The client's goroutines (and its transport's) are "client" in the
	// profile; each server labels its own (serveAs).
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("server", "client")))
	model := *tokName
	res := results{GOMAXPROCS: runtime.GOMAXPROCS(0), Tokenizer: model, Rate: *rate, Duration: duration.String()}
	sizes, err := pickSizes(*sizesFlag)
	if err != nil {
		return err
	}
	// As users run it first: every server in its own process.
	if err := measureSeparate(&res, &http.Client{Transport: poolTransport()}, sizes, tok); err != nil {
		return fmt.Errorf("separate processes: %w", err)
	}
	if !*inProcess {
		return report(res)
	}
	stamps := &stampBook{m: map[string][]time.Time{}}

	// The simulator counts with the same tokenizer as maitred, as vLLM
	// would: the answer's usage matches maitred's count, and the
	// gateway's warm-up probe (tokenizer_check enforce) passes.
	backend := sim.New(sim.Config{Model: model, MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 100000, KVTokens: 1 << 30,
		Tokenizer: sim.ModelTokenizer(tok)}, zap.NewNop())
	simURL, stopSim, err := serveAs("sim", stamps.wrap(backend.Handler()))
	if err != nil {
		return err
	}
	defer stopSim()
	target, _ := url.Parse(simURL)

	paths := []path{{"direct", simURL}}

	ng, ok, err := startNginx(nginxBin, target.Host, *nginxWorkers, nginxOptions{})
	switch {
	case err != nil:
		return fmt.Errorf("nginx: %w", err)
	case !ok:
		res.Nginx = "skipped (not installed: apt-get install nginx)"
		fmt.Fprintln(os.Stderr, "nginx: "+res.Nginx)
	default:
		defer ng.stop()
		// Interrupted, the deferred stop would not run: stop nginx and
		// remove its temp dir first. (Killed outright, the kernel still
		// stops it: childAttr.)
		stopOnSignal(ng.stop)
		res.Nginx = fmt.Sprintf("%s, worker_processes %s", nginxVersion(), *nginxWorkers)
		fmt.Fprintf(os.Stderr, "nginx: %s (%s)\n", res.Nginx, nginxWorkersWhy(*nginxWorkers))
		paths = append(paths, path{"nginx", ng.url})
	}

	bare := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     poolTransport(),
		FlushInterval: -1,
	}
	bareURL, stopBare, err := serveAs("bare", bare)
	if err != nil {
		return err
	}
	defer stopBare()
	paths = append(paths, path{"bare", bareURL})

	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: model, MaxModelLen: 4096, Backends: []config.BackendConfig{{URL: simURL}}}}
	// The access log is on, at info, as in production; it is encoded as JSON
	// and discarded so that the terminal is not the bottleneck.
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	reg := prometheus.NewRegistry()
	gwURL, _, stopGW, err := serveGatewayWith(cfg, log, gatewayExtras{tokenizers: map[string]*tokenize.Model{model: tok}, registry: reg})
	if err != nil {
		return err
	}
	defer stopGW()
	paths = append(paths, path{"maitred", gwURL})

	client := &http.Client{Transport: poolTransport()}
	if err := warm(client, paths, sizes, model); err != nil {
		return err
	}
	if err := measureLatency(&res, client, paths, sizes, tok, reg); err != nil {
		return err
	}
	measureStreamsAndThroughput(&res, client, paths, sizes, backend, stamps, model)
	res.Counting = countingOf(reg)
	return report(res)
}

// warm sends 100 requests of every size down every path: connection pools
// and code paths are warm before anything is measured.
func warm(client *http.Client, paths []path, sizes []chatSize, model string) error {
	for _, p := range paths {
		for _, sz := range sizes {
			for range 100 {
				if _, err := doPost(client, p.url, sz.body(model, nextID())); err != nil {
					return fmt.Errorf("%s warm-up: %w", p.name, err)
				}
			}
		}
	}
	return nil
}

// measureLatency is phase 1: every path at a fixed rate, interleaved, per
// chat size, with maitred's own phase figures.
func measureLatency(res *results, client *http.Client, paths []path, sizes []chatSize, tok *tokenize.Model, reg *prometheus.Registry) error {
	model := res.Tokenizer
	for _, sz := range sizes {
		n, err := promptTokens(tok, sz.body(model, 1))
		if err != nil {
			return fmt.Errorf("%s chat: %w", sz.name, err)
		}
		fmt.Fprintf(os.Stderr, "phase 1 (%s chat, %d prompt tokens): %d req/s per path for %s, interleaved\n", sz.name, n, *rate, *duration)
		before := gatherPhases(reg)
		lat, errs, timings := fixedRate(client, paths, func() []byte { return sz.body(model, nextID()) }, *rate, *duration)
		sr := sizeResult{Size: sz.name, PromptTokens: n}
		for i, p := range paths {
			sr.Latency = append(sr.Latency, summarize(p.name, lat[i], errs[i]))
		}
		sr.judge()
		sr.MaitredPhasesUs = gatherPhases(reg).since(before)
		sr.MaitredTimingUs = timings.quantiles()
		res.Sizes = append(res.Sizes, sr)
	}
	return nil
}

// measureStreamsAndThroughput is phases 2 (streamed event delays) and 3
// (throughput at a fixed concurrency).
func measureStreamsAndThroughput(res *results, client *http.Client, paths []path, sizes []chatSize, backend *sim.Server, stamps *stampBook, model string) {
	fmt.Fprintf(os.Stderr, "phase 2: streaming, %d req/s per path for %s, %d events each\n", *streamRate, *streamDur, *events)
	backend.Update(func(c *sim.Config) { c.OutputTokens = *events; c.ITL = 2 * time.Millisecond })
	for i, d := range streamDelays(client, paths, stamps, model, *streamRate, *streamDur, *events) {
		res.Stream = append(res.Stream, summarize(paths[i].name, d, 0))
	}
	res.StreamMarginP99ms = byPath(res.Stream, "maitred").P99ms - byPath(res.Stream, "bare").P99ms
	backend.Update(func(c *sim.Config) { c.OutputTokens = 8; c.ITL = 0 })

	rounds := max(1, int(*maxDur/time.Second))
	fmt.Fprintf(os.Stderr, "phase 3: max throughput, %d workers, %s per path in %d rounds, paths rotating\n", *conc, *maxDur, rounds)
	for _, sz := range sizes {
		res.Throughput = append(res.Throughput, throughputAll(client, paths, sz.name, func() []byte { return sz.body(model, nextID()) }, *conc, *maxDur, rounds))
	}
}

// stopOnSignal runs stop and exits when the process is interrupted or
// terminated.
func stopOnSignal(stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: stopping nginx\n", s)
		stop()
		os.Exit(1)
	}()
}

var requestID atomic.Int64

// nextID numbers requests: each request's chat names its own ticket.
func nextID() int64 { return requestID.Add(1) }

// serve runs h on a fresh loopback port.
func serve(h http.Handler) (string, func(), error) {
	return serveAs("", h)
}

// serveAs is serve with the profiler label server=name (none when "") on
// every goroutine the server starts: its connections and, through them,
// its outbound transport's. go tool pprof -tags then splits a -cpuprofile
// by server.
func serveAs(name string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go servingAs(name, func() { srv.Serve(ln) })
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// servingAs runs serve with the profiler label server=name (none when "").
func servingAs(name string, serve func()) {
	if name != "" {
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("server", name)))
	}
	serve()
}

// serveGateway runs a gateway for cfg on loopback, probes its backends
// once and marks it serving. It returns its URL, the transport it reaches
// backends with, and how to stop it.
func serveGateway(cfg config.Config, log *zap.Logger) (string, *upstream.Transport, func(), error) {
	return serveGatewayWith(cfg, log, gatewayExtras{})
}

// serveGatewayShared is serveGateway with a shared store (nil: none).
func serveGatewayShared(cfg config.Config, log *zap.Logger, shared gateway.SharedStore) (string, *upstream.Transport, func(), error) {
	return serveGatewayWith(cfg, log, gatewayExtras{shared: shared})
}

// gatewayExtras are serveGatewayWith's optional parts; zero values are
// none (no shared store, no tokenizers: requests forwarded uncounted, a
// fresh registry).
type gatewayExtras struct {
	shared     gateway.SharedStore
	tokenizers map[string]*tokenize.Model
	registry   *prometheus.Registry
	// kvEvents runs the fleet's KV-event subscribers (routing: precise).
	kvEvents bool
}

// serveGatewayWith is serveGateway with extras: the gateway counts each
// model's requests with its tokenizer, and its backends' warm-up probes
// compare their /tokenize with it.
func serveGatewayWith(cfg config.Config, log *zap.Logger, x gatewayExtras) (string, *upstream.Transport, func(), error) {
	fl, err := fleet.New(cfg.Fleet(), &http.Client{Transport: poolTransport()}, log, gateway.PromptCounters(x.tokenizers))
	if err != nil {
		return "", nil, nil, err
	}
	if x.registry == nil {
		x.registry = prometheus.NewRegistry()
	}
	tr := gateway.NewTransport(cfg)
	gw, err := gateway.New(gateway.Options{Config: cfg, Fleet: fl, Logger: log, Registry: x.registry, Transport: tr, Shared: x.shared, Tokenizers: x.tokenizers})
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
	go servingAs("maitred", func() { srv.Serve(gw.Listener(ln)) })
	ectx, stopEvents := context.WithCancel(context.Background())
	events := make(chan struct{})
	if x.kvEvents {
		go func() { defer close(events); fl.RunEvents(ectx) }()
	} else {
		close(events)
	}
	return "http://" + ln.Addr().String(), tr, func() { srv.Close(); tr.CloseIdleConnections(); gw.Close(); stopEvents(); <-events }, nil
}

func poolTransport() *http.Transport {
	return &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute, DisableCompression: true}
}

// doChat posts the short demo chat (chatBody) to base.
func doChat(c *http.Client, base string) (time.Duration, error) {
	return doPost(c, base, []byte(chatBody))
}

// doPost posts a chat completion request to base and reads the answer
// whole: its latency, or an error for anything but a 200.
func doPost(c *http.Client, base string, body []byte) (time.Duration, error) {
	d, _, err := doPostTimed(c, base, body)
	return d, err
}

// doPostTimed is doPost that also returns the answer's Server-Timing
// header (maitred's phases on its path).
func doPostTimed(c *http.Client, base string, body []byte) (time.Duration, string, error) {
	start := time.Now()
	res, err := c.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		return 0, "", err
	}
	if res.StatusCode != 200 {
		return 0, "", fmt.Errorf("status %d", res.StatusCode)
	}
	return time.Since(start), res.Header.Get("Server-Timing"), nil
}

// fixedRate sends one request to each path in turn (rotating which goes
// first) every 1/rate seconds, open loop: a slow answer never delays the
// next send. Each request's body is a fresh body(). It also returns the
// phases of maitred's answers' Server-Timing headers.
func fixedRate(c *http.Client, paths []path, body func() []byte, rate int, d time.Duration) ([][]time.Duration, []int, serverTimings) {
	lat := make([][]time.Duration, len(paths))
	errs := make([]int, len(paths))
	st := serverTimings{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	deadline := time.Now().Add(d)
	for n := 0; time.Now().Before(deadline); n++ {
		<-tick.C
		for k := range paths {
			i := (n + k) % len(paths)
			b := body()
			wg.Go(func() {
				l, timing, err := doPostTimed(c, paths[i].url, b)
				mu.Lock()
				if err != nil {
					errs[i]++
				} else {
					lat[i] = append(lat[i], l)
					if paths[i].name == "maitred" {
						st.add(timing)
					}
				}
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return lat, errs, st
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
func streamDelays(c *http.Client, paths []path, book *stampBook, model string, rate int, d time.Duration, n int) [][]time.Duration {
	out := make([][]time.Duration, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Count."}],"max_tokens":%d,"stream":true}`, model, n)
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
func readEvents(r io.Reader) []time.Time { return readEventsNotify(r, 64<<10, nil) }

// throughputAll measures each path's closed-loop throughput with workers
// clients for d in all, run as rounds slices of d/rounds, the paths
// taking turns (rotating which goes first) so that a busy spell on the
// machine falls on all of them.
func throughputAll(c *http.Client, paths []path, size string, body func() []byte, workers int, d time.Duration, rounds int) tputResult {
	ok := make([]int64, len(paths))
	failed := make([]int64, len(paths))
	cpu := make([]time.Duration, len(paths))
	slice := d / time.Duration(rounds)
	for r := range rounds {
		for k := range paths {
			i := (r + k) % len(paths)
			t0 := processCPU()
			o, f := closedLoop(c, paths[i].url, body, workers, slice)
			cpu[i] += processCPU() - t0
			ok[i] += o
			failed[i] += f
		}
	}
	out := tputResult{Size: size}
	for i, p := range paths {
		t := tput{Path: p.name, RPS: float64(ok[i]) / d.Seconds(), Errors: int(failed[i])}
		if ok[i] > 0 && cpu[i] > 0 {
			t.CPUPerRequestUs = float64(cpu[i]) / float64(ok[i]) / 1e3
		}
		out.Paths = append(out.Paths, t)
	}
	if b := byTput(out.Paths, "bare").RPS; b > 0 {
		out.MaitredOverBare = byTput(out.Paths, "maitred").RPS / b
		out.MeetsTarget = out.MaitredOverBare >= 0.95
	}
	return out
}

// closedLoop runs workers clients against base for d, each sending its
// next request when its last is answered.
func closedLoop(c *http.Client, base string, body func() []byte, workers int, d time.Duration) (ok, failed int64) {
	var nOK, nFailed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := doPost(c, base, body()); err != nil {
					nFailed.Add(1)
				} else {
					nOK.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return nOK.Load(), nFailed.Load()
}
