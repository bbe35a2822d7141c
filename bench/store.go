package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/store"
)

// storeScenario measures what the shared store adds to a request: two
// gateways in front of one simulated backend, one accounting in process,
// one confirming each backend slot in a redis-server this scenario starts
// (a take before the request is sent; the release after the response), at
// rate requests/s each, interleaved request by request.
func storeScenario(rate int, d time.Duration) error {
	addr, stopRedis, err := startRedis()
	if err != nil {
		return err
	}
	defer stopRedis()

	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 100000, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return err
	}
	defer stopSim()

	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	cfg := config.Default()
	// A max_in_flight far above the load: the store is asked every time,
	// and never refuses.
	cfg.Models = []config.ModelConfig{{Name: "demo", Backends: []config.BackendConfig{{URL: simURL, MaxInFlight: 100000}}}}
	localURL, _, stopLocal, err := serveGateway(cfg, log)
	if err != nil {
		return err
	}
	defer stopLocal()

	scfg := cfg
	scfg.Store.URL = "redis://" + addr + "/0"
	st, err := store.New(store.Options{Config: scfg.Store, Logger: log})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx) })
	defer func() { cancel(); wg.Wait(); st.Close() }()
	storeURL, _, stopStore, err := serveGatewayShared(scfg, log, st)
	if err != nil {
		return err
	}
	defer stopStore()

	paths := []path{{"local", localURL}, {"store", storeURL}}
	client := &http.Client{Transport: poolTransport()}
	for _, p := range paths {
		for range 200 {
			if _, err := doChat(client, p.url); err != nil {
				return fmt.Errorf("%s warm-up: %w", p.name, err)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "store: %d req/s per path for %s, interleaved (redis-server at %s)\n", rate, d, addr)
	lat, errs, _ := fixedRate(client, paths, demoChat, rate, d)
	var stats []stat
	for i, p := range paths {
		stats = append(stats, summarize(p.name, lat[i], errs[i]))
	}
	if !st.State().Up {
		return fmt.Errorf("the store went down during the run: %s", st.State().Err)
	}
	l, s := stats[0], stats[1]
	res := struct {
		Rate        int     `json:"rate_per_path"`
		Duration    string  `json:"duration"`
		Latency     []stat  `json:"latency"`
		MarginP50ms float64 `json:"store_over_local_p50_ms"`
		MarginP99ms float64 `json:"store_over_local_p99_ms"`
	}{rate, d.String(), stats, s.P50ms - l.P50ms, s.P99ms - l.P99ms}
	if *jsonOut {
		return printJSON(res)
	}
	fmt.Printf("non-streaming chat at %d req/s per path for %s\n\n", rate, d)
	fmt.Printf("%-8s %7s %6s %8s %8s %8s %8s\n", "path", "n", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms")
	for _, x := range stats {
		fmt.Printf("%-8s %7d %6d %8.3f %8.3f %8.3f %8.3f\n", x.Path, x.N, x.Errors, x.P50ms, x.P90ms, x.P99ms, x.Maxms)
	}
	fmt.Printf("shared store over in-process: p50 %+.3f ms, p99 %+.3f ms (target: p50 <= 0.3 ms)\n", res.MarginP50ms, res.MarginP99ms)
	return nil
}

// startRedis runs redis-server (Debian's package) on a free loopback port,
// without persistence, until stop.
func startRedis() (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("the store scenario needs redis-server: apt-get install redis-server")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "bench-redis")
	if err != nil {
		return "", nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait(); os.RemoveAll(dir) }
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Ready to accept connections") {
			go io.Copy(io.Discard, out)
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("redis-server exited before it was ready")
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
