package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

var (
	prefixDur = flag.Duration("prefix-duration", 10*time.Minute, "prefix: simulated time each policy runs")
	// At 5x on the 2-core machine shared with other work, the
	// simulators' and the gateway's CPU (tens of ms a turn) showed in the
	// simulated TTFTs; at 2x it shows half as much.
	prefixScale    = flag.Float64("prefix-scale", 2, "prefix: simulated seconds per real second (the simulators' times are divided by it)")
	prefixLoad     = flag.Float64("prefix-load", 0.7, "prefix: offered load, a share of the fleet's capacity")
	prefixAffinity = flag.Int("prefix-affinity-tokens", 1024, "prefix: maitred's prefix_affinity_tokens in the affinity run")
	prefixPolicies = flag.String("prefix-policies", "round-robin,least-load,affinity,precise,precise-3,oracle", "prefix: the policies to run, in order")
	prefixWeights  = flag.String("prefix-weights", "", "prefix: precise_routing's cache_weight,load_weight in the precise runs (empty: the defaults)")
)

// The prefix scenario's world, in simulated units (divided by -prefix-scale
// for the simulators): four servers, 64 users in multi-turn conversations
// (groups sharing one of 8 system prompts of 1-4k tokens, histories growing
// to 30k tokens, then a new conversation), Poisson arrivals.
const (
	pxServers      = 4
	pxUsers        = 64
	pxSystems      = 8
	pxMaxSeqs      = 16
	pxKVTokens     = 40 * 15000 // ~40 conversations of the mean length
	pxMaxHistory   = 30000
	pxOutputTokens = 80
	pxTTFT         = 30 * time.Millisecond
	pxPrefill      = 400 * time.Microsecond // per uncached prompt token: 2,500 tokens/s per server
	pxITL          = 25 * time.Millisecond
	pxUserTurn     = 400 // mean tokens of a user turn
)

// pxOracleUncached is the uncached prompt tokens of a turn when every
// history is cached where it goes (the oracle's ideal): the new user turn,
// the previous answer, the chat template's tokens around them and, on
// average, half a block (the cache holds full blocks only).
const pxOracleUncached = pxUserTurn + pxOutputTokens + 10 + sim.BlockSize/2

// pxCapacity is the fleet's request rate at full use, from the
// simulators' model, for turns whose histories are all cached: the lower
// of two bounds. Prefill: each server's prefill engine (PrefillContention)
// computes 1/pxPrefill tokens a second, pxOracleUncached a turn. Slots:
// each server runs pxMaxSeqs requests at once, each holding its slot for
// TTFT, its prefill and the answer's decode. A policy that hits less
// recomputes more and reaches the prefill bound sooner.
func pxCapacity() (capacity, prefillBound, slotBound float64) {
	prefillBound = pxServers / (pxOracleUncached * pxPrefill.Seconds())
	service := pxTTFT + pxOracleUncached*pxPrefill + pxOutputTokens*pxITL
	slotBound = pxServers * pxMaxSeqs / service.Seconds()
	return min(prefillBound, slotBound), prefillBound, slotBound
}

// prefixPolicy routes the scenario's requests: it returns the URL clients
// post to and how to stop what it started.
type prefixPolicy func(w *prefixWorld) (string, func(), error)

var prefixPolicyTable = map[string]prefixPolicy{
	"round-robin": func(w *prefixWorld) (string, func(), error) {
		var n atomic.Uint64
		return w.proxy(func([]byte) int { return int(n.Add(1) % pxServers) })
	},
	"least-load": func(w *prefixWorld) (string, func(), error) { return w.gateway(0) },
	"affinity":   func(w *prefixWorld) (string, func(), error) { return w.gateway(*prefixAffinity) },
	// oracle knows every cache exactly: among the servers with a free
	// running slot (all when none has one), the one holding the longest
	// prefix of the prompt, the fewest tokens in flight among equals.
	"oracle": func(w *prefixWorld) (string, func(), error) {
		return w.proxy(func(body []byte) int {
			ids, err := w.ider.ChatTokenIDs(body) // the simulators' tokenizer, once for all four
			if err != nil {
				return 0
			}
			best, bestFree, bestHit, bestLoad := 0, false, -1, math.MaxInt
			for i, s := range w.sims {
				st := s.Stats()
				free := st.Running+st.Waiting < pxMaxSeqs
				hit := s.CachedPrefixIDs(ids, "", "")
				if free && !bestFree || free == bestFree && (hit > bestHit || hit == bestHit && st.TokensInFlight < bestLoad) {
					best, bestFree, bestHit, bestLoad = i, free, hit, st.TokensInFlight
				}
			}
			return best
		})
	},
	// precise is maitred's routing from the simulators' KV events: its
	// model has routing: precise and each backend the kv_events
	// endpoints its simulator bound.
	"precise": func(w *prefixWorld) (string, func(), error) { return w.gatewayPrecise() },
	// precise-3 is precise with three maitred replicas (one shared
	// store), each subscribed to every simulator, the clients' requests
	// spread round robin across them.
	"precise-3": func(w *prefixWorld) (string, func(), error) { return w.gatewayPreciseReplicas() },
}

