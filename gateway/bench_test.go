package gateway

import (
	"bytes"
	"context"
	"github.com/maitred-dev/maitred/internal/upstream"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/internal/telemetry"
	"github.com/maitred-dev/maitred/tokenize"
)

const benchChat = `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello in five words."}],"max_tokens":8}`

const benchAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27}}`

// BenchmarkProxy measures one non-streaming chat round trip over loopback
// through a bare httputil.ReverseProxy (the floor) and through maitred
// counting every prompt with the qwen3 fixture tokenizer, side by side,
// against the same static backend, for a short chat and a ten-message chat
// of about 1,000 tokens. The difference is what maitred's hot path costs:
// body read, the door (parse, validate, render, count), routing, headers,
// logging, metrics and its own proxy. maitred's runs also report the door's
// mean time (Server-Timing door, door-us/op) and the rest of the request
// without it (ns-without-door/op): with -cpu 1 each ns/op is the CPU the
// whole exchange (client, proxy, backend) costs.
func BenchmarkProxy(b *testing.B) {
	backend := newFakeBackend(b, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchAnswer)
	})
	target, _ := url.Parse(backend.URL)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     tr,
		FlushInterval: -1,
	})
	defer bare.Close()

	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: backend.URL}}}}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	gtr := NewTransport(cfg)
	defer gtr.CloseIdleConnections()
	fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, log, nil)
	g, _ := New(Options{Config: cfg, Fleet: fl, Logger: log, Registry: prometheus.NewRegistry(), Transport: gtr,
		Tokenizers: map[string]*tokenize.Model{"m": tok}})
	defer g.Close()
	fl.ProbeAll(context.Background())
	g.SetPhase(Serving)
	gw := httptest.NewServer(g.Handler())
	defer gw.Close()

	// The 1k chat: varied messages of the tokenizer benchmark's mix,
	// added until the prompt holds 1,000 tokens.
	chat1k, tokens := fixtures.ConversationOf(b, 1000, `,"max_tokens":8`, func(body string) int {
		v, err := ojson.Parse([]byte(body), ojson.DefaultMaxDepth)
		if err != nil {
			b.Fatal(err)
		}
		c, err := tok.CountChat(v, 0)
		if err != nil || !c.Exact {
			b.Fatal(err, c.Reason)
		}
		return c.Tokens
	})
	b.Logf("1k chat: %d prompt tokens, %d bytes", tokens, len(chat1k))
	for _, size := range []struct{ name, body string }{{"short", benchChat}, {"1k", chat1k}} {
		for _, p := range []struct{ name, url string }{{"bare", bare.URL}, {"maitred", gw.URL}} {
			b.Run(size.name+"/"+p.name, func(b *testing.B) {
				ctr := &http.Transport{MaxIdleConnsPerHost: 64}
				defer ctr.CloseIdleConnections()
				c := &http.Client{Transport: ctr}
				var door float64 // ms, summed
				b.ReportAllocs()
				b.SetBytes(int64(len(size.body)))
				for b.Loop() {
					res, err := c.Post(p.url+"/v1/chat/completions", "application/json", strings.NewReader(size.body))
					if err != nil {
						b.Fatal(err)
					}
					msg, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						b.Fatalf("status %d: %.300s", res.StatusCode, msg)
					}
					if p.name == "maitred" {
						if res.Header.Get("Server-Timing") == "" {
							b.Fatal("no Server-Timing")
						}
						ms, err := serverTiming(res.Header.Get("Server-Timing"), "door")
						if err != nil {
							b.Fatal(err)
						}
						door += ms
					}
				}
				if p.name == "maitred" {
					perOp := door * 1e3 / float64(b.N)
					b.ReportMetric(perOp, "door-us/op")
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)-perOp*1e3, "ns-without-door/op")
				}
			})
		}
	}
}

// BenchmarkServeInProcess measures maitred's handler alone (no client
// socket): the per-request work the gateway adds, with allocations.
func BenchmarkServeInProcess(b *testing.B) {
	backend := newFakeBackend(b, "m", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, benchAnswer)
	})
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: backend.URL}}}}
	gtr := NewTransport(cfg)
	defer gtr.CloseIdleConnections()
	fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, zap.NewNop(), nil)
	g, _ := New(Options{Config: cfg, Fleet: fl, Registry: prometheus.NewRegistry(), Transport: gtr})
	fl.ProbeAll(context.Background())
	h := g.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(benchChat)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// BenchmarkServeTraced is BenchmarkServeInProcess with tracing off and
// on, side by side: the difference is what tracing costs a request. On,
// every request is sampled (ratio 1.0) and its server, door, queue and
// backend spans are recorded, batched and sent by the real OTLP/HTTP
// exporter to a collector that discards them. Besides ns/op, which a
// loaded machine inflates, it reports cpu-ns/op: the process's CPU time
// (every goroutine: the gateway, the backend, the exporter, the
// collector) per request.
func BenchmarkServeTraced(b *testing.B) {
	cfg, gtr, otlp := tracedBenchSetup(b)
	for _, c := range []struct {
		name string
		tp   *telemetry.Provider
	}{{"off", nil}, {"ratio=1.0", otlp}} {
		fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, zap.NewNop(), nil)
		g, _ := New(Options{Config: cfg, Fleet: fl, Registry: prometheus.NewRegistry(), Transport: gtr, Tracing: c.tp})
		fl.ProbeAll(context.Background())
		h := g.Handler()
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(benchChat)))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d", rec.Code)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		g.Close()
	}
}

// tracedBenchSetup starts what the traced benchmarks share: a backend
// answering benchChat, the gateway's config and transport for it, and an
// OTLP/HTTP provider at sampling ratio 1.0 exporting to a collector that
// discards what it receives (with its settings). All are closed when b ends.
func tracedBenchSetup(b *testing.B) (config.Config, *upstream.Transport, *telemetry.Provider) {
	backend := newFakeBackend(b, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchAnswer)
	})
	coll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(coll.Close)
	one := 1.0
	s, err := telemetry.Resolve(config.TracingConfig{Endpoint: coll.URL, SamplingRatio: &one}, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	otlp, err := telemetry.New(context.Background(), s, telemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { otlp.Shutdown(context.Background()) })
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: backend.URL}}}}
	gtr := NewTransport(cfg)
	b.Cleanup(gtr.CloseIdleConnections)
	return cfg, gtr, otlp
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServeTracedAlternating is BenchmarkServeTraced's off and
// ratio=1.0 served in alternating chunks of 128 requests within one run,
// so that a loaded machine's swings weigh on both alike: it reports each
// one's ns/op and cpu-ns/op (process CPU, as there) and the differences,
// tracing's cost. A traced chunk ends with a flush, so its spans' export
// is charged to it; a GC cycle is charged to whichever chunk it runs in,
// so the differences understate tracing's share of the GC a little.
//
// It runs on one P (GOMAXPROCS 1, restored after): the exporter's and the
// collector's work then cannot hide on an idle core, nor a flush's wait
// be inflated by idle threads spinning, so the wall-time difference is
// all the work tracing adds, export and collector included.
func BenchmarkServeTracedAlternating(b *testing.B) {
	cfg, gtr, otlp := tracedBenchSetup(b)
	var hs [2]http.Handler
	for i, tp := range []*telemetry.Provider{nil, otlp} {
		fl, _ := fleet.New(cfg.Fleet(), &http.Client{Transport: gtr}, zap.NewNop(), nil)
		g, _ := New(Options{Config: cfg, Fleet: fl, Registry: prometheus.NewRegistry(), Transport: gtr, Tracing: tp})
		defer g.Close()
		fl.ProbeAll(context.Background())
		hs[i] = g.Handler()
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const chunk = 128
	var wall, cpu [2]time.Duration
	var n [2]int
	b.ReportAllocs()
	t0, c0 := time.Now(), cpuTime()
	for i := 0; b.Loop(); i++ {
		v := i / chunk % 2
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(benchChat)))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		hs[v].ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d", rec.Code)
		}
		n[v]++
		if (i+1)%chunk == 0 { // the chunk's end: charge it to its variant
			if v == 1 {
				otlp.ForceFlush(context.Background()) // its export too
			}
			t1, c1 := time.Now(), cpuTime()
			wall[v] += t1.Sub(t0)
			cpu[v] += c1 - c0
			t0, c0 = t1, c1
		}
	}
	if v := b.N / chunk % 2; b.N%chunk != 0 {
		wall[v] += time.Since(t0)
		cpu[v] += cpuTime() - c0
	}
	if n[0] == 0 || n[1] == 0 {
		return
	}
	per := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }
	b.ReportMetric(per(wall[0], n[0]), "off-ns/op")
	b.ReportMetric(per(wall[1], n[1]), "traced-ns/op")
	b.ReportMetric(per(wall[1], n[1])-per(wall[0], n[0]), "delta-ns/op")
	b.ReportMetric(per(cpu[0], n[0]), "off-cpu-ns/op")
	b.ReportMetric(per(cpu[1], n[1]), "traced-cpu-ns/op")
	b.ReportMetric(per(cpu[1], n[1])-per(cpu[0], n[0]), "delta-cpu-ns/op")
}
