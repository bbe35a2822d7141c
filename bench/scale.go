package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The scale scenario (issue 30): how maitred's cost grows with each
// dimension of a deployment, one curve per dimension, each point beside
// its baseline measured in the same run, printed as a table and drawn as
// an SVG chart per dimension in -scale-out.
//
//	go run ./bench -scenario scale [-dims backends,keys,streams,waiting,prompt] [-scale-out DIR]
//
// Every dimension but waiting (and the pick line of backends) runs
// maitred as the built binary in its own process; those two are
// in-process microbenchmarks of admission.Pool, labelled so.

var (
	scaleDims     = flag.String("dims", "backends,keys,streams,waiting,prompt", "scale: the dimensions to run, comma-separated")
	scaleOut      = flag.String("scale-out", filepath.Join(os.TempDir(), "maitred-scale"), "scale: the folder the SVG charts are written to")
	scaleBackends = flag.String("scale-backends", "1,8,64,512", "scale: backends per model")
	scaleKeys     = flag.String("scale-keys", "1,1000,100000", "scale: API keys")
	scaleStreams  = flag.String("scale-streams", "100,1000,10000", "scale: open slow streams")
	scaleWaiting  = flag.String("scale-waiting", "10,1000,10000", "scale: waiting requests")
	scalePrompts  = flag.String("scale-prompts", "1000,10000,100000,1000000", "scale: prompt sizes in tokens")
	scaleIdle     = flag.Duration("scale-idle", 10*time.Second, "scale: how long the backends dimension measures the idle maitred's CPU (probes and scrapes)")
)

type scaleOptions struct {
	dims                                     []string
	out                                      string
	backends, keys, streams, waiting, prompt []int
	idle                                     time.Duration
}

