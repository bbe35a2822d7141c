package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// overload measures the admission queue: the gateway in front of one
// simulated backend whose capacity is max_in_flight / service time, offered
// 1x and then 3x that capacity at a fixed rate (open loop). It reports
// goodput, the queue waits of admitted requests (from Server-Timing), how
// every refusal was answered, whether anything was dispatched that the
// client did not get, and RSS growth.
func overload(capacityRPS int, d1, d3 time.Duration) error {
	const inFlight = 8
	service := time.Duration(float64(inFlight) / float64(capacityRPS) * float64(time.Second))
	tokens := 20
	itl := service / time.Duration(tokens)
	backend := sim.New(sim.Config{Model: "demo", OutputTokens: tokens, ITL: itl, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return err
	}
	defer stopSim()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "demo", QueueSize: 64, QueueTimeout: config.Duration(2 * time.Second),
		Backends: []config.BackendConfig{{URL: simURL, MaxInFlight: inFlight}}}}
	gwURL, _, stopGW, err := serveGateway(cfg, zap.NewNop())
	if err != nil {
		return err
	}
	defer stopGW()
	client := &http.Client{Transport: poolTransport()}
	rss0 := rssMiB()

	run := func(rate int, d time.Duration) overloadStat {
		var st overloadStat
		var mu sync.Mutex
		var wg sync.WaitGroup
		recv0 := backend.Stats().Requests
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		start := time.Now()
		deadline := start.Add(d)
		for time.Now().Before(deadline) {
			<-tick.C
			wg.Go(func() {
				res, err := client.Post(gwURL+"/v1/chat/completions", "application/json",
					bytes.NewReader([]byte(`{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":20}`)))
				mu.Lock()
				defer mu.Unlock()
				st.sent++
				if err != nil {
					st.transport++
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch {
				case res.StatusCode == 200:
					st.ok++
					st.waits = append(st.waits, queueWait(res.Header.Get("Server-Timing")))
				case res.StatusCode == 429 || res.StatusCode == 503:
					st.refused++
					if res.Header.Get("Retry-After") == "" {
						st.noRetryAfter++
					}
					st.codes = append(st.codes, res.StatusCode)
				default:
					st.other++
				}
			})
		}
		wg.Wait()
		st.dispatched = backend.Stats().Requests - recv0
		// Over the time until the last answer, so that requests still
		// draining from the queue do not inflate the rate.
		st.goodput = float64(st.ok) / time.Since(start).Seconds()
		return st
	}
	fmt.Fprintf(os.Stderr, "overload: capacity %d req/s (max_in_flight %d, %s per request), 1x for %s, then 3x for %s\n", capacityRPS, inFlight, service, d1, d3)
	one := run(capacityRPS, d1)
	three := run(3*capacityRPS, d3)
	rss1 := rssMiB()
	for _, r := range []struct {
		name string
		s    overloadStat
	}{{"1x", one}, {"3x", three}} {
		s := r.s
		slices.Sort(s.waits)
		p := func(q float64) float64 { return quantile(s.waits, q) }
		fmt.Printf("%s: sent %d, ok %d (goodput %.1f req/s), refused %d (without Retry-After %d), other %d, transport errors %d; dispatched to the backend %d; queue wait p50 %.1f ms p99 %.1f ms max %.1f ms\n",
			r.name, s.sent, s.ok, s.goodput, s.refused, s.noRetryAfter, s.other, s.transport, s.dispatched, p(.5), p(.99), p(1))
	}
	fmt.Printf("goodput at 3x = %.1f%% of goodput at 1x; queue_timeout 2000 ms; RSS %.1f -> %.1f MiB (+%.1f)\n",
		100*three.goodput/one.goodput, rss0, rss1, rss1-rss0)
	return nil
}

type overloadStat struct {
	sent, ok, refused, noRetryAfter, other, transport, dispatched int
	goodput                                                       float64
	waits                                                         []float64
	codes                                                         []int
}

// queueWait reads "queue;dur=N" from a Server-Timing header.
func queueWait(h string) float64 {
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		if v, ok := strings.CutPrefix(part, "queue;dur="); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}
