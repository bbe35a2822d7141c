package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// streamTokens is each slow stream's length: one token a second. At
// thousands of streams on a busy machine, opening them all takes seconds:
// longer streams keep every one open through the measurement (its idle
// growth is read over 3 s once all are open).
var streamTokens = flag.Int("scale-streams-tokens", 12, "scale: each slow stream's tokens, one a second (raise it when opening the streams takes longer than a few seconds: they must all still be open when memory and idle growth are read)")

// streamsDelaysOut, when set, keeps every event's delay once all streams
// are open (when it was read, how late), to see whether the slow ones
// come together (a pause) or spread.
var streamsDelaysOut = flag.Bool("scale-streams-delays", false, "scale: write each event's delay once every stream is open (seconds since then, ms late) to streams-N-NAME-delays.csv in -scale-out")

// streamsRefs are the reference proxies each streams point also runs
// through, in front of the same simulator: what a proxy with no door
// adds on this machine.
var streamsRefs = flag.String("streams-refs", "bare,nginx", "scale: reference proxies each streams point also runs through, comma-separated: bare (a plain httputil.ReverseProxy in its own process), nginx (Debian's, one worker; skipped when not installed); \"\" for none")

// scaleStreamsProto is how the load generator reaches maitred.
var scaleStreamsProto = flag.String("scale-streams-proto", "http1", "scale: how the streams dimension's clients reach maitred: http1 (a connection a stream) or h2c (HTTP/2 cleartext, up to 250 streams a connection; maitred runs with h2c: true). Direct is HTTP/1.1 either way, as vLLM speaks")

