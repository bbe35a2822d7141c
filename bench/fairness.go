package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// fairness measures issue 28's fair shares between tenants as users run
// maitred: the built binary (-maitred, or go build ./cmd/maitred into a
// temp dir) serving a config this scenario writes (two API keys given by
// environment variables, one model counted with the built-in demo
// tokenizer, one backend with max_in_flight 4), in front of `maitred sim`
// in its own process; for item 4 three such gateways share a
// redis-server it starts. The clients (flows A and B, one key each) run
// in this process and stream every answer, reading its Server-Timing
// (queue wait), the time of each content event and the usage chunk.
// Each item runs once with fairness fifo (the default: the config names
// no fairness) and once with fairness tokens, side by side:
//
//  1. A: -fair-backlog concurrent long requests without pause; B: one
//     short request every 200 ms. B's queue wait, both flows'
//     throughput, and the largest difference in weighted token service
//     over any window in which both had a request waiting, against 2x
//     the largest single request's weighted cost (VTC's bound).
//  2. Key weights 1 (A) and 3 (B), both backlogged (closed loops of long
//     requests) for -fair-long: B's service over A's (target 3 ± 10%).
//  3. A alone for -fair-idle: its throughput with tokens against fifo
//     (target within 5%); then B, idle until then, as backlogged as A
//     for -fair-duration: the service split per -fair-window after B
//     starts, and the bound of item 1 from B's start (B does not
//     monopolise the backend).
//  4. Item 1's load spread over 3 replicas sharing a redis-server.
type fairOpts struct {
	bin      string
	dur      time.Duration
	long     time.Duration
	idle     time.Duration
	window   time.Duration
	backlogs []int
	items    map[int]bool
}

// The sim's timing: a long request (fairLongOut tokens) takes about
// fairTTFT + (fairLongOut-1) * fairITL on the backend.
const (
	fairTTFT     = 50 * time.Millisecond
	fairITL      = 10 * time.Millisecond
	fairLongOut  = 100
	fairShortOut = 4
	fairEvery    = 200 * time.Millisecond
)

// fairWeights are the token weights of service (VTC's: input 1, output
// 2), written to the tokens config as fairness_weights.
var fairWeights = fairCost{in: 1, out: 2}

var fairKeyEnv = [2]string{"MAITRED_BENCH_KEY_A", "MAITRED_BENCH_KEY_B"}

// fairnessFromFlags is the scenario with its -fair-* flags.
func fairnessFromFlags() error {
	o := fairOpts{bin: *maitredBin, dur: *fairDur, long: *fairLong, idle: *fairIdle, window: *fairWindow, items: map[int]bool{}}
	for v := range strings.SplitSeq(*fairBacklogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return fmt.Errorf("-fair-backlog: want positive numbers, got %q", v)
		}
		o.backlogs = append(o.backlogs, n)
	}
	for v := range strings.SplitSeq(*fairItems, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 4 {
			return fmt.Errorf("-fair-items: want items 1 to 4, got %q", v)
		}
		o.items[n] = true
	}
	if *fairSlots < 1 {
		return fmt.Errorf("-fair-slots: want 1 or more, got %d", *fairSlots)
	}
	if o.dur < o.window || o.idle <= 0 || o.long < 2*o.window {
		return fmt.Errorf("fairness: -fair-duration at least -fair-window, -fair-long at least twice it, -fair-idle above 0")
	}
	return fairness(o)
}

func fairness(o fairOpts) error {
	env, err := startFairEnv(o.bin)
	if err != nil {
		return err
	}
	defer env.close()
	stopOnSignal(env.close)
	c := &fairClient{http: &http.Client{Transport: poolTransport()}, keys: [2]string{"sk-bench-tenant-a", "sk-bench-tenant-b"},
		shape: newFairShape(fairLongOut, fairShortOut)}
	fmt.Printf("fairness: maitred serve (%s) with max_in_flight %d in front of maitred sim (TTFT %s, ITL %s: a long request, %d tokens out, takes about %s); weights input %g, output %g\n",
		env.bin, *fairSlots, fairTTFT, fairITL, fairLongOut, fairTTFT+(fairLongOut-1)*fairITL, fairWeights.in, fairWeights.out)
	var v fairVerdicts
	if o.items[1] {
		if err := fairItem1(env, c, o, &v); err != nil {
			return err
		}
	}
	if o.items[2] {
		if err := fairItem2(env, c, o, &v); err != nil {
			return err
		}
	}
	if o.items[3] {
		if err := fairItem3(env, c, o, &v); err != nil {
			return err
		}
	}
	if o.items[4] {
		if err := fairItem4(env, c, o, &v); err != nil {
			return err
		}
	}
	v.print()
	return nil
}

// errNoFairness is returned by startGateways when the binary refuses the
// tokens config (a build without the fairness policy).
var errNoFairness = errors.New("this maitred build refuses `fairness: tokens`")

