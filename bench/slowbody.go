package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// slowBodies opens n connections to the gateway, each declaring a body of
// declared bytes and sending one, and reports the process's resident
// memory (the clients are in this process too, and cost little) before,
// with every connection waiting, and after; and how each connection ended
// (408 and closed at read_body_timeout is the expected answer).
func slowBodies(n int, declared int64) error {
	backend := sim.New(sim.Config{Model: "demo", MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}, zap.NewNop())
	simURL, stopSim, err := serve(backend.Handler())
	if err != nil {
		return err
	}
	defer stopSim()
	cfg := config.Default()
	cfg.ReadBodyTimeout = config.Duration(5 * time.Second)
	cfg.MaxBodyBytes = max(cfg.MaxBodyBytes, declared)
	cfg.Models = []config.ModelConfig{{Name: "demo", Backends: []config.BackendConfig{{URL: simURL}}}}
	gwURL, _, stopGW, err := serveGateway(cfg, zap.NewNop())
	if err != nil {
		return err
	}
	defer stopGW()
	addr := strings.TrimPrefix(gwURL, "http://")

	runtime.GC()
	base := rss()
	fmt.Printf("slowbody: %d connections each declaring %d bytes and sending 1; read_body_timeout %s\n", n, declared, cfg.ReadBodyTimeout.D())
	head := "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " + strconv.FormatInt(declared, 10) + "\r\n\r\n{"
	var wg sync.WaitGroup
	var mu sync.Mutex
	ends := map[string]int{}
	start := time.Now()
	var last time.Duration
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(c, head); err != nil {
			return err
		}
		wg.Go(func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			br := bufio.NewReader(c)
			end := "no answer"
			if res, err := http.ReadResponse(br, nil); err == nil {
				io.Copy(io.Discard, res.Body)
				end = strconv.Itoa(res.StatusCode)
				if _, err := br.ReadByte(); err == io.EOF {
					end += " closed"
				} else {
					end += " left open"
				}
			}
			mu.Lock()
			ends[end]++
			last = max(last, time.Since(start))
			mu.Unlock()
		})
	}
	time.Sleep(cfg.ReadBodyTimeout.D() / 2) // every connection is waiting now
	during := rss()
	wg.Wait()
	runtime.GC()
	after := rss()
	fmt.Printf("RSS: %.1f MiB before, %.1f MiB with all waiting (+%.1f MiB), %.1f MiB after\n", mib(base), mib(during), mib(during-base), mib(after))
	fmt.Printf("ends: %v; the last after %s\n", ends, last.Round(time.Millisecond))
	return nil
}

// rss is the process's resident set size in bytes, from /proc.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