// scaleStreamsRun is the open-streams dimension: for each n, n slow
// streams (one token a second, streamTokens of them) held open at once,
// first straight to the simulator (in a process of its own, stamping each
// event as it flushes it), then through the built maitred and, with
// -streams-baseline, through that revision's, over HTTP/1.1 or h2c
// (-scale-streams-proto). Figures: maitred's RSS and goroutines (its
// /metrics go_goroutines) per open stream above its idle level, the
// goroutines' growth over 3 idle seconds with every stream open, and each
// event's delay (simulator flush to client read), p99 direct and through
// maitred.
func scaleStreamsRun(e *scaleEnv, ns []int) (*curve, error) {
	h2c := false
	switch *scaleStreamsProto {
	case "http1":
	case "h2c":
		h2c = true
	default:
		return nil, fmt.Errorf("-scale-streams-proto: want http1 or h2c, got %q", *scaleStreamsProto)
	}
	bins := []streamsBinary{{name: "maitred", path: e.bin}}
	if bin, err := e.baseline("streams-baseline", *streamsBaseline); err != nil {
		return nil, err
	} else if bin != "" {
		bins = append(bins, streamsBinary{name: "baseline", path: bin})
	}
	c := &curve{dim: fmt.Sprintf("open streams (built maitred, clients over %s; slow streams of %d tokens, one a second, started evenly over %s; simulator in its own process, clients in this one)", *scaleStreamsProto, *streamTokens, streamsSpread),
		note:  "target: 10k slow streams with <= 32 KiB each above direct, no goroutine growth per idle second, added event delay p99 <= 5 ms",
		xName: "streams", cols: []string{"direct p99 ms", "direct open p99 ms", "direct CPU us/event"},
		charts: []chartSpec{
			{file: "streams-memory.svg", title: "maitred's memory per open stream", yLabel: "KiB per stream"},
			{file: "streams-delay.svg", title: "event delay p99, direct and through maitred", yLabel: "ms", cols: []string{"direct p99 ms"}},
		}}
	for _, b := range bins {
		pre := ""
		if b.name != "maitred" {
			pre = b.name + " "
		}
		c.cols = append(c.cols, pre+"KiB/stream", pre+"heap KiB/stream", pre+"stack KiB/stream", pre+"goroutines/stream", pre+"goroutines +/s", pre+"maitred p99 ms", pre+"added p99 ms", pre+"open added p99 ms", pre+"CPU us/event", pre+"all CPU us/event")
		c.charts[0].cols = append(c.charts[0].cols, pre+"KiB/stream")
		c.charts[1].cols = append(c.charts[1].cols, pre+"maitred p99 ms")
	}
	refs, err := streamsRefList(*streamsRefs)
	if err != nil {
		return nil, err
	}
	for _, r := range refs {
		c.cols = append(c.cols, r+" KiB/stream", r+" open p99 ms", r+" open added p99 ms", r+" CPU us/event")
	}
	limit := raiseOpenFiles(uint64(2*slicesMax(ns) + 1000))
	// Each stream holds a socket in the simulator's process and, direct,
	// one in this one; through maitred over HTTP/1.1 two in maitred
	// (client and backend), over h2c one (the clients' connections carry
	// up to 250 streams each).
	most := int(limit - 1000)
	if !h2c {
		most /= 2
	}
	if slicesMax(ns) > most {
		fmt.Fprintf(os.Stderr, "  open files are limited to %d here (RLIMIT_NOFILE, not raisable): streams capped at %d\n", limit, most)
		for i := range ns {
			ns[i] = min(ns[i], most)
		}
		ns = slices.Compact(ns)
	}
	simProc, err := startStreamsSim()
	if err != nil {
		return nil, fmt.Errorf("streams simulator: %w", err)
	}
	defer simProc.stop()
	simURL := simProc.url
	for _, n := range ns {
		// No admission on the simulator's scraped queue (its scheduler
		// shows thousands waiting for a moment while they all open on a
		// busy machine; the streams would then queue past queue_timeout):
		// the point measures open streams, not the queue.
		cfg := fmt.Sprintf("max_connections: %d\nsaturated_waiting: 0\nmodels:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    queue_size: %d\n    queue_timeout: 120s\n    backends:\n      - url: %s\n", 2*n+100, n, simURL)
		if h2c {
			cfg = "h2c: true\n" + cfg
		}
		fmt.Fprintf(os.Stderr, "  %d streams: load average %s\n", n, loadAverage())
		direct, err := holdSlowStreams(simURL, simURL, n, false, nil, streamsCPU{simPID: simProc.pid}, delaysFile(n, "direct"))
		if err != nil {
			return nil, fmt.Errorf("%d streams direct: %w", n, err)
		}
		row := []float64{direct.p99ms, direct.steadyP99ms, direct.cpu.total()}
		fmt.Fprintf(os.Stderr, "  %d streams direct: CPU per event %s\n", n, direct.cpu)
		for _, b := range bins {
			f, err := streamsThrough(b, n, cfg, simURL, simProc.pid, h2c)
			if err != nil {
				return nil, err
			}
			row = append(row, f.kib, f.heap, f.stack, f.gor, f.gorGrowth, f.p99ms, f.p99ms-direct.p99ms, f.steadyP99ms-direct.steadyP99ms, f.cpu.maitred, f.cpu.total())
			fmt.Fprintf(os.Stderr, "  %d streams, %s over %s: %.1f KiB RSS (heap %.1f, stacks %.1f) and %.2f goroutines each, %+.2f goroutines/s idle, %.0f client connections; event delay p99 %.2f ms direct, %.2f through it, %+.2f added (%d events); once all are open %.2f and %.2f, %+.2f added; load average %s\n",
				n, b.name, *scaleStreamsProto, f.kib, f.heap, f.stack, f.gor, f.gorGrowth, f.conns, direct.p99ms, f.p99ms, f.p99ms-direct.p99ms, f.events,
				direct.steadyP99ms, f.steadyP99ms, f.steadyP99ms-direct.steadyP99ms, loadAverage())
			fmt.Fprintf(os.Stderr, "  %d streams, %s: CPU per event %s\n", n, b.name, f.cpu)
		}
		for _, r := range refs {
			f, err := streamsThroughRef(r, n, simURL, simProc.pid, h2c)
			if err != nil {
				// A reference is a comparison, not the point: its
				// columns stay empty and the run goes on.
				fmt.Fprintf(os.Stderr, "  %d streams, %s: %v (its figures left out)\n", n, r, err)
				nan := math.NaN()
				row = append(row, nan, nan, nan, nan)
				continue
			}
			row = append(row, f.kib, f.steadyP99ms, f.steadyP99ms-direct.steadyP99ms, f.cpu.maitred)
			fmt.Fprintf(os.Stderr, "  %d streams, %s over %s: %.1f KiB RSS each; event delay p99 once all are open %.2f direct, %.2f through it, %+.2f added; CPU per event %s (its own under \"maitred\"); load average %s\n",
				n, r, *scaleStreamsProto, f.kib, direct.steadyP99ms, f.steadyP99ms, f.steadyP99ms-direct.steadyP99ms, f.cpu, loadAverage())
		}
		c.add(n, row...)
	}
	return c, nil
}

