package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// streamTokens is each slow stream's length: one token a second.
const streamTokens = 12

// scaleStreamsRun is the open-streams dimension: for each n, n slow
// streams (one token a second, streamTokens of them) held open at once,
// first straight to the simulator (in this process, stamping each event
// as it flushes it), then through the built maitred. Figures: maitred's
// RSS and goroutines (its /metrics go_goroutines) per open stream above
// its idle level, the goroutines' growth over 3 idle seconds with every
// stream open, and each event's delay (simulator flush to client read),
// p99 direct and through maitred.
func scaleStreamsRun(e *scaleEnv, ns []int) (*curve, error) {
	c := &curve{dim: fmt.Sprintf("open streams (built maitred; slow streams of %d tokens, one a second; simulator and clients in this process)", streamTokens),
		note:  "target: 10k slow streams with <= 32 KiB each above direct, no goroutine growth per idle second, added event delay p99 <= 5 ms",
		xName: "streams", cols: []string{"KiB/stream", "heap KiB/stream", "stack KiB/stream", "goroutines/stream", "goroutines +/s", "direct p99 ms", "maitred p99 ms", "added p99 ms"},
		charts: []chartSpec{
			{file: "streams-memory.svg", title: "maitred's memory per open stream", yLabel: "KiB per stream", cols: []string{"KiB/stream"}},
			{file: "streams-delay.svg", title: "event delay p99, direct and through maitred", yLabel: "ms", cols: []string{"direct p99 ms", "maitred p99 ms"}},
		}}
	limit := raiseOpenFiles(uint64(5*slicesMax(ns) + 1000))
	// Each stream through maitred holds two sockets in maitred and,
	// direct, two in this process (client and simulator).
	if most := int(limit-1000) / 2; slicesMax(ns) > most {
		fmt.Fprintf(os.Stderr, "  open files are limited to %d here (RLIMIT_NOFILE, not raisable): streams capped at %d\n", limit, most)
		for i := range ns {
			ns[i] = min(ns[i], most)
		}
		ns = slices.Compact(ns)
	}
	stamps := &stampBook{m: map[string][]time.Time{}}
	backend := sim.New(sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: streamTokens, ITL: time.Second, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(stamps.wrap(backend.Handler()))
	if err != nil {
		return nil, err
	}
	defer stopSim()
	for _, n := range ns {
		dir, err := e.pointDir(fmt.Sprintf("streams-%d", n))
		if err != nil {
			return nil, err
		}
		cfg := fmt.Sprintf("max_connections: %d\nmodels:\n  - name: demo\n    tokenizer: builtin:demo\n    tokenizer_check: off\n    queue_size: %d\n    backends:\n      - url: %s\n", 2*n+100, n, simURL)
		pp := ""
		if *pprofOn {
			pp = freeAddr()
			// Every 512th byte sampled: the per-stream allocations show
			// one by one (the default samples one in 512 KiB).
			os.Setenv("GODEBUG", "memprofilerate=512")
			fmt.Fprintf(os.Stderr, "  streams-%d: maitred serves pprof at http://%s/debug/pprof/ (heap profile saved with every stream open)\n", n, pp)
		}
		gw, err := startMaitred(e.bin, dir, cfg, pp)
		if err != nil {
			return nil, err
		}
		direct, err := holdSlowStreams(simURL, n, stamps, nil)
		if err != nil {
			gw.stop()
			return nil, fmt.Errorf("%d streams direct: %w", n, err)
		}
		var heapOut string
		if pp != "" {
			heapOut = filepath.Join(*scaleOut, fmt.Sprintf("streams-%d-heap.pb.gz", n))
		}
		through, err := holdSlowStreams(gw.url, n, stamps, &streamsProbe{gw: gw, pprof: pp, heapOut: heapOut})
		gw.stop()
		if err != nil {
			return nil, fmt.Errorf("%d streams through maitred: %w", n, err)
		}
		per := func(open, idle float64) float64 { return (open - idle) / float64(n) / 1024 }
		kib, heap, stack := per(through.rssOpen, through.rssIdle), per(through.heapOpen, through.heapIdle), per(through.stackOpen, through.stackIdle)
		gor := (through.gorOpen - through.gorIdle) / float64(n)
		c.add(n, kib, heap, stack, gor, through.gorGrowth, direct.p99ms, through.p99ms, through.p99ms-direct.p99ms)
		fmt.Fprintf(os.Stderr, "  %d streams: %.1f KiB RSS (heap %.1f, stacks %.1f) and %.2f goroutines each, event delay p99 %.2f ms direct, %.2f through maitred (%d events)\n",
			n, kib, heap, stack, gor, direct.p99ms, through.p99ms, through.events)
	}
	return c, nil
}

type streamsFigures struct {
	rssIdle, rssOpen, gorIdle, gorOpen, gorGrowth float64
	heapIdle, heapOpen, stackIdle, stackOpen      float64
	p99ms                                         float64
	events                                        int
}

// holdSlowStreams opens n slow streams to base, in batches (a listen
// backlog is finite), and reads each to its end, recording each event's
// delay. gw, when set, is maitred: its memory (RSS, and the Go runtime's
// heap and stacks in use from its /metrics) and goroutines are read idle,
// then with every stream open, and the goroutines again 3 s later.
func holdSlowStreams(base string, n int, book *stampBook, gw *streamsProbe) (streamsFigures, error) {
	var f streamsFigures
	tr := poolTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	if gw != nil {
		f.rssIdle, f.heapIdle, f.stackIdle, f.gorIdle = gw.read()
	}
	body := fmt.Appendf(nil, `{"model":"demo","messages":[{"role":"user","content":"Count."}],"max_tokens":%d,"stream":true}`, streamTokens)
	var mu sync.Mutex
	var delays []time.Duration
	var started atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range n {
		if i%500 == 499 {
			time.Sleep(50 * time.Millisecond)
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
				firstErr.CompareAndSwap(nil, err)
				failed.Add(1)
				started.Add(1)
				return
			}
			defer res.Body.Close()
			recv := readEventsNotify(res.Body, 4<<10, func() { started.Add(1) })
			sent := book.take(id)
			d := eventDelays(sent, recv, 100*time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			delays = append(delays, d...)
		})
	}
	for started.Load() < int64(n) {
		time.Sleep(10 * time.Millisecond)
	}
	if gw != nil {
		time.Sleep(time.Second)
		f.rssOpen, f.heapOpen, f.stackOpen, f.gorOpen = gw.read()
		gw.saveHeap()
		time.Sleep(3 * time.Second)
		later, _ := scrapeMetric(gw.gw.url+"/metrics", "go_goroutines")
		f.gorGrowth = (later - f.gorOpen) / 3
	}
	wg.Wait()
	if failed.Load() > 0 {
		return f, fmt.Errorf("%d of %d streams failed: %v", failed.Load(), n, firstErr.Load())
	}
	slices.Sort(delays)
	f.p99ms = float64(quantile(delays, .99).Microseconds()) / 1e3
	f.events = len(delays)
	return f, nil
}

