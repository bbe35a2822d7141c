package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// soak holds n SSE streams open at once, first straight to the simulator
// and then through the gateway, and reports what each open stream costs in
// memory (heap and stacks in use, after a GC, with every stream open) and
// in goroutines, and whether goroutines return to their baseline once the
// streams end. The gateway's own cost per stream is the difference between
// the two paths, since client and simulator are in this process too.
func soak(n int, hold time.Duration) error {
	const itl = 100 * time.Millisecond
	tokens := int(hold / itl)
	backend := sim.New(sim.Config{Model: "demo", OutputTokens: tokens, ITL: itl, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return err
	}
	defer stopSim()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "demo", QueueSize: n, Backends: []config.BackendConfig{{URL: simURL, MaxInFlight: 2 * n}}}}
	gwURL, gwTransport, stopGW, err := serveGateway(cfg, zap.NewNop())
	if err != nil {
		return err
	}
	defer stopGW()

	fmt.Printf("soak: %d streams held open for %s (%d tokens, %s apart), direct then through maitred\n", n, hold, tokens, itl)
	var perStream [2]float64
	// Idle keep-alive connections are pooled, not leaked: both paths close
	// theirs once the streams end, so goroutines can return to baseline.
	closeIdle := []func(){func() {}, gwTransport.CloseIdleConnections}
	for i, p := range []path{{"direct", simURL}, {"maitred", gwURL}} {
		st, err := holdStreams(p.url, n, closeIdle[i])
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		perStream[i] = st.bytesPerStream()
		fmt.Printf("%-8s %d/%d streams ended with [DONE]; open: %.1f KiB and %.1f goroutines per stream; after: goroutines %d -> %d -> %d (baseline, open, %s after the end)\n",
			p.name, st.done, n, st.bytesPerStream()/1024, float64(st.goOpen-st.goBase)/float64(n), st.goBase, st.goOpen, st.goAfter, st.settle.Round(time.Millisecond))
	}
	fmt.Printf("maitred's own cost: %.1f KiB per open stream\n", (perStream[1]-perStream[0])/1024)
	return nil
}

type soakStat struct {
	n                       int
	done                    int
	memBase, memOpen        uint64
	goBase, goOpen, goAfter int
	settle                  time.Duration
}

func (s soakStat) bytesPerStream() float64 {
	return (float64(s.memOpen) - float64(s.memBase)) / float64(s.n)
}

// inUse is the memory the process holds for live objects and goroutine
// stacks, after a GC.
func inUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func holdStreams(base string, n int, closeIdle func()) (soakStat, error) {
	tr := poolTransport()
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	st := soakStat{n: n, goBase: runtime.NumGoroutine(), memBase: inUse()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	started := make(chan struct{}, n)
	body := []byte(`{"model":"demo","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	for range n {
		wg.Go(func() {
			ok, err := oneStream(client, base, body, started)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				st.done++
			} else if firstErr == nil {
				firstErr = err
			}
		})
	}
	for range n {
		<-started // every stream has its first event: all are open
	}
	st.goOpen, st.memOpen = runtime.NumGoroutine(), inUse()
	wg.Wait()
	tr.CloseIdleConnections()
	closeIdle()
	end := time.Now()
	for {
		st.goAfter = runtime.NumGoroutine()
		if st.goAfter <= st.goBase+5 || time.Since(end) > 5*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.settle = time.Since(end)
	if firstErr != nil && st.done == 0 {
		return st, firstErr
	}
	return st, nil
}

// oneStream reads one stream to its end, signalling its first event.
func oneStream(c *http.Client, base string, body []byte, started chan<- struct{}) (bool, error) {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			started <- struct{}{}
		}
	}
	defer signal() // a failed stream must not hold the others' count
	res, err := c.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return false, fmt.Errorf("status %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	last := ""
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			signal()
			last = line
		}
	}
	return last == "data: [DONE]", sc.Err()
}
