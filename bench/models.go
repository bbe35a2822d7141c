package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The models scenario's own flags (-maitred is the binary under test, as
// for localwork).
var (
	modelsBaseline = flag.String("baseline", "", "models: a second maitred binary (e.g. main's) run on the same cases, reported side by side")
	modelsRuns     = flag.Int("models-runs", 3, "models: starts per case and binary; the table shows the medians")
)

// modelsCase is one point of the models curve: n models, each with its own
// tokenizer folder (distinct: byte-different copies of the fixture) or all
// naming the same folder.
type modelsCase struct {
	n        int
	distinct bool
}

func (c modelsCase) String() string {
	if c.distinct {
		return fmt.Sprintf("%d models, %d tokenizers", c.n, c.n)
	}
	return fmt.Sprintf("%d models, one tokenizer", c.n)
}

var modelsCases = []modelsCase{{1, false}, {10, false}, {100, false}, {10, true}}

// modelsResult is one start of the gateway: its resident memory once
// /readyz answered 200 (VmRSS, and the peak VmHWM) and the time from
// exec to that answer.
type modelsResult struct {
	rss, hwm int64
	start    time.Duration
}

// modelsScenario measures issue 30's models dimension: the built maitred
// binary (-maitred; built from this module into a temp dir when empty)
// started as its own process, its JSON log written to a file, with 1, 10
// and 100 models naming one tokenizer folder (the qwen3 fixture) and 10
// models each with its own folder (copies of the fixture whose
// tokenizer.json differs by trailing whitespace: the same tokenizer in
// different bytes). One `maitred sim` process serves every model (each
// backend names its served_model, qwen3), counting with the fixture as
// vLLM would, with no generation delay: the start time is the gateway's.
// It reports per case the median over -models-runs starts of the VmRSS
// once /readyz answered 200, the VmHWM, the time from exec to that
// answer, and the VmRSS each model beyond the first adds; -baseline runs
// a second binary (e.g. main's) on the same cases, side by side.
func modelsScenario(bin, baseline string, runs int) error {
	tokDir, dir, bin, err := qwen3Workspace("models", bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	copies, err := tokenizerCopies(tokDir, filepath.Join(dir, "copies"), 10)
	if err != nil {
		return err
	}
	simAddr := freeAddr()
	sim := exec.Command(bin, "sim", "--listen", simAddr, "--model", "qwen3", "--tokenizer", tokDir,
		"--ttft", "0", "--itl", "0", "--max-num-seqs", "100000")
	sim.SysProcAttr, sim.Stdout, sim.Stderr = childAttr(), io.Discard, io.Discard
	if err := sim.Start(); err != nil {
		return err
	}
	defer func() { sim.Process.Kill(); sim.Wait() }()
	if err := awaitStatus200("http://"+simAddr+"/health", 60*time.Second); err != nil {
		return fmt.Errorf("models: the simulator: %w", err)
	}
	bins := []string{bin}
	if baseline != "" {
		bins = append(bins, baseline)
	}
	fmt.Printf("models: maitred serve as its own process (JSON log to a file), one maitred sim serving every model; medians of %d starts\n", runs)
	fmt.Printf("%-26s %-10s %10s %10s %10s %16s\n", "case", "binary", "VmRSS MiB", "VmHWM MiB", "start ms", "MiB/extra model")
	one := make([]int64, len(bins)) // each binary's VmRSS with one model
	for _, c := range modelsCases {
		for bi, b := range bins {
			var rs []modelsResult
			for r := range runs {
				dirs := slices.Repeat([]string{tokDir}, c.n)
				if c.distinct {
					dirs = copies[:c.n]
				}
				res, err := startModels(b, filepath.Join(dir, fmt.Sprintf("run-%d-%d", bi, r)), simAddr, dirs)
				if err != nil {
					return fmt.Errorf("models: %s (%s): %w", c, b, err)
				}
				rs = append(rs, res)
			}
			m := medianModels(rs)
			name := "this"
			if bi == 1 {
				name = "baseline"
			}
			perModel := "-"
			if c.n == 1 {
				one[bi] = m.rss
			} else {
				perModel = fmt.Sprintf("%.2f", mib(m.rss-one[bi])/float64(c.n-1))
			}
			fmt.Printf("%-26s %-10s %10.1f %10.1f %10d %16s\n", c, name, mib(m.rss), mib(m.hwm), m.start.Milliseconds(), perModel)
		}
	}
	return nil
}

// tokenizerCopies writes n copies of the model folder src under dst, each
// tokenizer.json followed by a different number of spaces (JSON allows
// trailing whitespace): n tokenizers that count alike in different bytes.
func tokenizerCopies(src, dst string, n int) ([]string, error) {
	tj, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range n {
		d := filepath.Join(dst, fmt.Sprintf("qwen3-%02d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		b := append(slices.Clip(tj), strings.Repeat(" ", i+1)...)
		if err := os.WriteFile(filepath.Join(d, "tokenizer.json"), b, 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "tokenizer_config.json"), cfg, 0o644); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// startModels starts bin serving one model per folder of dirs, each in
// front of the simulator at simAddr, and measures it once /readyz
// answers 200; it stops the gateway before returning.
func startModels(bin, dir, simAddr string, dirs []string) (modelsResult, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return modelsResult{}, err
	}
	gwAddr := freeAddr()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "listen: %s\nmodels:\n", gwAddr)
	for i, d := range dirs {
		fmt.Fprintf(&cfg, "  - name: m%03d\n    tokenizer: %s\n    backends:\n      - url: http://%s\n        served_model: qwen3\n", i, d, simAddr)
	}
	cfgPath := filepath.Join(dir, "maitred.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return modelsResult{}, err
	}
	logFile, err := os.Create(filepath.Join(dir, "maitred.log"))
	if err != nil {
		return modelsResult{}, err
	}
	defer logFile.Close()
	gw := exec.Command(bin, "serve", "--config", cfgPath)
	gw.SysProcAttr, gw.Stdout, gw.Stderr = childAttr(), logFile, logFile
	t0 := time.Now()
	if err := gw.Start(); err != nil {
		return modelsResult{}, err
	}
	defer func() { gw.Process.Kill(); gw.Wait() }()
	if err := awaitStatus200("http://"+gwAddr+"/readyz", 5*time.Minute); err != nil {
		return modelsResult{}, fmt.Errorf("%w (log: %s)", err, lastLine(logFile.Name()))
	}
	res := modelsResult{start: time.Since(t0)}
	pid := gw.Process.Pid
	if res.rss, err = procStatus(pid, "VmRSS:"); err != nil {
		return res, err
	}
	res.hwm, err = procStatus(pid, "VmHWM:")
	return res, err
}

// lastLine is the last line of a log file, for an error.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// medianModels is the median of each figure over rs, separately.
func medianModels(rs []modelsResult) modelsResult {
	med := func(f func(modelsResult) int64) int64 {
		v := make([]int64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return modelsResult{
		rss:   med(func(r modelsResult) int64 { return r.rss }),
		hwm:   med(func(r modelsResult) int64 { return r.hwm }),
		start: time.Duration(med(func(r modelsResult) int64 { return int64(r.start) })),
	}
}
