package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// benchKey is the i-th generated API key.
func benchKey(i int) string { return fmt.Sprintf("sk-bench-%08d", i) }

// keysFileYAML is a keys_file of n keys (sha256 digests), each with
// limits so that every request is checked against them; gen varies the
// names so that a rewrite is a change.
func keysFileYAML(n, gen int) []byte {
	var b bytes.Buffer
	b.WriteString("keys:\n")
	for i := range n {
		d := sha256.Sum256([]byte(benchKey(i)))
		fmt.Fprintf(&b, "  - name: k%d-%d\n    sha256: %s\n    models: [\"*\"]\n    limits: {requests_per_minute: 100000000, max_concurrent: 100000}\n", i, gen, hex.EncodeToString(d[:]))
	}
	return b.Bytes()
}

// keysFileJSON is keysFileYAML's keys written as JSON, one key a line.
func keysFileJSON(n, gen int) []byte {
	var b bytes.Buffer
	b.WriteString("{\"keys\": [\n")
	for i := range n {
		d := sha256.Sum256([]byte(benchKey(i)))
		sep := ","
		if i == n-1 {
			sep = ""
		}
		fmt.Fprintf(&b, `  {"name": "k%d-%d", "sha256": "%s", "models": ["*"], "limits": {"requests_per_minute": 100000000, "max_concurrent": 100000}}%s`+"\n", i, gen, hex.EncodeToString(d[:]), sep)
	}
	b.WriteString("]}\n")
	return b.Bytes()
}

// authTransport sets one API key on every request.
type authTransport struct {
	key string
	rt  http.RoundTripper
}

func (a authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.key)
	return a.rt.RoundTrip(r)
}

// keysBaseline is a maitred revision measured beside the built one at
// each keys point (the same keys, the same simulator, right after): before
// and after a change in one run.
var keysBaseline = flag.String("keys-baseline", "", "scale: a maitred binary, or a git revision (say HEAD~3) whose maitred is built, measured beside this tree's at each keys point")

// keysColumns are one binary's figures in the keys table.
var keysColumns = []string{"direct p50 us", "maitred +p50 us", "RSS MiB", "B/key RSS", "B/key heap", "reload ms", "reload CPU ms", "reload MiB alloc", "reload GCs",
	"YAML reload ms", "YAML CPU ms", "p99 ms reload", "direct p99 ms", "p99 ms before", "direct p99 before", "max ms reload", "direct max ms"}

// scaleKeysRun is the keys dimension: for each n, the built maitred (and,
// with -keys-baseline, that revision's, right after it) with a keys_file
// of n keys in front of a simulator in this process. Figures: maitred's
// added p50 over direct with the last key (the key check and its limits,
// end to end), RSS and heap in use, both per key above the first point,
// the keys_file's reload (rewritten whole: from the write to the
// "keys_file loaded" log line, which includes up to the 500 ms poll; and
// maitred's CPU, the bytes it allocated and the collections it ran over
// it, idle otherwise) written as JSON and as YAML, and the requests during
// a third reload (JSON): p99 and slowest, against direct's then and both
// p99s just before it. The file at start is JSON.
func scaleKeysRun(e *scaleEnv, ns []int) (*curve, error) {
	bins := []streamsBinary{{name: "maitred", path: e.bin}}
	if bin, err := e.baseline("keys-baseline", *keysBaseline); err != nil {
		return nil, err
	} else if bin != "" {
		bins = append(bins, streamsBinary{name: "baseline", path: bin})
	}
	c := &curve{dim: "API keys (built maitred, keys_file of n sha256 keys with limits; simulator in this process)",
		note:  "target: key check and limits at 100k keys <= 1.5x at 1 key; <= 1 KB per idle key; a 100k-key reload <= 1 s with no request delayed by more than 10 ms",
		xName: "keys",
		charts: []chartSpec{
			{file: "keys-latency.svg", title: "direct p50 and maitred's added p50 by API keys", yLabel: "us"},
			{file: "keys-reload.svg", title: "keys_file reload by API keys", yLabel: "ms"},
		}}
	for _, b := range bins {
		pre := ""
		if b.name != "maitred" {
			pre = b.name + " "
		}
		for _, col := range keysColumns {
			c.cols = append(c.cols, pre+col)
		}
		c.charts[0].cols = append(c.charts[0].cols, pre+"direct p50 us", pre+"maitred +p50 us")
		c.charts[1].cols = append(c.charts[1].cols, pre+"reload ms", pre+"reload CPU ms", pre+"YAML reload ms", pre+"p99 ms reload", pre+"direct p99 ms")
	}
	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: 8, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return nil, err
	}
	defer stopSim()
	base := make([]keysFigures, len(bins))
	baseN := 0
	for i, n := range ns {
		var row []float64
		for bi, b := range bins {
			r, err := keysPoint(e, b, n, simURL)
			if err != nil {
				return nil, fmt.Errorf("%d keys, %s: %w", n, b.name, err)
			}
			perRSS, perHeap := math.NaN(), math.NaN()
			if i == 0 {
				base[bi], baseN = r, n
			} else {
				perRSS = (r.rss - base[bi].rss) / float64(n-baseN)
				perHeap = (r.heap - base[bi].heap) / float64(n-baseN)
			}
			row = append(row, r.directP50, r.addedP50, r.rss/(1<<20), perRSS, perHeap, r.reloadMs, r.reloadCPUms, r.reloadAllocMiB, r.reloadGCs,
				r.yamlReloadMs, r.yamlCPUms, r.p99DuringMs, r.directP99Ms, r.p99BeforeMs, r.directP99BeforeMs, r.maxDuringMs, r.directMaxMs)
		}
		c.add(n, row...)
	}
	return c, nil
}

