package main

import (
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// backendsBaseline is a maitred binary measured beside the built one at
// each point of the backends dimension (its idle CPU, on the same
// simulators, right after): before and after a change in one run.
var backendsBaseline = flag.String("backends-baseline", "", "scale: a maitred binary, or a git revision (say HEAD~3) whose maitred is built, whose idle CPU the backends dimension measures beside the built one's at each point, on the same simulators")

// scaleBackendsRun is the backends dimension: for each n, n simulated
// backends (one simulator served on n loopback ports in this process)
// behind one model of the built maitred at the default probe and scrape
// intervals. Figures: the pick (in-process Acquire+Release at n slots),
// maitred's added p50 over the direct path (sequential requests,
// alternating), the idle maitred's CPU (probes and scrapes) in % of one
// core over -scale-idle, its RSS, and RSS per backend above the first
// point.
func scaleBackendsRun(e *scaleEnv, ns []int, idle time.Duration) (*curve, error) {
	c := &curve{dim: "backends per model (built maitred; n simulators on n ports of this process; the default intervals and budgets: probes every 1s up to 128 backends, scrapes every 250ms up to 64, adapter listings every probe up to 64, each past that at its budget: 128 probes, 256 scrapes, 64 listings a second)",
		note:  "target: pick <= 2 us per request at 512 backends; probes and scrapes of 512 backends <= 5% of one core. pick: in-process admission.Pool Acquire+Release",
		xName: "backends", cols: []string{"pick us", "direct p50 us", "maitred +p50 us", "queue p50 us", "idle CPU %", "baseline CPU %", "RSS MiB", "KiB/backend"},
		charts: []chartSpec{
			{file: "backends-pick.svg", title: "pick cost per request by backends (in-process Pool)", yLabel: "us", cols: []string{"pick us"}},
			{file: "backends-cpu.svg", title: "maitred's idle CPU (probes and scrapes) by backends, and -backends-baseline's", yLabel: "% of one core", cols: []string{"idle CPU %", "baseline CPU %"}},
			{file: "backends-latency.svg", title: "direct p50 and maitred's added p50 by backends", yLabel: "us", cols: []string{"direct p50 us", "maitred +p50 us"}},
		}}
	baseline, err := e.baseline("backends-baseline", *backendsBaseline)
	if err != nil {
		return nil, err
	}
	picks := pickLine(ns)
	baseRSS, baseN := math.NaN(), 0
	for _, n := range ns {
		r, err := backendsPoint(e, n, idle, baseline)
		if err != nil {
			return nil, fmt.Errorf("%d backends: %w", n, err)
		}
		perBackend := math.NaN()
		if math.IsNaN(baseRSS) {
			baseRSS, baseN = r.rss, n
		} else {
			perBackend = (r.rss - baseRSS) / float64(n-baseN) / 1024
		}
		c.add(n, picks[n], r.directP50, r.addedP50, r.queueP50, r.cpuPct, r.baselinePct, r.rss/(1<<20), perBackend)
	}
	return c, nil
}

type backendsFigures struct {
	directP50, addedP50, queueP50, cpuPct, baselinePct, rss float64
}

func backendsPoint(e *scaleEnv, n int, idle time.Duration, baseline string) (backendsFigures, error) {
	var f backendsFigures
	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	var urls []string
	for range n {
		u, stop, err := serve(backend.Handler())
		if err != nil {
			return f, err
		}
		defer stop()
		urls = append(urls, u)
	}
	dir, err := e.pointDir(fmt.Sprintf("backends-%d", n))
	if err != nil {
		return f, err
	}
	var cfg strings.Builder
	cfg.WriteString("models:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    backends:\n")
	for _, u := range urls {
		fmt.Fprintf(&cfg, "      - url: %s\n", u)
	}
	gw, err := e.startIn(dir, cfg.String())
	if err != nil {
		return f, err
	}
	defer gw.stop()
	if err := awaitMetric(gw.url+"/metrics", "maitred_model_ready_backends", float64(n), time.Minute); err != nil {
		return f, err
	}
	client := &http.Client{Transport: poolTransport()}
	defer client.CloseIdleConnections()
	f.directP50, f.addedP50, f.queueP50, err = alternatingP50(client, urls[0], gw.url, 400)
	if err != nil {
		return f, err
	}
	time.Sleep(2 * time.Second) // the requests' garbage collected, connections idle
	f.rss = float64(procRSS(gw.pid))
	if f.cpuPct, err = idleCPU(gw, idle); err != nil {
		return f, err
	}
	fmt.Fprintf(os.Stderr, "  %d backends: idle CPU %.2f%%, RSS %.1f MiB\n", n, f.cpuPct, f.rss/(1<<20))
	f.baselinePct = math.NaN()
	if baseline != "" {
		gw.stop()
		base, err := startMaitred(baseline, dir, cfg.String(), "")
		if err != nil {
			return f, fmt.Errorf("baseline: %w", err)
		}
		defer base.stop()
		if err := awaitMetric(base.url+"/metrics", "maitred_model_ready_backends", float64(n), time.Minute); err != nil {
			return f, fmt.Errorf("baseline: %w", err)
		}
		time.Sleep(2 * time.Second)
		if f.baselinePct, err = idleCPU(base, idle); err != nil {
			return f, err
		}
		fmt.Fprintf(os.Stderr, "  %d backends: baseline's idle CPU %.2f%%\n", n, f.baselinePct)
	}
	return f, nil
}

// idleCPU is p's CPU over idle, in % of one core.
func idleCPU(p *proc, idle time.Duration) (float64, error) {
	c0, err := procCPU(p.pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(idle)
	c1, err := procCPU(p.pid)
	if err != nil {
		return 0, err
	}
	return 100 * float64(c1-c0) / float64(idle), nil
}

// alternatingP50 sends up to k short chats one at a time (for at most
// 20 s), alternating between direct and maitred, and returns direct's
// p50, maitred's p50 less direct's, and the p50 of the queue phase in
// maitred's Server-Timing, in microseconds.
func alternatingP50(c *http.Client, direct, maitred string, k int) (dp, added, queue float64, err error) {
	var d, m []time.Duration
	st := serverTimings{}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 2*k && (i < 60 || time.Now().Before(deadline)); i++ {
		base := direct
		if i%2 == 1 {
			base = maitred
		}
		lat, timing, err := doPostTimed(c, base, []byte(chatBody))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", base, err)
		}
		if i < 40 { // warm-up
			continue
		}
		if i%2 == 1 {
			m = append(m, lat)
			st.add(timing)
		} else {
			d = append(d, lat)
		}
	}
	slices.Sort(d)
	slices.Sort(m)
	dp, mp := float64(quantile(d, .5).Microseconds()), float64(quantile(m, .5).Microseconds())
	return dp, mp - dp, st.quantiles()["queue"].P50, nil
}

// awaitMetric polls a /metrics URL until name's samples sum to want.
func awaitMetric(url, name string, want float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last float64
	for time.Now().Before(deadline) {
		v, err := scrapeMetric(url, name)
		if err == nil && v == want {
			return nil
		}
		last = v
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: %s is %v after %s, want %v", url, name, last, within, want)
}
