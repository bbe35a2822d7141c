package fleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// parseExpfmt is how Scrape read a page before it streamed: the whole
// exposition parsed into metric families, then the kept ones summed. It is
// the reference the streaming parser is checked against, and the "before"
// of BenchmarkScrapeLargePage.
func parseExpfmt(r io.Reader, served string) (Gauges, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Gauges{}, err
	}
	var g Gauges
	sum := func(name string) float64 {
		var v float64
		if fam := fams[name]; fam != nil {
			for _, m := range fam.Metric {
				if !servedByDTO(m, served) {
					continue
				}
				switch {
				case m.Gauge != nil:
					v += m.Gauge.GetValue()
				case m.Counter != nil:
					v += m.Counter.GetValue()
				case m.Untyped != nil:
					v += m.Untyped.GetValue()
				}
			}
		}
		return v
	}
	g.Running = sum(famRunning)
	g.Waiting = sum(famWaiting)
	g.KVUsage = sum(famKVUsage)
	g.Preemptions = sum(famPreemptions)
	g.Generated = sum(famGenerated)
	if fam := fams[famCacheInfo]; fam != nil && len(fam.Metric) > 0 {
		g.Info = map[string]string{}
		for _, lp := range fam.Metric[0].Label {
			g.Info[lp.GetName()] = lp.GetValue()
		}
		blocks, _ := strconv.Atoi(g.Info["num_gpu_blocks"])
		size, _ := strconv.Atoi(g.Info["block_size"])
		g.KVCapacity = blocks * size
	}
	return g, nil
}

func servedByDTO(m *dto.Metric, served string) bool {
	for _, lp := range m.Label {
		if lp.GetName() == "model_name" {
			return lp.GetValue() == served
		}
	}
	return true
}

// simPage is the simulator's /metrics page (vLLM's families and shapes).
func simPage(t testing.TB) []byte {
	t.Helper()
	s := sim.New(sim.Config{Model: "m", KVUsageFloor: 0.25}, zap.NewNop())
	srv := httptest.NewServer(s.Handler())
	defer func() { s.Close(); srv.Close() }()
	res, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// largePage is a page of about size bytes: the simulator's, then many
// histogram series of other families (as a server with many adapters or
// label values exports).
func largePage(t testing.TB, size int) []byte {
	var b bytes.Buffer
	b.Write(simPage(t))
	b.WriteString(`vllm:num_requests_waiting_other{engine="1",model_name="other"} 7` + "\n")
	b.WriteString("# TYPE vllm:e2e_request_latency_seconds_x histogram\n")
	for i := 0; b.Len() < size; i++ {
		for _, le := range []string{"0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "+Inf"} {
			fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_x_bucket{engine=\"0\",lora_name=\"adapter-%d\",model_name=\"m\",le=\"%s\"} %d\n", i, le, i)
		}
		fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_x_sum{engine=\"0\",lora_name=\"adapter-%d\",model_name=\"m\"} %d.5\n", i, i)
		fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_x_count{engine=\"0\",lora_name=\"adapter-%d\",model_name=\"m\"} %d\n", i, i)
	}
	return b.Bytes()
}

func TestParseMetricsAgreesWithExpfmt(t *testing.T) {
	for name, page := range map[string][]byte{
		"sim":   simPage(t),
		"large": largePage(t, 1<<20),
		"escapes and spacing": []byte("# comment\n\nvllm:num_requests_waiting{model_name=\"m\",note=\"a \\\"q\\\" \\\\ \\n\"} 2 1700000000000\n" +
			"vllm:num_requests_running 1\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n" +
			"vllm:num_preemptions_total{model_name=\"m\"} 4\nvllm:num_preemptions_total{model_name=\"x\"} 9\n" +
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\",cache_dtype=\"auto\"} 1\n"),
	} {
		t.Run(name, func(t *testing.T) {
			want, err := parseExpfmt(bytes.NewReader(page), "m")
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseMetrics(bytes.NewReader(page), "m", MaxMetricsBytes)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("streaming parse %+v\nexpfmt parse    %+v", got, want)
			}
		})
	}
}

func TestParseMetricsRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		page, want string
	}{
		"html":      {"<html><body>Not Found</body></html>\n", "not vLLM's"},
		"empty":     {"", "not vLLM's"},
		"bad value": {"vllm:num_requests_running{model_name=\"m\"} many\n", "not a number"},
		"unquoted":  {"vllm:num_requests_waiting{model_name=m} 1\n", "not quoted"},
		"too large": {"vllm:num_requests_running 1\n" + strings.Repeat("x", 2<<20), "over 1 MiB"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseMetrics(strings.NewReader(tc.page), "m", 1<<20)
			var se *ScrapeError
			if !errors.As(err, &se) || !se.Answered || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want an answered ScrapeError containing %q", err, tc.want)
			}
		})
	}
}