func scaleOptionsFromFlags() scaleOptions {
	return scaleOptions{
		dims: strings.Split(*scaleDims, ","), out: *scaleOut, idle: *scaleIdle,
		backends: mustInts(*scaleBackends), keys: mustInts(*scaleKeys), streams: mustInts(*scaleStreams),
		waiting: mustInts(*scaleWaiting), prompt: mustInts(*scalePrompts),
	}
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers, got %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func mustInts(s string) []int {
	v, err := parseInts(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	return v
}

// curve is one dimension's figures: a row per point, a column per
// figure; charts name the columns drawn together.
type curve struct {
	dim    string
	note   string
	xName  string
	cols   []string
	rows   []curveRow
	charts []chartSpec
}

type curveRow struct {
	x    int
	vals []float64 // NaN: not measured
}

// chartSpec draws columns of a curve against x (log scale) on one chart.
type chartSpec struct {
	file, title, yLabel string
	cols                []string
}

func (c *curve) add(x int, vals ...float64) { c.rows = append(c.rows, curveRow{x, vals}) }

func (c *curve) col(name string) []float64 {
	i := slices.Index(c.cols, name)
	out := make([]float64, len(c.rows))
	for k, r := range c.rows {
		out[k] = r.vals[i]
	}
	return out
}

// table renders the curve as text.
func (c *curve) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n== %s ==\n", c.dim)
	if c.note != "" {
		fmt.Fprintf(&b, "%s\n", c.note)
	}
	fmt.Fprintf(&b, "%10s", c.xName)
	for _, h := range c.cols {
		fmt.Fprintf(&b, " %*s", max(12, len(h)), h)
	}
	b.WriteString("\n")
	for _, r := range c.rows {
		fmt.Fprintf(&b, "%10d", r.x)
		for i, v := range r.vals {
			fmt.Fprintf(&b, " %*s", max(12, len(c.cols[i])), fmtFig(v))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// fmtFig prints a figure with about four significant digits.
func fmtFig(v float64) string {
	switch {
	case v != v:
		return "-"
	case v == 0:
		return "0"
	case v >= 1000 || v <= -1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10 || v <= -10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// writeCharts writes the curve's charts into dir and returns their paths.
func (c *curve) writeCharts(dir string) ([]string, error) {
	var paths []string
	xs := make([]float64, len(c.rows))
	for i, r := range c.rows {
		xs[i] = float64(r.x)
	}
	for _, ch := range c.charts {
		var ss []series
		for _, name := range ch.cols {
			ss = append(ss, series{name: name, ys: c.col(name)})
		}
		svg := lineChart(chart{title: ch.title, xLabel: c.xName + " (log scale)", yLabel: ch.yLabel, xs: xs, logX: true, series: ss})
		p := filepath.Join(dir, ch.file)
		if err := os.WriteFile(p, []byte(svg), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// scaleDim is one dimension of the scale scenario.
type scaleDim struct {
	name string
	run  func(*scaleEnv) (*curve, error)
}

// scale runs the dimensions o names, in a fixed order.
func scale(o scaleOptions) error {
	runs := []scaleDim{
		{"waiting", func(e *scaleEnv) (*curve, error) { return scaleWaitingRun(e, o.waiting) }},
		{"backends", func(e *scaleEnv) (*curve, error) { return scaleBackendsRun(e, o.backends, o.idle) }},
		{"keys", func(e *scaleEnv) (*curve, error) { return scaleKeysRun(e, o.keys) }},
		{"streams", func(e *scaleEnv) (*curve, error) { return scaleStreamsRun(e, o.streams) }},
		{"prompt", func(e *scaleEnv) (*curve, error) { return scalePromptRun(e, o.prompt) }},
	}
	for _, d := range o.dims {
		if !slices.ContainsFunc(runs, func(r scaleDim) bool { return r.name == d }) {
			return fmt.Errorf("-dims: unknown dimension %q (backends, keys, streams, waiting, prompt)", d)
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	env, err := newScaleEnv()
	if err != nil {
		return err
	}
	defer env.close()
	for _, r := range runs {
		if !slices.Contains(o.dims, r.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "scale: %s\n", r.name)
		t0 := time.Now()
		c, err := r.run(env)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Print(c.table())
		paths, err := c.writeCharts(o.out)
		if err != nil {
			return err
		}
		fmt.Printf("(%s in %s; charts: %s)\n", r.name, time.Since(t0).Round(time.Second), strings.Join(paths, ", "))
	}
	return nil
}

// baseline is the maitred a -*-baseline flag (named flagName) names: the
// file v names, or else maitred built at the git revision v; "" without
// one.
func (e *scaleEnv) baseline(flagName, v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if st, err := os.Stat(v); err == nil && st.Mode().IsRegular() {
		return v, nil
	}
	bin, err := buildRevision(e.dir, v)
	if err != nil {
		return "", fmt.Errorf("-%s: %w", flagName, err)
	}
	return bin, nil
}

// scaleEnv is what the dimensions share: a temp dir and the built binary.
type scaleEnv struct {
	dir string
	bin string
}

func newScaleEnv() (*scaleEnv, error) {
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "scale: building ./cmd/maitred into %s\n", dir)
	bin, err := buildMaitred(dir, *pprofOn)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &scaleEnv{dir: dir, bin: bin}, nil
}

// start runs the built maitred on cfg in a fresh folder named for the
// point; with -pprof, it serves net/http/pprof on a port it prints.
func (e *scaleEnv) start(point, cfg string) (*proc, error) {
	dir, err := e.pointDir(point)
	if err != nil {
		return nil, err
	}
	return e.startIn(dir, cfg)
}

// startIn is start in dir.
func (e *scaleEnv) startIn(dir, cfg string) (*proc, error) {
	pp := ""
	if *pprofOn {
		pp = freeAddr()
		fmt.Fprintf(os.Stderr, "  %s: maitred serves pprof at http://%s/debug/pprof/\n", filepath.Base(dir), pp)
	}
	return startMaitred(e.bin, dir, cfg, pp)
}

func (e *scaleEnv) close() { os.RemoveAll(e.dir) }

// pointDir is a fresh folder for one point's config and log.
func (e *scaleEnv) pointDir(name string) (string, error) {
	return os.MkdirTemp(e.dir, name+"-")
}