// prefixWorld is one run's simulators (fresh caches for every policy).
type prefixWorld struct {
	sims  []*sim.Server
	urls  []string
	stops []func()
	tok   *tokenize.Model
	// ider is the simulators' tokenizer: maitred's (the blocks' ids are
	// those the door computes, as vLLM's are with the model's own
	// tokenizer), in every run, so that every policy and the oracle see
	// the same prompts (pxTokenizer).
	ider *pxTokenizer
	// regs are the gateways' registries (none for the policies without
	// one): the run's evidence is read from them.
	regs []*prometheus.Registry
	// weights are precise_routing's cache_weight and load_weight (zero:
	// the defaults).
	weights [2]float64
	// simTTFT times the chats at the simulators' HTTP boundary.
	simTTFT pxSimTTFT
}

func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) / *prefixScale) }

func newPrefixWorld(tok *tokenize.Model, kvEvents bool) (*prefixWorld, error) {
	w := &prefixWorld{tok: tok, ider: newPxTokenizer(tok)}
	for range pxServers {
		cfg := sim.Config{Model: "demo", MaxModelLen: 2 * pxMaxHistory, OutputTokens: pxOutputTokens,
			MaxNumSeqs: pxMaxSeqs, KVTokens: pxKVTokens, TTFT: scaled(pxTTFT), ITL: scaled(pxITL),
			PrefillPerToken: scaled(pxPrefill), PrefillContention: true, PrefixCaching: true, PromptTokensDetails: true, Tokenizer: w.ider}
		if kvEvents {
			cfg.KVEvents = &sim.KVEventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv"}
		}
		s := sim.New(cfg, zap.NewNop())
		if kvEvents {
			if err := s.StartKVEvents(); err != nil {
				s.Close()
				w.close()
				return nil, err
			}
		}
		u, stop, err := serve(w.simTTFT.wrap(s.Handler()))
		if err != nil {
			w.close()
			return nil, err
		}
		w.sims, w.urls, w.stops = append(w.sims, s), append(w.urls, u), append(w.stops, func() { s.Close(); stop() })
	}
	return w, nil
}

func (w *prefixWorld) close() {
	for _, stop := range w.stops {
		stop()
	}
}

// proxy serves a reverse proxy that sends each request to the simulator
// pick chooses from its body.
func (w *prefixWorld) proxy(pick func(body []byte) int) (string, func(), error) {
	proxies := make([]*httputil.ReverseProxy, len(w.urls))
	for i, u := range w.urls {
		target, err := url.Parse(u)
		if err != nil {
			return "", nil, err
		}
		proxies[i] = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) },
			FlushInterval: -1, Transport: poolTransport()}
	}
	return serve(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxies[pick(body)].ServeHTTP(rw, r)
	}))
}

// gateway serves maitred in front of the simulators, counting with the
// built-in demo tokenizer (the simulators' too); affinity > 0 turns
// prefix affinity on.
func (w *prefixWorld) gateway(affinity int) (string, func(), error) {
	cfg := config.Default()
	m := config.ModelConfig{Name: "demo", TokenizerCheck: "off", PrefixAffinityTokens: affinity,
		QueueSize: 4 * pxUsers, QueueTimeout: config.Duration(time.Hour)}
	for _, u := range w.urls {
		m.Backends = append(m.Backends, config.BackendConfig{URL: u, MaxInFlight: pxMaxSeqs})
	}
	cfg.Models = []config.ModelConfig{m}
	reg := prometheus.NewRegistry()
	w.regs = append(w.regs, reg)
	u, _, stop, err := serveGatewayWith(cfg, zap.NewNop(), gatewayExtras{tokenizers: map[string]*tokenize.Model{"demo": w.tok}, registry: reg})
	return u, stop, err
}

// gatewayPrecise serves maitred routing by the simulators' KV events
// (routing: precise), each backend subscribed to its simulator's
// publisher and replay sockets.
func (w *prefixWorld) gatewayPrecise() (string, func(), error) {
	cfg := w.preciseConfig()
	if err := cfg.Validate(); err != nil {
		return "", nil, err
	}
	reg := prometheus.NewRegistry()
	w.regs = append(w.regs, reg)
	u, _, stop, err := serveGatewayWith(cfg, zap.NewNop(), gatewayExtras{tokenizers: map[string]*tokenize.Model{"demo": w.tok}, registry: reg, kvEvents: true})
	return u, stop, err
}

