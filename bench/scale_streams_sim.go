package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/sim"
)

// The streams dimension's simulator runs in a process of its own (this
// program again, -scenario streams-sim): at 10,000 streams it holds
// 10,000 sockets, and the load generator (direct) or maitred holds as
// many; one process holding both would pass the container's open-file
// limit (20,000). It stamps each event as it flushes it (stampBook) and
// hands the stamps over, all at once, at GET /bench/stamps.

var streamsSimListen = flag.String("streams-sim-listen", "", "streams-sim: the address the streams dimension's simulator serves on")

// streamsSimConfig is the slow streams' simulator: one token a second,
// streamTokens of them, no batch or KV limit to wait on.
func streamsSimConfig() sim.Config {
	return sim.Config{Model: "demo", MaxModelLen: 4096, OutputTokens: *streamTokens, ITL: time.Second, MaxNumSeqs: 1 << 20, KVTokens: 1 << 30}
}

// streamsSim serves the stamped simulator on listen until the process is
// stopped.
func streamsSim(listen string) error {
	if listen == "" {
		return fmt.Errorf("-streams-sim-listen: want host:port")
	}
	// No collections below the limit: the simulator's pauses would count
	// as delay, direct and through maitred alike.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(streamsMemoryLimit)
	book := &stampBook{m: map[string][]time.Time{}}
	backend := sim.New(streamsSimConfig(), zap.NewNop())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bench/stamps", func(w http.ResponseWriter, _ *http.Request) {
		book.mu.Lock()
		all := book.m
		book.m = map[string][]time.Time{}
		book.mu.Unlock()
		out := make(map[string][]int64, len(all))
		for id, ts := range all {
			ns := make([]int64, len(ts))
			for i, t := range ts {
				ns[i] = t.UnixNano()
			}
			out[id] = ns
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.Handle("/", book.wrap(backend.Handler()))
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// startStreamsSim runs the stamped simulator in its own process.
func startStreamsSim() (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := freeAddr()
	return startServing("", nil, addr, "/health", self, "-scenario", "streams-sim", "-streams-sim-listen", addr, "-scale-streams-tokens", strconv.Itoa(*streamTokens))
}

// fetchStamps takes every stamp the simulator at base holds (and leaves
// it none): each stream's flush times, by its X-Bench-Id.
func fetchStamps(base string) (map[string][]time.Time, error) {
	res, err := http.Get(base + "/bench/stamps")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var ns map[string][]int64
	if err := json.NewDecoder(res.Body).Decode(&ns); err != nil {
		return nil, fmt.Errorf("stamps: %w", err)
	}
	out := make(map[string][]time.Time, len(ns))
	for id, v := range ns {
		ts := make([]time.Time, len(v))
		for i, n := range v {
			ts[i] = time.Unix(0, n)
		}
		out[id] = ts
	}
	return out, nil
}
