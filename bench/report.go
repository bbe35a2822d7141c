package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
	// CPUPerRequestUs is this process's CPU time (client, simulator and
	// the Go proxies, all in it) per answered request while the path ran:
	// a proxy's own cost is its figure less direct's. nginx runs in its
	// own processes, so its figure leaves nginx's own CPU out.
	CPUPerRequestUs float64 `json:"cpu_per_request_us,omitempty"`
}

// added is what a proxy adds over the direct path: the difference of the
// quantiles.
type added struct {
	Path  string  `json:"path"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// sizeResult is the fixed-rate phase for one chat size, and its verdicts
// against issue 17's target 1 (maitred adds no more than the bare Go proxy)
// and its moonshot (maitred's added p50 within 2x nginx's; nil when nginx
// did not run).
type sizeResult struct {
	Size            string     `json:"size"`
	PromptTokens    int        `json:"prompt_tokens"`
	Latency         []stat     `json:"latency"`
	Added           []added    `json:"added_over_direct"`
	P50AtMostBare   bool       `json:"maitred_added_p50_le_bare"`
	P99AtMostBare   bool       `json:"maitred_added_p99_le_bare"`
	Moonshot        *bool      `json:"moonshot_maitred_added_p50_le_2x_nginx,omitempty"`
	MaitredPhasesUs phaseMeans `json:"maitred_phase_mean_us"`
	// MaitredTimingUs is each phase maitred's answers name in their
	// Server-Timing (door, queue, backend), as quantiles: the means above
	// carry every outlier, these say what a typical request paid.
	MaitredTimingUs map[string]timingQuantiles `json:"maitred_server_timing_us"`
	// Processes: with every server in its own process, each one's CPU
	// time and involuntary context switches per request, and maitred's
	// collections over the run.
	Processes *processFigures `json:"processes,omitempty"`
}

// processFigures is what each path's own process spent per request
// (direct: the simulator; bare and maitred: the proxy alone).
type processFigures struct {
	CPUPerRequestUs     map[string]float64 `json:"cpu_per_request_us"`
	PreemptedPerRequest map[string]float64 `json:"involuntary_switches_per_request"`
	MaitredGCs          float64            `json:"maitred_gcs"`
}

// timingQuantiles is one Server-Timing phase over a run, in microseconds.
type timingQuantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// serverTimings collects the durations of each phase of maitred's
// Server-Timing headers ("door;dur=0.031, queue;dur=0.004, ..." in ms).
type serverTimings map[string][]time.Duration

// add records one header's phases; a value that does not parse is left
// out (the other paths send none).
func (st serverTimings) add(h string) {
	for part := range strings.SplitSeq(h, ",") {
		name, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		if !ok {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
					st[name] = append(st[name], time.Duration(ms*float64(time.Millisecond)))
				}
			}
		}
	}
}

// quantiles summarizes each phase.
func (st serverTimings) quantiles() map[string]timingQuantiles {
	out := make(map[string]timingQuantiles, len(st))
	for name, d := range st {
		slices.Sort(d)
		q := func(p float64) float64 { return float64(quantile(d, p)) / 1e3 }
		out[name] = timingQuantiles{P50: q(.50), P90: q(.90), P99: q(.99)}
	}
	return out
}

// tputResult is the closed-loop phase for one chat size, against issue
// 17's target 5: maitred's throughput at least 95% of the bare proxy's.
type tputResult struct {
	Size            string  `json:"size"`
	Paths           []tput  `json:"paths"`
	MaitredOverBare float64 `json:"maitred_over_bare"`
	MeetsTarget     bool    `json:"maitred_ge_95pct_bare"`
}

// counting is what maitred's metrics say it did with the run's requests:
// every request counted is the point of the harness.
type counting struct {
	Requests  float64 `json:"requests"`
	Uncounted float64 `json:"uncounted"`
}

type results struct {
	GOMAXPROCS int    `json:"gomaxprocs"`
	Tokenizer  string `json:"tokenizer"`
	Nginx      string `json:"nginx"`
	Rate       int    `json:"rate_per_path"`
	Duration   string `json:"duration"`
	// Separate is phase 1 with every server in its own process (maitred
	// the built binary, its log to a file): what users run. Sizes is the
	// same phase with the simulator and the Go proxies in this process.
	Separate          []sizeResult `json:"separate_processes"`
	Sizes             []sizeResult `json:"sizes"`
	Stream            []stat       `json:"stream_event_delay"`
	StreamMarginP99ms float64      `json:"stream_maitred_over_bare_p99_ms"`
	Throughput        []tputResult `json:"max_throughput"`
	Counting          counting     `json:"maitred_counting"`
}

// quantile is the p-quantile of sorted (the zero value when empty): the
// element below which a fraction p of them lie, the largest for p = 1.
func quantile[T any](sorted []T, p float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func summarize(name string, d []time.Duration, errs int) stat {
	slices.Sort(d)
	q := func(p float64) float64 { return float64(quantile(d, p)) / 1e6 }
	return stat{Path: name, N: len(d), Errors: errs, P50ms: q(.50), P90ms: q(.90), P99ms: q(.99), Maxms: q(1)}
}

func byPath(s []stat, name string) stat {
	for _, x := range s {
		if x.Path == name {
			return x
		}
	}
	return stat{}
}

func byTput(s []tput, name string) tput {
	for _, x := range s {
		if x.Path == name {
			return x
		}
	}
	return tput{}
}

// judge fills in what each proxy adds over direct and the verdicts.
func (r *sizeResult) judge() {
	d := byPath(r.Latency, "direct")
	add := map[string]added{}
	for _, s := range r.Latency {
		if s.Path == "direct" {
			continue
		}
		a := added{Path: s.Path, P50ms: s.P50ms - d.P50ms, P99ms: s.P99ms - d.P99ms}
		r.Added = append(r.Added, a)
		add[s.Path] = a
	}
	m, b := add["maitred"], add["bare"]
	r.P50AtMostBare = m.P50ms <= b.P50ms
	r.P99AtMostBare = m.P99ms <= b.P99ms
	if n, ok := add["nginx"]; ok {
		v := m.P50ms <= 2*n.P50ms
		r.Moonshot = &v
	}
}

// phaseSums is maitred_phase_seconds summed over models, by phase.
type phaseSums map[string]struct {
	sum float64
	n   uint64
}

// phaseMeans is the mean time per request of each of maitred's phases
// (gateway/triage.go: read, door, queue, connect, prefill, decode, tail),
// in microseconds. prefill and decode include the backend's own time.
type phaseMeans map[string]float64

func gatherPhases(reg *prometheus.Registry) phaseSums {
	out := phaseSums{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "maitred_phase_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					x := out[l.GetValue()]
					x.sum += m.GetHistogram().GetSampleSum()
					x.n += m.GetHistogram().GetSampleCount()
					out[l.GetValue()] = x
				}
			}
		}
	}
	return out
}

// since is the mean of each phase over the requests observed after then.
func (p phaseSums) since(then phaseSums) phaseMeans {
	out := phaseMeans{}
	for k, v := range p {
		n := v.n - then[k].n
		if n > 0 {
			out[k] = (v.sum - then[k].sum) / float64(n) * 1e6
		}
	}
	return out
}

// countingOf reads maitred_requests_total and
// maitred_admission_uncounted_total from reg.
func countingOf(reg *prometheus.Registry) counting {
	var c counting
	mfs, err := reg.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "maitred_requests_total":
				c.Requests += m.GetCounter().GetValue()
			case "maitred_admission_uncounted_total":
				c.Uncounted += m.GetCounter().GetValue()
			}
		}
	}
	return c
}

var phaseOrder = []string{"read", "door", "queue", "connect", "prefill", "decode", "tail"}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func report(r results) error {
	if *jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Printf("GOMAXPROCS=%d, tokenizer %s (maitred and the simulator count every request), non-streaming chat at %d req/s per path for %s per size\n", r.GOMAXPROCS, r.Tokenizer, r.Rate, r.Duration)
	fmt.Printf("nginx: %s\n", r.Nginx)
	if len(r.Separate) > 0 {
		fmt.Println("\n== separate processes (as users run it): maitred the built binary, JSON log to a file; simulator, bare proxy and nginx each in their own process; load from this one ==")
		printSizes(r.Separate)
	}
	if len(r.Sizes) == 0 {
		return nil
	}
	fmt.Println("\n== in-process (simulator, bare proxy and maitred in this process; nginx its own) ==")
	fmt.Printf("maitred: %.0f requests, %.0f uncounted\n", r.Counting.Requests, r.Counting.Uncounted)
	printSizes(r.Sizes)
	printStreamsAndThroughput(r)
	return nil
}

// printSizes prints phase 1's table for each size.
func printSizes(sizes []sizeResult) {
	for _, sz := range sizes {
		fmt.Printf("\n%s chat (%d prompt tokens)\n", sz.Size, sz.PromptTokens)
		fmt.Printf("%-8s %7s %6s %8s %8s %8s %8s %10s %10s\n", "path", "n", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms", "+p50 ms", "+p99 ms")
		for _, s := range sz.Latency {
			add50, add99 := "", ""
			for _, x := range sz.Added {
				if x.Path == s.Path {
					add50, add99 = fmt.Sprintf("%+.3f", x.P50ms), fmt.Sprintf("%+.3f", x.P99ms)
				}
			}
			fmt.Printf("%-8s %7d %6d %8.3f %8.3f %8.3f %8.3f %10s %10s\n", s.Path, s.N, s.Errors, s.P50ms, s.P90ms, s.P99ms, s.Maxms, add50, add99)
		}
		fmt.Printf("maitred added p50 <= bare: %s\n", yesNo(sz.P50AtMostBare))
		fmt.Printf("maitred added p99 <= bare: %s\n", yesNo(sz.P99AtMostBare))
		if sz.Moonshot != nil {
			fmt.Printf("moonshot: maitred added p50 <= 2x nginx: %s\n", yesNo(*sz.Moonshot))
		} else {
			fmt.Printf("moonshot: maitred added p50 <= 2x nginx: n/a (nginx skipped)\n")
		}
		if len(sz.MaitredPhasesUs) > 0 {
			fmt.Printf("maitred phases, mean per request (us):")
			for _, k := range phaseOrder {
				fmt.Printf(" %s %.1f", k, sz.MaitredPhasesUs[k])
			}
			fmt.Println()
		}
		if p := sz.Processes; p != nil {
			fmt.Printf("CPU per request of each process (us): simulator (serving every path) %.1f, bare proxy %.1f, maitred %.1f; involuntary context switches per request: bare %.2f, maitred %.2f; maitred GCs %.0f\n",
				p.CPUPerRequestUs["direct"], p.CPUPerRequestUs["bare"], p.CPUPerRequestUs["maitred"], p.PreemptedPerRequest["bare"], p.PreemptedPerRequest["maitred"], p.MaitredGCs)
		}
		fmt.Printf("maitred Server-Timing p50/p90/p99 (us):")
		for _, k := range []string{"door", "queue", "backend"} {
			if q, ok := sz.MaitredTimingUs[k]; ok {
				fmt.Printf(" %s %.1f/%.1f/%.1f", k, q.P50, q.P90, q.P99)
			}
		}
		fmt.Println()
	}
}

// printStreamsAndThroughput prints phases 2 and 3 (in-process).
func printStreamsAndThroughput(r results) {
	fmt.Println("\nstreamed event delay (simulator flush -> client read)")
	for _, s := range r.Stream {
		fmt.Printf("%-8s %7d %6s %8.3f %8.3f %8.3f %8.3f\n", s.Path, s.N, "", s.P50ms, s.P90ms, s.P99ms, s.Maxms)
	}
	fmt.Printf("maitred over bare proxy: p99 %+.3f ms per event\n", r.StreamMarginP99ms)
	for _, t := range r.Throughput {
		fmt.Printf("\nmax throughput (closed loop), %s chat\n", t.Size)
		direct := byTput(t.Paths, "direct").CPUPerRequestUs
		for _, p := range t.Paths {
			fmt.Printf("%-8s %9.0f req/s  errors %d", p.Path, p.RPS, p.Errors)
			switch {
			case p.CPUPerRequestUs == 0:
			case p.Path == "direct":
				fmt.Printf("  CPU %.1f us/request (client and simulator)", p.CPUPerRequestUs)
			case p.Path == "nginx":
				fmt.Printf("  CPU %.1f us/request here (nginx's own processes not counted)", p.CPUPerRequestUs)
			default:
				fmt.Printf("  CPU %.1f us/request, the proxy's own %+.1f", p.CPUPerRequestUs, p.CPUPerRequestUs-direct)
			}
			fmt.Println()
		}
		fmt.Printf("maitred/bare = %.1f%% (target >= 95%%): %s\n", 100*t.MaitredOverBare, yesNo(t.MeetsTarget))
	}
}
