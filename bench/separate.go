package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/tokenize"
)

// separate is the proxy scenario as users run it: every path's server in
// its own process (the simulator as `maitred sim`, nginx, the bare proxy
// as this program re-run, maitred as the built binary with its JSON log
// written to a file), the load generator alone in this one. It runs phase
// 1 (fixed rate, interleaved) for each size and returns one sizeResult
// per size, with maitred's Server-Timing phases.
type separateRun struct {
	dir      string
	bin      string
	paths    []path
	pids     map[string]int // the process serving each path (direct: the simulator); nginx's are not counted
	procs    []*proc
	stopNg   func()
	pprofURL string // maitred's net/http/pprof, with -pprof
}

// startSeparate starts the processes: the simulator counting with the
// tokenizer folder named by model (the fixture; builtin:demo for demo),
// nginx when installed, the bare proxy, and maitred counting with the same.
func startSeparate(model string, withPprof bool) (*separateRun, error) {
	s := &separateRun{pids: map[string]int{}}
	var err error
	if s.dir, err = os.MkdirTemp("", "bench-separate-"); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "separate processes: building ./cmd/maitred into %s\n", s.dir)
	if s.bin, err = buildMaitred(s.dir, withPprof); err != nil {
		s.stop()
		return nil, err
	}
	tokDir := "builtin:demo"
	if model != "demo" {
		dir := *fixturesDir
		if dir == "" {
			dir = filepath.Join(fixtures.Root(), ".fixtures", "models")
		}
		tokDir = filepath.Join(dir, model)
	}
	simAddr := freeAddr()
	sim, err := startSim(s.bin, simAddr, simArgs(simAddr, model, tokDir, 4096, 8))
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("maitred sim: %w", err)
	}
	s.procs = append(s.procs, sim)
	s.paths = append(s.paths, path{"direct", sim.url})
	s.pids["direct"] = sim.pid
	target, _ := url.Parse(sim.url)
	if ng, ok, err := startNginx(nginxBin, target.Host, *nginxWorkers, nginxOptions{}); err != nil {
		s.stop()
		return nil, fmt.Errorf("nginx: %w", err)
	} else if ok {
		s.stopNg = ng.stop
		s.paths = append(s.paths, path{"nginx", ng.url})
	}
	bare, err := startBareProxy(sim.url, false)
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("bare proxy: %w", err)
	}
	s.procs = append(s.procs, bare)
	s.paths = append(s.paths, path{"bare", bare.url})
	s.pids["bare"] = bare.pid
	cfg := fmt.Sprintf("models:\n  - name: %s\n    tokenizer: %s\n    max_model_len: 4096\n    backends:\n      - url: %s\n", model, tokDir, sim.url)
	var pprofAddr string
	if withPprof {
		pprofAddr = freeAddr()
		s.pprofURL = "http://" + pprofAddr
	}
	gw, err := startMaitred(s.bin, s.dir, cfg, pprofAddr)
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("maitred serve: %w", err)
	}
	s.procs = append(s.procs, gw)
	s.paths = append(s.paths, path{"maitred", gw.url})
	s.pids["maitred"] = gw.pid
	if *pathsFlag != "" {
		keep := strings.Split(*pathsFlag, ",")
		s.paths = slices.DeleteFunc(s.paths, func(p path) bool { return !slices.Contains(keep, p.name) })
	}
	return s, nil
}

// stop ends every process (maitred first) and removes the temp dir.
func (s *separateRun) stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop()
	}
	if s.stopNg != nil {
		s.stopNg()
	}
	os.RemoveAll(s.dir)
}

// measureSeparate runs phase 1 on the separate processes: each size at
// the fixed rate, the paths interleaved, after a warm-up.
func measureSeparate(res *results, client *http.Client, sizes []chatSize, tok *tokenize.Model) error {
	model := res.Tokenizer
	s, err := startSeparate(model, *pprofOn)
	if err != nil {
		return err
	}
	defer s.stop()
	if s.stopNg != nil {
		res.Nginx = fmt.Sprintf("%s, worker_processes %s", nginxVersion(), *nginxWorkers)
	} else {
		res.Nginx = "skipped (not installed: apt-get install nginx)"
	}
	if s.pprofURL != "" {
		fmt.Fprintf(os.Stderr, "separate processes: maitred serves pprof at %s/debug/pprof/\n", s.pprofURL)
	}
	if err := warm(client, s.paths, sizes, model); err != nil {
		return err
	}
	for _, sz := range sizes {
		n, err := promptTokens(tok, sz.body(model, 1))
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "separate processes, phase 1 (%s chat, %d prompt tokens): %d req/s per path for %s, interleaved\n", sz.name, n, *rate, *duration)
		before := s.sample()
		lat, errs, timings := fixedRate(client, s.paths, func() []byte { return sz.body(model, nextID()) }, *rate, *duration)
		sr := sizeResult{Size: sz.name, PromptTokens: n}
		sr.Processes = s.sample().since(before, len(lat[0]))
		for i, p := range s.paths {
			sr.Latency = append(sr.Latency, summarize(p.name, lat[i], errs[i]))
		}
		sr.judge()
		sr.MaitredTimingUs = timings.quantiles()
		res.Separate = append(res.Separate, sr)
	}
	return nil
}

// procSample is each path's process's CPU time and context switches, and
// maitred's garbage collections, at one moment.
type procSample struct {
	cpu  map[string]time.Duration
	nvcs map[string]int64
	gcs  float64
}

func (s *separateRun) sample() procSample {
	ps := procSample{cpu: map[string]time.Duration{}, nvcs: map[string]int64{}}
	for name, pid := range s.pids {
		ps.cpu[name], _ = procCPU(pid)
		ps.nvcs[name], _ = procStatus(pid, "nonvoluntary_ctxt_switches:")
	}
	for _, p := range s.paths {
		if p.name == "maitred" {
			ps.gcs, _ = scrapeMetric(p.url+"/metrics", "go_gc_duration_seconds_count")
		}
	}
	return ps
}

// since is what each process spent per request (n requests per path)
// from then to ps.
func (ps procSample) since(then procSample, n int) *processFigures {
	if n == 0 {
		return nil
	}
	f := &processFigures{CPUPerRequestUs: map[string]float64{}, PreemptedPerRequest: map[string]float64{}}
	for name, c := range ps.cpu {
		f.CPUPerRequestUs[name] = float64((c - then.cpu[name]).Microseconds()) / float64(n)
		// procStatus reads kB fields as bytes (<< 10): undo it.
		f.PreemptedPerRequest[name] = float64((ps.nvcs[name]-then.nvcs[name])>>10) / float64(n)
	}
	f.MaitredGCs = ps.gcs - then.gcs
	return f
}