// BenchmarkScrapeLargePage reads a 13 MB page both ways, side by side:
// expfmt (before) parses every family; the streaming parser (now) scans
// lines and parses only the kept ones.
func BenchmarkScrapeLargePage(b *testing.B) {
	page := largePage(b, 13<<20)
	for _, bc := range []struct {
		name  string
		parse func(io.Reader) (Gauges, error)
	}{
		{"expfmt", func(r io.Reader) (Gauges, error) { return parseExpfmt(r, "m") }},
		{"stream", func(r io.Reader) (Gauges, error) { return parseMetrics(r, "m", MaxMetricsBytes) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(page)))
			for b.Loop() {
				if _, err := bc.parse(bytes.NewReader(page)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// plainTypes: every kept family in page is a gauge, counter or untyped.
func plainTypes(page []byte) bool {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return false
	}
	for _, n := range []string{famRunning, famWaiting, famKVUsage, famPreemptions, famCacheInfo} {
		if f := fams[n]; f != nil {
			switch f.GetType() {
			case dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
			default:
				return false
			}
		}
	}
	return true
}

// FuzzParseMetrics: the streaming parser never panics, and where expfmt
// reads a page as a vLLM page, both agree on the gauges.
func FuzzParseMetrics(f *testing.F) {
	f.Add(simPage(f))
	f.Add([]byte("vllm:num_requests_running{model_name=\"m\"} 1\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"4\"} 1\n"))
	f.Add([]byte("vllm:num_requests_waiting{a=\"\\\\\\\"\"} NaN\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		got, err := parseMetrics(bytes.NewReader(page), "m", 1<<20)
		if err != nil {
			return
		}
		want, werr := parseExpfmt(bytes.NewReader(page), "m")
		if werr != nil || !plainTypes(page) {
			// The streaming parser does not validate other families, and
			// reads kept ones as the plain values vLLM exports them as.
			return
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("streaming parse %+v\nexpfmt parse    %+v", got, want)
		}
	})
}

// TestScrapeKeepsItsLineBuffer: a scrape allocates far less than its
// 32 KB line buffer: the buffer is kept from one scrape to the next (512
// backends scraped four times a second made a fresh one each 64 MB of
// garbage a second). The page is the simulator's, served as it was
// rendered, so that the server's own work does not count.
func TestScrapeKeepsItsLineBuffer(t *testing.T) {
	page := simPage(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(page)
	}))
	defer srv.Close()
	tr := NewTransport(5 * time.Second)
	defer tr.CloseIdleConnections()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: srv.URL}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := f.Models()[0].Backends()[0]
	scrape := func() {
		if g, err := f.Scrape(t.Context(), b); err != nil || g.KVCapacity == 0 {
			t.Fatalf("scrape: %+v, %v", g, err)
		}
	}
	scrape() // the connection and the buffer
	const n = 100
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range n {
		scrape()
	}
	runtime.ReadMemStats(&m1)
	// About 8 KB; under the race detector, which drops a quarter of what
	// a sync.Pool is given, about 18 KB. A fresh buffer a scrape: 41 KB.
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per >= 3*maxLine/4 {
		t.Errorf("a scrape of a %d-byte page allocates %d bytes (client and server); want well under the %d-byte line buffer", len(page), per, maxLine)
	}
}

// TestScrapesOfARoundStartTogether: every backend's scrape of a round
// starts at the same instant, one beat every interval, a backend that
// joins later (a reload adds it) included: one wake-up of the process a
// round, not one per backend. Before, each backend's ticker kept the
// phase of its start, so a backend added 100 ms in was scraped at its own
// instants.
func TestScrapesOfARoundStartTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 63 and one more: the most scrape_budget auto scrapes every
		// interval (past 64 the interval grows: budget_test.go).
		const n, interval = 63, 250 * time.Millisecond
		cfg, f := unreachableFleet(t, n)
		at, stop := notReadyScrapes(t, f, interval)
		time.Sleep(100 * time.Millisecond)
		cfg.Models[0].Backends = append(cfg.Models[0].Backends, config.BackendConfig{URL: "http://10.0.1.1:8000"})
		if err := f.Apply(cfg.Fleet(), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4*interval - 100*time.Millisecond + time.Millisecond)
		stop()
		want := map[time.Duration]int{interval: n + 1, 2 * interval: n + 1, 3 * interval: n + 1, 4 * interval: n + 1}
		if fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("scrapes by instant %v; want %v: every backend's at each beat", at, want)
		}
	})
}

