package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/internal/memnet"
	"github.com/maitred-dev/maitred/sim"
)

// TestScrapeIntervalGrowsPastBudget: with scrape_budget auto (64
// backends every scrape_interval), 64 backends are scraped every 250 ms as
// before; once a reload makes them 128, every 500 ms (128 / 256 a
// second), and back to 250 ms when 64 of them leave (draining backends do
// not count). The backends are not ready: each beat calls fn once a
// backend without a request, so the timeline is the beats'.
func TestScrapeIntervalGrowsPastBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 250 * time.Millisecond
		cfg, f := unreachableFleet(t, 64)
		at, stop := notReadyScrapes(t, f, interval)
		small := cfg.Models[0].Backends
		time.Sleep(1100 * time.Millisecond)
		for i := range 64 {
			cfg.Models[0].Backends = append(cfg.Models[0].Backends, config.BackendConfig{URL: fmt.Sprintf("http://10.0.1.%d:8000", i+1)})
		}
		if err := f.Apply(cfg.Fleet(), nil); err != nil {
			t.Fatal(err)
		}
		if got := f.ScrapeEvery(interval); got != 2*interval {
			t.Errorf("128 backends: ScrapeEvery %v, want %v", got, 2*interval)
		}
		time.Sleep(1200 * time.Millisecond) // to 2.3 s
		cfg.Models[0].Backends = small
		if err := f.Apply(cfg.Fleet(), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1000*time.Millisecond + time.Millisecond) // to 3.3 s
		stop()
		ms := time.Millisecond
		want := map[time.Duration]int{
			// 64 backends: every scrape_interval, as without a budget.
			250 * ms: 64, 500 * ms: 64, 750 * ms: 64, 1000 * ms: 64,
			// 128 from 1.1 s: the beat already set for 1.25 s, then every 500 ms.
			1250 * ms: 128, 1750 * ms: 128, 2250 * ms: 128,
			// 64 again from 2.3 s (the 64 others drain, still called
			// until forgotten): the beat set for 2.75 s, then every 250 ms.
			2750 * ms: 128, 3000 * ms: 128, 3250 * ms: 128,
		}
		if fmt.Sprint(at) != fmt.Sprint(want) {
			t.Errorf("scrapes by instant %v\nwant %v", at, want)
		}
	})
}

// simFleet starts a simulator on an in-memory network inside a synctest
// bubble, and a fleet of one model "m" whose one backend is it, warmed up
// (ready); mutate adjusts the config, idle is the server's IdleTimeout (0:
// none). Requests to the simulator are counted by path, and its accepted
// connections as "accepted". The returned stop shuts everything down.
func simFleet(t *testing.T, sc sim.Config, idle time.Duration, mutate func(*config.Config)) (f *Fleet, s *sim.Server, hits func(path string) int64, stop func()) {
	t.Helper()
	var mn memnet.Network
	s = sim.New(sc, zap.NewNop())
	var mu sync.Mutex
	counts := map[string]int64{}
	ln, err := mn.Listen("b0:8000")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		counts[r.URL.Path]++
		mu.Unlock()
		s.Handler().ServeHTTP(w, r)
	}), IdleTimeout: idle, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			counts["accepted"]++
			mu.Unlock()
		}
	}}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	cfg := config.Default()
	cfg.Models = []config.ModelConfig{{Name: sc.Model, TokenizerCheck: config.TokenizerOff, Backends: []config.BackendConfig{{URL: "http://b0:8000"}}}}
	mutate(&cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(5 * time.Second)
	tr.DialContext = mn.Dial
	f, err = New(cfg.Fleet(), &http.Client{Transport: tr}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ProbeAll(t.Context())
	if b := f.Models()[0].Backends()[0]; !b.Ready() {
		t.Fatalf("backend not ready: %+v", b.Status())
	}
	hits = func(path string) int64 {
		mu.Lock()
		defer mu.Unlock()
		return counts[path]
	}
	stop = func() {
		srv.Close()
		tr.CloseIdleConnections()
		wg.Wait()
		s.Close()
	}
	return f, s, hits, stop
}

// TestStretchedScrapesStayFresh: a backend scraped on a stretched interval
// (scrape_budget 0.5 a second, one backend: every 2 s against a
// scrape_interval of 250 ms) is never stale between its scrapes in the
// admission pool, which the gateway sets up with StaleAfter 4 intervals
// (1 s) of scrape_interval: the scrape's gauges carry the interval they
// were read at (Every), and the pool's staleness grows with it. Before,
// gauges 1 s old counted as stale, so saturated, half the time.
func TestStretchedScrapesStayFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 250 * time.Millisecond
		f, _, hits, stop := simFleet(t, sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2}, 0, func(c *config.Config) {
			c.ScrapeInterval = config.Duration(interval)
			c.ScrapeBudget = 0.5
		})
		defer stop()
		b := f.Models()[0].Backends()[0]
		pool := admission.NewPool("m", admission.PoolConfig{
			QueueSize: 4, QueueTimeout: time.Second, Classes: 1, SaturatedWaiting: 4,
			StaleAfter: 4 * interval, ScrapeInterval: interval, GaugesUnavailableAfter: 40 * interval,
		}, []admission.SlotConfig{{Name: b.URL.Host, Ready: b.Ready}}, nil)
		var every atomic.Int64
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			f.RunScraper(ctx, interval, func(_ *Model, b *Backend, g Gauges, err error) {
				if err != nil {
					t.Errorf("scrape: %v", err)
					return
				}
				every.Store(int64(g.Every))
				pool.SetGauges(b.URL.Host, admission.Gauges{Waiting: g.Waiting, Running: g.Running, KVUsage: g.KVUsage, At: g.At, Every: g.Every})
			})
			close(done)
		}()
		state := func() admission.GaugesState { s, _ := pool.Slot(b.URL.Host); return s.GaugesState }
		before := hits("/metrics")
		// Scrapes at 2, 4, 6 s; look 1.9 s after each, just before the next.
		for i := range 3 {
			time.Sleep(2*time.Second - 100*time.Millisecond)
			synctest.Wait()
			if got := hits("/metrics") - before; got != int64(i) {
				t.Fatalf("%d scrapes by %v, want %d (every 2 s)", got, time.Duration(i+1)*2*time.Second-100*time.Millisecond, i)
			}
			if i > 0 {
				if st := state(); st != admission.GaugesFresh {
					t.Errorf("1.9 s after scrape %d (every %v): gauges %s, want fresh", i, time.Duration(every.Load()), st)
				}
			}
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		if got := time.Duration(every.Load()); got != 2*time.Second {
			t.Errorf("gauges read every %v, want 2s", got)
		}
		// No scrape for 4 of its intervals and more: stale.
		cancel()
		<-done
		time.Sleep(8*time.Second + time.Millisecond)
		if st := state(); st != admission.GaugesStale {
			t.Errorf("8 s after the last scrape: %s, want stale", st)
		}
	})
}