// prefixResult is one policy's figures, in simulated time.
type prefixResult struct {
	policy             string
	sent, done, failed int
	queued             int // arrivals that found every user waiting and waited for one
	unsent             int // arrivals still waiting for a user when the window ended
	hitRate            float64
	ttftP50, ttftP99   float64 // seconds, from the client's send, wall clock x scale
	// simP50 and simP99 are the simulators' own TTFTs (pxSimTTFT).
	simP50, simP99 float64
	// waitP50 and waitP99 are the arrivals' waits for an idle user.
	waitP50, waitP99 float64
	// uncachedPerReq is the prompt tokens the simulators computed per
	// answered turn; prefillBusy the share of time their prefill engines
	// had work, on average.
	uncachedPerReq, prefillBusy float64
	// prefillP50 and prefillP99 are the TTFTs the simulators' model
	// gives the prompts' uncached tokens (fixed part + prefill), without
	// queueing and without the CPU of the machine running it all.
	prefillP50, prefillP99 float64
	throughput, tokPerSec  float64
	imbalance              float64 // max over mean of the servers' mean tokens in flight
	evidence               string  // the gateway's routing evidence (prefixEvidence)
}

func prefix() error {
	tok, err := tokenize.Builtin("demo")
	if err != nil {
		return err
	}
	var weights [2]float64
	if *prefixWeights != "" {
		if _, err := fmt.Sscanf(*prefixWeights, "%g,%g", &weights[0], &weights[1]); err != nil {
			return fmt.Errorf("-prefix-weights %q: want cache_weight,load_weight: %w", *prefixWeights, err)
		}
	}
	capacity, prefillBound, slotBound := pxCapacity()
	rate := *prefixLoad * capacity
	fmt.Fprintf(os.Stderr, "prefix: %d servers (KV %d tokens, %d seqs, prefill %v/token shared per server), %d users, %d system prompts\n"+
		"prefix: capacity %.1f req/s (prefill engines %.1f, slots %.1f; at %d uncached tokens a turn), offered %.1f req/s (%.0f%%), open loop; %s simulated per policy at %gx\n",
		pxServers, pxKVTokens, pxMaxSeqs, pxPrefill, pxUsers, pxSystems, capacity, prefillBound, slotBound, pxOracleUncached,
		rate, 100**prefixLoad, *prefixDur, *prefixScale)
	var results []prefixResult
	for _, name := range strings.Split(*prefixPolicies, ",") {
		r, err := prefixPolicyRun(tok, name, weights, rate)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "prefix: %s done\n%s", name, r.evidence)
	}
	printPrefix(results)
	return nil
}

// prefixPolicyRun runs one policy on a fresh world and gathers its
// evidence: per simulator the turns it answered, the prompt tokens it
// computed and its cached blocks; the gateways' routing metrics.
func prefixPolicyRun(tok *tokenize.Model, name string, weights [2]float64, rate float64) (prefixResult, error) {
	policy, ok := prefixPolicyTable[name]
	if !ok {
		return prefixResult{}, fmt.Errorf("prefix: unknown policy %q", name)
	}
	w, err := newPrefixWorld(tok, strings.HasPrefix(name, "precise"))
	if err != nil {
		return prefixResult{}, err
	}
	defer w.close()
	w.weights = weights
	target, stop, err := policy(w)
	if err != nil {
		return prefixResult{}, err
	}
	defer stop()
	r := runPrefix(w, target, rate)
	r.policy = name
	r.simP50, r.simP99 = p50p99(w.simTTFT.take())
	var parts []string
	for i, s := range w.sims {
		st := s.Stats()
		parts = append(parts, fmt.Sprintf("%s=%d/%d/%d", strings.TrimPrefix(w.urls[i], "http://"), st.Completed,
			st.PrefixQueries-st.PrefixHits, s.PrefixCacheBlocks()))
	}
	slices.Sort(parts)
	r.evidence += "  simulator turns/computed prompt tokens/blocks: " + strings.Join(parts, " ") + "\n"
	for i, reg := range w.regs {
		if len(w.regs) > 1 {
			r.evidence += fmt.Sprintf("  replica %d:\n", i)
		}
		r.evidence += prefixEvidence(reg, i == 0)
	}
	return r, nil
}

// printPrefix prints the side-by-side table. TTFT is from the client's
// send, wall clock x scale; sim TTFT is the simulators' own (pxSimTTFT).
func printPrefix(results []prefixResult) {
	fmt.Printf("%-12s %8s %9s %9s %9s %9s %8s %10s %6s %7s %9s %6s %6s %7s %7s %9s %9s %9s\n", "policy", "hit", "TTFT p50", "TTFT p99",
		"sim p50", "sim p99", "req/s", "prompt t/s", "imbal", "prefill", "uncached", "done", "failed", "queued", "unsent", "wait p99", "model p50", "model p99")
	for _, r := range results {
		fmt.Printf("%-12s %7.1f%% %8.3fs %8.3fs %8.3fs %8.3fs %8.2f %10.0f %6.2f %6.0f%% %9.0f %6d %6d %7d %7d %8.2fs %8.3fs %8.3fs\n", r.policy,
			100*r.hitRate, r.ttftP50, r.ttftP99, r.simP50, r.simP99, r.throughput, r.tokPerSec, r.imbalance, 100*r.prefillBusy,
			r.uncachedPerReq, r.done, r.failed, r.queued, r.unsent, r.waitP99, r.prefillP50, r.prefillP99)
	}
}