// BenchmarkScrapeClient: one scrape of a simulator's /metrics over
// loopback, through the fleet's transport (internal/upstream) and through
// net/http's Transport it replaced for plain-http backends, server
// included; cpu-us/op is the process's CPU time (user and system) a
// scrape.
func BenchmarkScrapeClient(b *testing.B) {
	s := sim.New(sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2}, zap.NewNop())
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: srv.URL}}}}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	tr := NewTransport(5 * time.Second)
	defer tr.CloseIdleConnections()
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{{"upstream", tr}, {"net-http", tr.NetHTTP()}} {
		b.Run(c.name, func(b *testing.B) {
			f, err := New(cfg.Fleet(), &http.Client{Transport: c.rt}, zap.NewNop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			be := f.Models()[0].Backends()[0]
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(b.Context(), time.Second)
				if _, err := f.Scrape(ctx, be); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}

// reportCPU reports the process's CPU time per iteration from its call to
// the call of the function it returns.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-us/op") }
}

// TestScrapeRequest: the fleet's scrape dials the URL's port (80 when it
// names none) and sends GET /metrics, the Host, the probe's User-Agent and
// X-Maitred-Probe, and the backend's key, and nothing else (no
// Accept-Encoding: pages are read as they come). An https backend is
// scraped through net/http's Transport (NetHTTP).
func TestScrapeRequest(t *testing.T) {
	t.Setenv("SCRAPE_KEY", "sk-backend")
	page := "vllm:num_requests_running{model_name=\"m\"} 1\nvllm:num_requests_waiting{model_name=\"m\"} 2\n"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reqs := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				head.WriteString(line)
				if err != nil || line == "\r\n" {
					break
				}
			}
			reqs <- head.String()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(page), page)
			c.Close()
		}
	}()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, page)
	}))
	defer tls.Close()
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: "http://vllm"}, {URL: tls.URL}, {URL: "http://10.0.0.1:8000", APIKeyEnv: "SCRAPE_KEY"}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	// The https transport is made (with the real dialer) before the
	// plain one's dialer is pointed at the test's listener.
	tr.NetHTTP().TLSClientConfig = tls.Client().Transport.(*http.Transport).TLSClientConfig
	var dialed []string
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
	}
	f, err := New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	bs := f.Models()[0].Backends()
	wants := []string{
		"GET /metrics HTTP/1.1\r\nHost: vllm\r\nUser-Agent: maitred-probe\r\nX-Maitred-Probe: metrics\r\n\r\n",
		"", // https: not through the plain dialer
		"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:8000\r\nUser-Agent: maitred-probe\r\nAuthorization: Bearer sk-backend\r\nX-Maitred-Probe: metrics\r\n\r\n",
	}
	for i, b := range bs {
		g, err := f.Scrape(t.Context(), b)
		if err != nil || g.Running != 1 || g.Waiting != 2 {
			t.Fatalf("%s: %+v, %v", b.URL, g, err)
		}
		if wants[i] == "" {
			continue
		}
		if got := <-reqs; got != wants[i] {
			t.Errorf("%s: request %q\nwant %q", b.URL, got, wants[i])
		}
	}
	if want := []string{"vllm:80", "10.0.0.1:8000"}; !slices.Equal(dialed, want) {
		t.Errorf("dialed %q, want %q", dialed, want)
	}
}

// unreachableFleet is a fleet of one model "m" with n backends at
// 10.0.0.1:8000 onwards (nothing answers there), and the config it was
// built from.
func unreachableFleet(t *testing.T, n int) (*config.Config, *Fleet) {
	t.Helper()
	cfg := config.Default()
	mc := config.ModelConfig{Name: "m"}
	for i := range n {
		mc.Backends = append(mc.Backends, config.BackendConfig{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1)})
	}
	cfg.Models = []config.ModelConfig{mc}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg.Fleet(), &http.Client{}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &cfg, f
}

// notReadyScrapes runs f's scraper at interval inside a synctest bubble,
// over backends none of which is ready: each beat calls fn once a backend
// without a request. It returns the calls by instant since its start,
// complete once stop (which waits for the bubble to settle, then ends the
// scraper) has returned.
func notReadyScrapes(t *testing.T, f *Fleet, interval time.Duration) (map[time.Duration]int, func()) {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	at := map[time.Duration]int{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		f.RunScraper(ctx, interval, func(_ *Model, b *Backend, _ Gauges, err error) {
			if !errors.Is(err, ErrNotReady) {
				t.Errorf("%s: %v, want ErrNotReady", b.URL.Host, err)
			}
			mu.Lock()
			at[time.Since(start)]++
			mu.Unlock()
		})
		close(done)
	}()
	return at, func() {
		synctest.Wait()
		cancel()
		<-done
	}
}