// delaysFile is where point n's event delays through name go, or ""
// without -scale-streams-delays.
func delaysFile(n int, name string) string {
	if !*streamsDelaysOut {
		return ""
	}
	os.MkdirAll(*scaleOut, 0o755)
	return filepath.Join(*scaleOut, fmt.Sprintf("streams-%d-%s-delays.csv", n, name))
}

// streamsBinary is a maitred binary a streams point runs through: the
// one built from this tree and, with -streams-baseline, another (say,
// built from an earlier commit) measured beside it in the same run.
type streamsBinary struct{ name, path string }

var streamsBaseline = flag.String("streams-baseline", "", "scale: a maitred binary, or a git revision (say HEAD~3) whose maitred is built, measured beside this tree's at each streams point")

// buildRevision builds maitred as it was at the git revision rev (its
// tree exported into a folder under dir), with the pprof overlay when
// -pprof is set, and returns the binary's path.
func buildRevision(dir, rev string) (string, error) {
	root := fixtures.Root()
	if root == "" {
		return "", fmt.Errorf("run from the repository")
	}
	src, err := os.MkdirTemp(dir, "baseline-")
	if err != nil {
		return "", err
	}
	archive := exec.Command("git", "-C", root, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin, archive.Stderr, untar.Stderr = pipe, os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return "", fmt.Errorf("git archive %s: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("tar: %w", err)
	}
	fmt.Fprintf(os.Stderr, "scale: building maitred at %s\n", rev)
	return buildMaitredFrom(src, src, *pprofOn)
}

// streamsSpread is how long a point takes to open its streams: evenly
// over more than a second, so that their events (one a second each) come
// evenly too, not in bursts of every stream at once.
const streamsSpread = 1500 * time.Millisecond

// streamsMemoryLimit bounds the load generator and the streams simulator,
// which run without collections below it (holdSlowStreams, streamsSim):
// their pauses are not maitred's delay.
const streamsMemoryLimit = 4 << 30

// streamsThrough runs one point through binary b: n slow streams held
// open through it, its memory and goroutines read with every stream open.
func streamsThrough(b streamsBinary, n int, cfg, simURL string, simPID int, h2c bool) (streamsResult, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("streams-%d-%s-", n, b.name))
	if err != nil {
		return streamsResult{}, err
	}
	defer os.RemoveAll(dir)
	pp := ""
	if *pprofOn {
		// To see the per-stream allocations one by one in the profile,
		// run with GODEBUG=memprofilerate=512 (the child inherits it).
		pp = freeAddr()
		fmt.Fprintf(os.Stderr, "  streams-%d %s: pprof at http://%s/debug/pprof/ (heap profile saved with every stream open)\n", n, b.name, pp)
	}
	gw, err := startMaitred(b.path, dir, cfg, pp)
	if err != nil {
		return streamsResult{}, err
	}
	var heapOut string
	if pp != "" {
		heapOut = filepath.Join(*scaleOut, fmt.Sprintf("streams-%d-%s-heap.pb.gz", n, b.name))
	}
	metrics := gw.url + "/metrics"
	cpu := streamsCPU{simPID: simPID, maitredPID: gw.pid, pprof: pp, metrics: metrics}
	if pp != "" {
		cpu.profileOut = filepath.Join(*scaleOut, fmt.Sprintf("streams-%d-%s-cpu.pb.gz", n, b.name))
	}
	f, err := holdSlowStreams(gw.url, simURL, n, h2c, &streamsProbe{pid: gw.pid, metrics: metrics, pprof: pp, heapOut: heapOut}, cpu, delaysFile(n, b.name))
	gw.stop()
	if err != nil {
		// maitred's own account of it: its log goes with its folder.
		return streamsResult{}, fmt.Errorf("%d streams through %s: %w; its last warnings and errors: %s", n, b.name, err, gw.problems())
	}
	per := func(open, idle float64) float64 { return (open - idle) / float64(n) / 1024 }
	return streamsResult{streamsFigures: f,
		kib: per(f.rssOpen, f.rssIdle), heap: per(f.heapOpen, f.heapIdle), stack: per(f.stackOpen, f.stackIdle),
		gor: (f.gorOpen - f.gorIdle) / float64(n)}, nil
}

// streamsRefList parses -streams-refs, leaving nginx out (said once) when
// it is not installed.
func streamsRefList(v string) ([]string, error) {
	var refs []string
	for r := range strings.SplitSeq(v, ",") {
		switch r = strings.TrimSpace(r); r {
		case "":
		case "bare":
			refs = append(refs, r)
		case "nginx":
			if _, err := os.Stat(nginxBin); err != nil {
				fmt.Fprintf(os.Stderr, "  -streams-refs: nginx is not installed (%s): left out\n", nginxBin)
				continue
			}
			refs = append(refs, r)
		default:
			return nil, fmt.Errorf("-streams-refs: want bare or nginx, got %q", r)
		}
	}
	return refs, nil
}