type keysFigures struct {
	directP50, addedP50, rss, heap float64
	reloadMs, reloadCPUms          float64
	reloadAllocMiB, reloadGCs      float64
	yamlReloadMs, yamlCPUms        float64
	p99DuringMs, directP99Ms       float64
	p99BeforeMs, directP99BeforeMs float64
	maxDuringMs, directMaxMs       float64
}

func keysPoint(e *scaleEnv, b streamsBinary, n int, simURL string) (keysFigures, error) {
	var f keysFigures
	dir, err := e.pointDir(fmt.Sprintf("keys-%d-%s", n, b.name))
	if err != nil {
		return f, err
	}
	keysPath := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keysPath, keysFileJSON(n, 0), 0o644); err != nil {
		return f, err
	}
	admin := freeAddr()
	cfg := fmt.Sprintf("admin_listen: %s\nauth:\n  keys_file: %s\nmodels:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    backends:\n      - url: %s\n", admin, keysPath, simURL)
	pp := ""
	if *pprofOn {
		pp = freeAddr()
		fmt.Fprintf(os.Stderr, "  %s: maitred serves pprof at http://%s/debug/pprof/\n", filepath.Base(dir), pp)
	}
	gw, err := startMaitred(b.path, dir, cfg, pp)
	if err != nil {
		return f, err
	}
	defer gw.stop()
	if *keysTrace != "" {
		// maitred's log beside its trace (with GODEBUG=gctrace=1 in the
		// bench's environment, the collections' lines are in it).
		defer copyFile(gw.log, filepath.Join(*keysTrace, fmt.Sprintf("keys-%d-%s.log", n, b.name)))
	}
	client := &http.Client{Transport: authTransport{key: benchKey(n - 1), rt: poolTransport()}}
	defer client.CloseIdleConnections()
	if f.directP50, f.addedP50, _, err = alternatingP50(client, simURL, gw.url, 400); err != nil {
		return f, err
	}
	time.Sleep(2 * time.Second)
	metricsURL := "http://" + admin + "/metrics"
	f.rss = float64(procRSS(gw.pid))
	f.heap, _ = scrapeMetric(metricsURL, "go_memstats_heap_inuse_bytes")
	// A reload with nothing else running (JSON): its wall time and CPU,
	// the bytes it allocated and the collections it ran; then one under
	// load (JSON): the requests while it ran; then the file written as
	// YAML (last: its garbage would make the runtime's next collection
	// wait longer).
	alloc0, _ := scrapeMetric(metricsURL, "go_memstats_alloc_bytes_total")
	gc0, _ := scrapeMetric(metricsURL, "go_gc_duration_seconds_count")
	if f.reloadMs, f.reloadCPUms, err = timedReload(gw, keysPath, keysFileJSON(n, 2)); err != nil {
		return f, err
	}
	alloc1, _ := scrapeMetric(metricsURL, "go_memstats_alloc_bytes_total")
	gc1, _ := scrapeMetric(metricsURL, "go_gc_duration_seconds_count")
	f.reloadAllocMiB, f.reloadGCs = (alloc1-alloc0)/(1<<20), gc1-gc0
	load := loadAverage()
	traced := traceDuringReload(pp, n, b.name)
	var w reloadWindows
	for r := range *keysReloads {
		if err := w.add(client, simURL, gw, keysPath, keysFileJSON(n, 3+r%2)); err != nil {
			return f, err
		}
	}
	d, err := w.figures()
	if err != nil {
		return f, err
	}
	if err := traced(); err != nil {
		return f, err
	}
	alloc2, _ := scrapeMetric(metricsURL, "go_memstats_alloc_bytes_total")
	gc2, _ := scrapeMetric(metricsURL, "go_gc_duration_seconds_count")
	f.p99DuringMs, f.directP99Ms, f.maxDuringMs, f.directMaxMs = d.p99, d.directP99, d.max, d.directMax
	f.p99BeforeMs, f.directP99BeforeMs = d.p99Before, d.directP99Before
	if f.yamlReloadMs, f.yamlCPUms, err = timedReload(gw, keysPath, keysFileYAML(n, 1)); err != nil {
		return f, err
	}
	fmt.Fprintf(os.Stderr, "  %d keys, %s: reload %.0f ms (CPU %.0f ms, %.1f MiB allocated, %.0f collections; YAML %.0f ms, CPU %.0f ms), requests during a reload p99 %.1f ms, slowest %.1f ms (direct %.1f, %.1f; before it %.1f, direct %.1f; %.1f MiB allocated and %.0f collections, requests included); %d reads refused (a file read while written); load average %s\n",
		n, b.name, f.reloadMs, f.reloadCPUms, f.reloadAllocMiB, f.reloadGCs, f.yamlReloadMs, f.yamlCPUms, d.p99, d.max, d.directP99, d.directMax, d.p99Before, d.directP99Before,
		(alloc2-alloc1)/(1<<20), gc2-gc1, countLogLines(gw.log, `"keys_file refused"`), load)
	return f, nil
}