// fairEnv is the scenario's processes: the binary, the simulator, and the
// redis-server once item 4 asks for it.
type fairEnv struct {
	bin, dir, simAddr string
	sim               *proc
	redis             string
	stopRedis         func()
	dbs               int
	once              sync.Once
}

func startFairEnv(bin string) (*fairEnv, error) {
	root := fixtures.Root()
	if root == "" && bin == "" {
		return nil, fmt.Errorf("fairness: run from the repository (it builds ./cmd/maitred), or name a binary with -maitred")
	}
	dir, err := os.MkdirTemp("", "maitred-fairness-")
	if err != nil {
		return nil, err
	}
	e := &fairEnv{bin: bin, dir: dir}
	if e.bin == "" {
		if e.bin, err = buildMaitred(dir, false); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("fairness: %w", err)
		}
	}
	e.simAddr = freeAddr()
	e.sim, err = startServing(filepath.Join(dir, "sim.log"), nil, e.simAddr, "/health", e.bin, "sim", "--listen", e.simAddr, "--model", "demo", "--tokenizer", "builtin:demo",
		"--ttft", fairTTFT.String(), "--itl", fairITL.String(), "--max-num-seqs", "256", "--kv-tokens", "1000000", "--log-level", "warn")
	if err != nil {
		e.close()
		return nil, fmt.Errorf("fairness: maitred sim: %w", err)
	}
	return e, nil
}

func (e *fairEnv) close() {
	e.once.Do(func() {
		e.sim.stop()
		if e.stopRedis != nil {
			e.stopRedis()
		}
		os.RemoveAll(e.dir)
	})
}

// startGateways runs n gateways with policy (fifo: the config names no
// fairness at all; tokens: fairness tokens with fairWeights and the keys'
// weights) and, when n > 1, a shared store (a fresh database of one
// redis-server per call). It returns their URLs and how to stop them.
func (e *fairEnv) startGateways(policy string, weights [2]float64, n int) ([]string, func(), error) {
	store := ""
	if n > 1 {
		if e.redis == "" {
			addr, stop, err := startRedis()
			if err != nil {
				return nil, nil, err
			}
			e.redis, e.stopRedis = addr, stop
		}
		e.dbs++
		store = fmt.Sprintf("redis://%s/%d", e.redis, e.dbs)
	}
	keyEnv := []string{fairKeyEnv[0] + "=sk-bench-tenant-a", fairKeyEnv[1] + "=sk-bench-tenant-b"}
	var procs []*proc
	stop := func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Go(p.stop)
		}
		wg.Wait()
	}
	var urls []string
	for i := range n {
		addr := freeAddr()
		path := filepath.Join(e.dir, fmt.Sprintf("%s-%d.yaml", policy, i))
		if err := os.WriteFile(path, []byte(fairConfig(addr, e.simAddr, policy, weights, store)), 0o644); err != nil {
			stop()
			return nil, nil, err
		}
		p, err := startServing(strings.TrimSuffix(path, ".yaml")+".log", keyEnv, addr, "/readyz", e.bin, "serve", "--config", path, "--log-level", "warn")
		if err != nil {
			stop()
			if policy != "fifo" && strings.Contains(err.Error(), "fairness") {
				return nil, nil, fmt.Errorf("%w: %v", errNoFairness, err)
			}
			return nil, nil, fmt.Errorf("maitred serve (%s): %w", policy, err)
		}
		procs, urls = append(procs, p), append(urls, p.url)
	}
	return urls, stop, nil
}

// fairConfig is a gateway's config: model demo counted with the built-in
// tokenizer, one backend with fairSlots requests in flight, a queue deep
// and patient enough for every backlog here, two keys given by
// environment variables.
func fairConfig(listen, simAddr, policy string, weights [2]float64, store string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\ndrain_delay: 0s\ndrain_timeout: 2s\n", listen)
	if store != "" {
		fmt.Fprintf(&b, "store: %s\n", store)
	}
	b.WriteString("models:\n  - name: demo\n    tokenizer: builtin:demo\n    max_model_len: 4096\n    queue_size: 1024\n    queue_timeout: 300s\n")
	if policy != "fifo" {
		fmt.Fprintf(&b, "    fairness: %s\n    fairness_weights: {input: %g, output: %g}\n", policy, fairWeights.in, fairWeights.out)
	}
	fmt.Fprintf(&b, "    backends:\n      - url: http://%s\n        max_in_flight: %d\n", simAddr, *fairSlots)
	b.WriteString("auth:\n  keys:\n")
	for i, name := range []string{"tenant-a", "tenant-b"} {
		fmt.Fprintf(&b, "    - name: %s\n      env: %s\n      models: [\"*\"]\n", name, fairKeyEnv[i])
		if policy != "fifo" {
			fmt.Fprintf(&b, "      weight: %g\n", weights[i])
		}
	}
	return b.String()
}