// streamsThroughRef runs one point through the reference proxy ref
// (bare or nginx) in front of the simulator at simURL: its delay, its
// CPU per event (under cpuPerEvent.maitred) and its RSS per stream (a
// Go proxy's process; nginx's worker).
func streamsThroughRef(ref string, n int, simURL string, simPID int, h2c bool) (streamsResult, error) {
	var base string
	var pid int
	var stop func()
	switch ref {
	case "bare":
		p, err := startBareProxy(simURL, h2c)
		if err != nil {
			return streamsResult{}, fmt.Errorf("bare proxy: %w", err)
		}
		base, pid, stop = p.url, p.pid, p.stop
	case "nginx":
		u, err := url.Parse(simURL)
		if err != nil {
			return streamsResult{}, err
		}
		// Connections: one upstream a stream, and the clients' (one a
		// stream over HTTP/1.1; over h2c, up to 128 streams each).
		conns := 2*n + 1000
		if h2c {
			conns = n + 2000
		}
		ng, ok, err := startNginx(nginxBin, u.Host, "1", nginxOptions{h2c: h2c, conns: conns})
		if err != nil || !ok {
			return streamsResult{}, fmt.Errorf("nginx: %v", err)
		}
		base, stop = ng.url, ng.stop
		if pid = childPID(ng.pid); pid == 0 {
			stop()
			return streamsResult{}, fmt.Errorf("nginx: no worker under its master (%d)", ng.pid)
		}
	}
	f, err := holdSlowStreams(base, simURL, n, h2c, &streamsProbe{pid: pid}, streamsCPU{simPID: simPID, maitredPID: pid}, delaysFile(n, ref))
	stop()
	if err != nil {
		return streamsResult{}, fmt.Errorf("%d streams through %s: %w", n, ref, err)
	}
	return streamsResult{streamsFigures: f, kib: (f.rssOpen - f.rssIdle) / float64(n) / 1024}, nil
}

// streamsResult is a point's figures through one binary, per stream.
type streamsResult struct {
	streamsFigures
	kib, heap, stack, gor float64
}

type streamsFigures struct {
	rssIdle, rssOpen, gorIdle, gorOpen, gorGrowth float64
	conns                                         float64 // maitred's client connections with every stream open
	heapIdle, heapOpen, stackIdle, stackOpen      float64
	p99ms                                         float64
	// steadyP99ms is the p99 of the events read once every stream was
	// open (a second after the last one's first event): the delay of
	// an idle replica's open streams, without the door work of opening.
	steadyP99ms float64
	events      int
	cpu         cpuPerEvent // over a window with every stream open
}