// streamsProbe is the built maitred under a streams point: where it
// serves its metrics and, when built with -pprof, its profiles (heapOut,
// when not "", is where its heap profile goes with every stream open).
type streamsProbe struct {
	gw             *proc
	pprof, heapOut string
}

// read returns maitred's RSS, the Go heap and stacks in use, and its
// goroutines.
func (p *streamsProbe) read() (rss, heap, stack, goroutines float64) {
	rss = float64(procRSS(p.gw.pid))
	heap, _ = scrapeMetric(p.gw.url+"/metrics", "go_memstats_heap_inuse_bytes")
	stack, _ = scrapeMetric(p.gw.url+"/metrics", "go_memstats_stack_inuse_bytes")
	goroutines, _ = scrapeMetric(p.gw.url+"/metrics", "go_goroutines")
	return
}

// saveHeap writes maitred's heap profile to heapOut (go tool pprof
// -sample_index=inuse_space reads it), when asked for.
func (p *streamsProbe) saveHeap() {
	if p.heapOut == "" {
		return
	}
	res, err := http.Get("http://" + p.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		fmt.Fprintln(os.Stderr, "  heap profile:", err)
		return
	}
	defer res.Body.Close()
	f, err := os.Create(p.heapOut)
	if err != nil {
		fmt.Fprintln(os.Stderr, "  heap profile:", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, res.Body); err == nil {
		fmt.Fprintln(os.Stderr, "  heap profile:", p.heapOut)
	}
	// The goroutines' stacks (where each waits) beside it.
	if res, err := http.Get("http://" + p.pprof + "/debug/pprof/goroutine?debug=1"); err == nil {
		defer res.Body.Close()
		if g, err := os.Create(strings.TrimSuffix(p.heapOut, "-heap.pb.gz") + "-goroutines.txt"); err == nil {
			defer g.Close()
			io.Copy(g, res.Body)
		}
	}
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