// keysReloads is how many reloads under load each keys point runs, their
// requests pooled (more reloads: a steadier p99 on a busy machine).
var keysReloads = flag.Int("keys-reloads", 1, "scale: reloads under load per keys point, their requests' latencies pooled")

// keysTrace is a folder the keys dimension copies each point's maitred
// log into and, with -pprof, writes a runtime trace of maitred over its
// reloads under load into.
var keysTrace = flag.String("keys-trace", "", "scale: a folder to copy each keys point's maitred log into (keys-N-BINARY.log; run the bench with GODEBUG=gctrace=1 for the collections) and, with -pprof, to write a runtime trace of maitred over its reloads under load into (keys-N-BINARY.trace; read with go tool trace)")

// traceDuringReload starts a runtime trace of the maitred serving pprof
// on pp (when -keys-trace is set) over the next 3 s, the reload under
// load; the function it returns awaits it and writes it.
func traceDuringReload(pp string, n int, name string) func() error {
	if *keysTrace == "" || pp == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + pp + "/debug/pprof/trace?seconds=3")
		if err != nil {
			done <- err
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err == nil {
			err = os.WriteFile(filepath.Join(*keysTrace, fmt.Sprintf("keys-%d-%s.trace", n, name)), body, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}

// copyFile copies the file at from to the path to (best effort: a figure's
// evidence, not a figure).
func copyFile(from, to string) {
	if b, err := os.ReadFile(from); err == nil {
		os.WriteFile(to, b, 0o644)
	}
}

// timedReload rewrites the keys_file with content and returns the time
// to "keys_file loaded" and maitred's CPU over it, in ms.
func timedReload(gw *proc, path string, content []byte) (wallMs, cpuMs float64, err error) {
	c0, _ := procCPU(gw.pid)
	took, err := reloadKeysWith(gw, path, content)
	if err != nil {
		return 0, 0, err
	}
	c1, _ := procCPU(gw.pid)
	return float64(took.Microseconds()) / 1e3, float64((c1 - c0).Microseconds()) / 1e3, nil
}

// reloadKeysWith rewrites the keys_file with content and waits for
// maitred's log to say it is loaded: the time from the write to the log
// line's timestamp.
func reloadKeysWith(gw *proc, path string, content []byte) (time.Duration, error) {
	seen := countLogLines(gw.log, `"keys_file loaded"`)
	t0 := time.Now()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return 0, err
	}
	deadline := t0.Add(time.Minute)
	for time.Now().Before(deadline) {
		if ts, ok := nthLogTime(gw.log, `"keys_file loaded"`, seen); ok {
			return ts.Sub(t0), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no \"keys_file loaded\" in %s within a minute: %s", gw.log, gw.tail())
}

func countLogLines(path, substr string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(substr))
}

// nthLogTime is the ts of the log's line number n (from 0) holding substr.
func nthLogTime(path, substr string, n int) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), substr) {
			continue
		}
		if n > 0 {
			n--
			continue
		}
		var line struct {
			TS time.Time `json:"ts"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			return time.Time{}, false
		}
		return line.TS, true
	}
	return time.Time{}, false
}

// duringReload is the latencies of requests around reloads, in ms: of
// those sent while one ran (from the write to the log line), and of those
// sent in the 300 ms before the write.
type duringReload struct{ p99, directP99, max, directMax, p99Before, directP99Before float64 }

// reloadWindows is the latencies of requests sent while reloads ran and
// in the 300 ms before each, [maitred, direct], pooled over reloads.
type reloadWindows struct{ during, before [2][]time.Duration }

// add sends a request to maitred and one to direct every 5 ms from 300 ms
// before the keys_file is rewritten with content until 300 ms after the
// log says it is loaded, and pools the latencies of each path's requests
// sent while the reload ran (from the write to the log line; at least 5
// ms) and of those sent before it.
func (w *reloadWindows) add(c *http.Client, direct string, gw *proc, path string, content []byte) error {
	type sample struct {
		at     time.Time
		lat    time.Duration
		direct bool
	}
	var mu sync.Mutex
	var samples []sample
	var failed error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for _, p := range []string{gw.url, direct} {
				wg.Go(func() {
					at := time.Now()
					lat, err := doChat(c, p)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed = err
					}
					samples = append(samples, sample{at, lat, p == direct})
				})
			}
		}
	})
	time.Sleep(300 * time.Millisecond)
	written := time.Now()
	took, err := reloadKeysWith(gw, path, content)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err == nil {
		err = failed
	}
	if err != nil {
		return err
	}
	if took < 5*time.Millisecond {
		took = 5 * time.Millisecond // a 1-key reload: the request sent as it ran
	}
	for _, x := range samples {
		i := 0
		if x.direct {
			i = 1
		}
		switch {
		case x.at.Before(written):
			w.before[i] = append(w.before[i], x.lat)
		case x.at.Before(written.Add(took)):
			w.during[i] = append(w.during[i], x.lat)
		}
	}
	return nil
}

// figures are the windows' p99s and slowest.
func (w *reloadWindows) figures() (duringReload, error) {
	during, before := w.during, w.before
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	for _, l := range [][]time.Duration{during[0], during[1], before[0], before[1]} {
		if len(l) == 0 {
			return duringReload{}, fmt.Errorf("no requests in a window of the reloads")
		}
		slices.Sort(l)
	}
	return duringReload{p99: ms(quantile(during[0], .99)), directP99: ms(quantile(during[1], .99)),
		max: ms(during[0][len(during[0])-1]), directMax: ms(during[1][len(during[1])-1]),
		p99Before: ms(quantile(before[0], .99)), directP99Before: ms(quantile(before[1], .99))}, nil
}