// holdSlowStreams opens n slow streams to base (over h2c when set),
// evenly over streamsSpread (a listen backlog is finite, and events a
// second apart then come evenly), and reads each to its end, recording
// when each event came; at the end it takes the simulator's (at simURL)
// flush times and figures each event's delay. gw, when set, is maitred:
// its memory (RSS, and the Go runtime's heap and stacks in use from its
// /metrics) and goroutines are read idle, then with every stream open,
// and the goroutines again 3 s later.
func holdSlowStreams(base, simURL string, n int, h2c bool, gw *streamsProbe, cpu streamsCPU, delaysOut string) (streamsFigures, error) {
	var f streamsFigures
	// The load generator's own collections (its heap holds 10,000
	// streams' reads) would pause its reads, and count as delay, through
	// maitred and direct alike: it runs without them while it holds the
	// streams, within a memory limit that still collects if it must.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(streamsMemoryLimit))
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	tr := poolTransport()
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := fmt.Appendf(nil, `{"model":"demo","messages":[{"role":"user","content":"Count."}],"max_tokens":%d,"stream":true}`, *streamTokens)
	if gw != nil {
		// One stream first, read to its end: what the first request
		// builds once (the tokenizer's lookup tables, pools) is the
		// replica's, not any stream's.
		warm := `{"model":"demo","messages":[{"role":"user","content":"Count."}],"max_tokens":2,"stream":true}`
		if _, err := doPost(client, base, []byte(warm)); err != nil {
			return f, fmt.Errorf("warm-up stream: %w", err)
		}
		f.rssIdle, f.heapIdle, f.stackIdle, f.gorIdle = gw.read()
	}
	var mu sync.Mutex
	var reads []streamReads
	var steadyFrom atomic.Int64 // unix ns; set once every stream is open
	var started atomic.Int64
	var failed atomic.Int64
	var ended atomic.Int64 // streams read to their end
	var cut atomic.Int64   // of those, streams that did not end with [DONE]
	var firstCut atomic.Pointer[error]
	var firstErr atomic.Pointer[error] // an atomic.Value would panic on a second error type
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		if due := t0.Add(streamsSpread * time.Duration(i) / time.Duration(n)); time.Until(due) > time.Millisecond {
			time.Sleep(time.Until(due))
		}
		wg.Go(func() {
			id := "s" + strconv.FormatInt(benchID.Add(1), 10)
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Bench-Id", id)
			res, err := client.Do(req)
			if err != nil || res.StatusCode != 200 {
				if err == nil {
					err = fmt.Errorf("status %d", res.StatusCode)
					res.Body.Close()
				}
				firstErr.CompareAndSwap(nil, &err)
				failed.Add(1)
				started.Add(1)
				return
			}
			defer res.Body.Close()
			body := &streamEnd{r: res.Body}
			recv := readEventsNotify(body, 4<<10, func() { started.Add(1) })
			ended.Add(1)
			if err := body.whole(); err != nil {
				firstCut.CompareAndSwap(nil, &err)
				cut.Add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			reads = append(reads, streamReads{id: id, recv: recv})
		})
	}
	for started.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	steadyFrom.Store(time.Now().Add(time.Second).UnixNano())
	if gw != nil {
		time.Sleep(time.Second)
		f.rssOpen, f.heapOpen, f.stackOpen, f.gorOpen = gw.read()
		if gw.metrics != "" {
			f.conns, _ = scrapeMetric(gw.metrics, "maitred_client_connections")
			gw.saveHeap()
			time.Sleep(3 * time.Second)
			later, _ := scrapeMetric(gw.metrics, "go_goroutines")
			f.gorGrowth = (later - f.gorOpen) / 3
		}
		if e := ended.Load(); e > 0 {
			fmt.Fprintf(os.Stderr, "  warning: %d of %d streams had ended before the open figures were all read: raise -scale-streams-tokens\n", e, n)
		}
	}
	// The CPU per event, over a window that ends before the first stream
	// (opened at t0, an event a second) does.
	win := cpu.measure(t0.Add(time.Duration(*streamTokens-3) * time.Second))
	wg.Wait()
	if failed.Load() > 0 {
		return f, fmt.Errorf("%d of %d streams failed: %v", failed.Load(), n, *firstErr.Load())
	}
	if c := cut.Load(); c > 0 {
		fmt.Fprintf(os.Stderr, "  warning: %d of %d streams ended without their [DONE] (the first: %v)\n", c, n, *firstCut.Load())
	}
	sent, err := fetchStamps(simURL)
	if err != nil {
		return f, err
	}
	var delays, steady []time.Duration
	var csv []byte
	from := time.Unix(0, steadyFrom.Load())
	for _, r := range reads {
		delays = append(delays, eventDelays(sent[r.id], r.recv, 100*time.Millisecond)...)
		if late := slices.IndexFunc(r.recv, func(t time.Time) bool { return t.After(from) }); late >= 0 {
			d := eventDelays(sent[r.id], r.recv[late:], 100*time.Millisecond)
			steady = append(steady, d...)
			if delaysOut != "" {
				// eventDelays leaves out only events before any flush,
				// which come first: the delays are the last reads'.
				for i, t := range r.recv[len(r.recv)-len(d):] {
					csv = fmt.Appendf(csv, "%.3f,%.3f\n", t.Sub(from).Seconds(), float64(d[i].Microseconds())/1e3)
				}
			}
		}
	}
	if delaysOut != "" {
		if err := os.WriteFile(delaysOut, append([]byte("seconds,delay_ms\n"), csv...), 0o644); err != nil {
			return f, err
		}
		fmt.Fprintf(os.Stderr, "  event delays: %s\n", delaysOut)
	}
	slices.Sort(delays)
	f.p99ms = float64(quantile(delays, .99).Microseconds()) / 1e3
	slices.Sort(steady)
	f.steadyP99ms = float64(quantile(steady, .99).Microseconds()) / 1e3
	f.events = len(delays)
	f.cpu = win.perEvent(reads)
	return f, nil
}