// TestAdaptersListedWithinBound: past half of health.budget, a ready
// backend's adapters are listed less often than it is probed, and an
// adapter loaded at runtime is still found within ListEvery plus half a
// probe interval. health.budget 0.25 a second and one backend: probes
// every 4 s, listings every 8 s (0.125 a second); over 40 s that is 10
// probes and 4 listings, where before every probe listed.
func TestAdaptersListedWithinBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, hits, stop := simFleet(t, sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2, RuntimeLoRA: true}, 0, func(c *config.Config) {
			c.Health.Budget = 0.25
		})
		defer stop()
		if f.ProbeEvery() != 4*time.Second || f.ListEvery() != 8*time.Second {
			t.Fatalf("probe every %v, list every %v; want 4s and 8s", f.ProbeEvery(), f.ListEvery())
		}
		m := f.Models()[0]
		b := m.Backends()[0]
		found := make(chan time.Time, 1)
		f.OnAdapters(func(_ *Model, _ *Backend, list []Adapter) {
			if len(list) == 1 && list[0].Name == "sql" {
				select {
				case found <- time.Now():
				default:
				}
			}
		})
		health0, list0 := hits("/health"), hits("/v1/models")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { f.Run(ctx); close(done) }()
		time.Sleep(11 * time.Second)
		loaded := time.Now()
		res, err := f.client.Post(b.URL.String()+"/v1/load_lora_adapter", "application/json", strings.NewReader(`{"lora_name":"sql","lora_path":"/adapters/sql"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("load_lora_adapter: %d", res.StatusCode)
		}
		time.Sleep(29*time.Second - time.Millisecond) // to 40 s
		synctest.Wait()
		cancel()
		<-done
		select {
		case at := <-found:
			if bound := f.ListEvery() + f.ProbeEvery()/2; at.Sub(loaded) > bound {
				t.Errorf("adapter found %v after it was loaded, want within %v", at.Sub(loaded), bound)
			}
		default:
			t.Fatal("the adapter loaded at runtime was never found")
		}
		// Run probes at once, then at every beat: 1 + 9 in 40 s.
		if probes, listings := hits("/health")-health0, hits("/v1/models")-list0; probes != 10 || listings > 5 {
			t.Errorf("%d probes and %d listings in 40 s; want 10 probes and at most 5 listings (every 8 s)", probes, listings)
		}
	})
}

// TestScrapeSendsAgainAfterIdleClose: the scraper's connection through
// the fleet's transport (internal/upstream) to a backend that closes connections idle for 500 ms
// (uvicorn's keep-alive is 5 s; vLLM's scrape interval can pass it in a
// large fleet) finds it closed at every scrape, 2 s apart, and sends the
// request again on a new one: no scrape fails. Without the second try
// every scrape after the first failed with EOF.
func TestScrapeSendsAgainAfterIdleClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 250 * time.Millisecond
		f, _, hits, stop := simFleet(t, sim.Config{Model: "m", MaxModelLen: 2048, OutputTokens: 2}, 500*time.Millisecond, func(c *config.Config) {
			c.ScrapeBudget = 0.5 // one backend: every 2 s
		})
		defer stop()
		var ok, failed atomic.Int64
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			f.RunScraper(ctx, interval, func(_ *Model, _ *Backend, _ Gauges, err error) {
				if err != nil {
					failed.Add(1)
					t.Errorf("scrape: %v", err)
					return
				}
				ok.Add(1)
			})
			close(done)
		}()
		before := hits("accepted")
		time.Sleep(8*time.Second + time.Millisecond)
		synctest.Wait()
		cancel()
		<-done
		if ok.Load() != 4 || failed.Load() != 0 {
			t.Errorf("%d scrapes, %d failed in 8 s; want 4 (every 2 s), none failed", ok.Load(), failed.Load())
		}
		if got := hits("accepted") - before; got != 4 {
			t.Errorf("%d connections for 4 scrapes; want a new one each (the backend closes them idle)", got)
		}
	})
}