// streamEnd reads a stream's body, keeping its last bytes and how its
// reading ended: whole once it ended cleanly after "data: [DONE]".
type streamEnd struct {
	r    io.Reader
	last []byte
	err  error
}

func (s *streamEnd) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.last = append(s.last, p[:n]...)
	if k := len(s.last) - 64; k > 0 {
		s.last = s.last[:copy(s.last, s.last[k:])]
	}
	if err != nil {
		s.err = err
	}
	return n, err
}

// whole is nil for a stream that ended cleanly after its [DONE], else
// what cut it.
func (s *streamEnd) whole() error {
	switch {
	case s.err != nil && s.err != io.EOF:
		return s.err
	case !bytes.HasSuffix(s.last, []byte("data: [DONE]\n\n")):
		return fmt.Errorf("it ended after %q", s.last)
	}
	return nil
}

// streamReads is one stream's events as the client read them.
type streamReads struct {
	id   string
	recv []time.Time
}

// loadAverage is the machine's load average (1, 5, 15 minutes), as
// /proc/loadavg gives it, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// streamsProbe is the proxy under a streams point: its process (pid),
// maitred's metrics (its /metrics URL; "" for a reference proxy, whose
// RSS alone is read) and, when built with -pprof, its profiles (heapOut,
// when not "", is where its heap profile goes with every stream open).
type streamsProbe struct {
	pid            int
	metrics        string
	pprof, heapOut string
}

// read returns maitred's RSS, the Go heap and stacks in use, and its
// goroutines; with -pprof, right after a collection.
func (p *streamsProbe) read() (rss, heap, stack, goroutines float64) {
	if p.pprof != "" {
		// Two collections first (the heap profile's gc=1), so that the
		// heap is what is live, not the garbage of whenever the last one
		// ran nor the pools' spares (a sync.Pool keeps them one more).
		for range 2 {
			if res, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1"); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}
	rss = float64(procRSS(p.pid))
	if p.metrics == "" {
		return
	}
	v := make([]float64, 3)
	scrapeMetrics(p.metrics, []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines"}, v)
	return rss, v[0], v[1], v[2]
}

// saveHeap writes maitred's heap profile to heapOut (go tool pprof
// -sample_index=inuse_space reads it), when asked for.
func (p *streamsProbe) saveHeap() {
	if p.heapOut == "" || !saveURL("heap profile", "http://"+p.pprof+"/debug/pprof/heap?gc=1", p.heapOut) {
		return
	}
	// The goroutines' stacks (where each waits) beside it.
	saveURL("goroutines", "http://"+p.pprof+"/debug/pprof/goroutine?debug=1", strings.TrimSuffix(p.heapOut, "-heap.pb.gz")+"-goroutines.txt")
}

// eventDelays matches each event read (recv) to the simulator's last
// flush at or before it, give or take slack (sent, both in order), and
// returns the delays: with flushes a second apart, a flush that carried
// two events still pairs with its own flush, and so does an event read
// just before its flush was stamped (the stamp is taken once Flush
// returns; the delay is then slightly negative). Events read before any
// flush are left out.
func eventDelays(sent, recv []time.Time, slack time.Duration) []time.Duration {
	var out []time.Duration
	j := -1
	for _, r := range recv {
		for j+1 < len(sent) && !sent[j+1].After(r.Add(slack)) {
			j++
		}
		if j >= 0 {
			out = append(out, r.Sub(sent[j]))
		}
	}
	return out
}

// raiseOpenFiles lifts this process's open-file limit (inherited by the
// processes it starts) to want, or as far as it may, and returns it.
func raiseOpenFiles(want uint64) uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return want
	}
	if l.Cur >= want {
		return l.Cur
	}
	n := syscall.Rlimit{Cur: want, Max: max(want, l.Max)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n) == nil {
		return want
	}
	n = syscall.Rlimit{Cur: l.Max, Max: l.Max}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &n) == nil {
		return l.Max
	}
	return l.Cur
}

// readEventsNotify returns the time each SSE event ("\n\n"-terminated)
// was read, reading bufSize bytes at a time, and calls first (when not
// nil) once, at the first event or at the end when there was none.
func readEventsNotify(r io.Reader, bufSize int, first func()) []time.Time {
	var times []time.Time
	buf := make([]byte, bufSize)
	var pending []byte
	notified := first == nil
	defer func() {
		if !notified {
			first()
		}
	}()
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
			if !notified {
				notified = true
				first()
			}
		}
		if err != nil {
			return times
		}
	}
}
