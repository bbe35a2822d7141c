package triage

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestWindowExpiry(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	e.Warmup(mdl, be1, warmTTFT, warmTPOT)
	// one minute of door rejections, one a second: 6 buckets of 10
	run(c, time.Minute, time.Second, func(int, float64) {
		e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded", Total: time.Millisecond})
	})
	if r := e.Report(); r.Requests != 60 || r.Verdict != VerdictBoundary {
		t.Fatalf("fresh: requests %d verdict %s", r.Requests, r.Verdict)
	}
	steps := []struct {
		at   time.Duration
		want int
	}{
		{4*time.Minute + 59*time.Second, 60}, // all still in the window
		{5 * time.Minute, 50},                // the first bucket left
		{5*time.Minute + 30*time.Second, 20},
		{6 * time.Minute, 0},
		{3 * time.Hour, 0},
	}
	for _, s := range steps {
		c.t = t0.Add(s.at)
		r := e.Report()
		if r.Requests != s.want {
			t.Errorf("at +%v: requests = %d, want %d", s.at, r.Requests, s.want)
		}
		if s.want == 0 && r.Verdict != VerdictHealthy {
			t.Errorf("at +%v: verdict %s once everything expired", s.at, r.Verdict)
		}
	}
	// an observation that finished before the window is dropped
	e.Observe(Observation{Time: c.t.Add(-10 * time.Minute), Model: mdl, Layer: LayerDoor, Reason: "x"})
	if r := e.Report(); r.Requests != 0 || r.Dropped != 1 {
		t.Errorf("late observation: requests %d dropped %d", r.Requests, r.Dropped)
	}
	// expiry also happens on the write path, with no Report in between
	e2, c2 := newTestEngine(DefaultConfig())
	ok(e2, c2.t, be1, warmTTFT, warmTPOT)
	c2.t = t0.Add(time.Hour)
	ok(e2, c2.t, be1, warmTTFT, warmTPOT)
	if r := e2.Report(); r.Requests != 1 {
		t.Errorf("requests = %d, want 1", r.Requests)
	}
}

// slowWindow feeds 5 minutes of TTFT 400ms with the waiting queue growing.
func slowWindow(e *Engine, c *fakeClock, d time.Duration) {
	run(c, d, time.Second, func(i int, f float64) {
		for k := 0; k < 4; k++ {
			ok(e, c.t, be1, dur(400*time.Millisecond, jitter(i+k, 0.02)), warmTPOT)
		}
		if i%5 == 0 {
			sample(e, c.t, be1, 32, float64((i/5)%60)/2, 0.7, 0)
		}
	})
}

func TestLongBaselineCatchesSlowWindow(t *testing.T) {
	t.Run("moving baseline, no warm-up", func(t *testing.T) {
		e, c := newTestEngine(DefaultConfig())
		// an hour of normal traffic, then a window that is slow throughout
		run(c, time.Hour, time.Second, func(i int, _ float64) {
			ok(e, c.t, be1, dur(warmTTFT, jitter(i, 0.05)), warmTPOT)
			if i%5 == 0 {
				sample(e, c.t, be1, 8, 0, 0.4, 0)
			}
		})
		c.t = c.t.Add(time.Second)
		slowWindow(e, c, span)
		r := e.Report()
		if r.Verdict != VerdictPrefill {
			dump(t, r)
			t.Fatalf("verdict = %s", r.Verdict)
		}
		near(t, r.Evidence, "ttft_baseline_ms", 50, 0.05)
		near(t, r.Evidence, "ttft_ratio", 8, 0.05)
		near(t, r.Evidence, "tpot_ratio", 1, 0.01)
		bev := r.Models[0].Backends[0].Evidence
		if bev["ttft_baseline_source"] != "moving" {
			t.Errorf("baseline source = %v", bev["ttft_baseline_source"])
		}
		near(t, bev, "ttft_moving_baseline_coverage_s", 3600, 0.01) // the hour before the window
	})
	t.Run("no baseline at all: cannot call it a rise", func(t *testing.T) {
		e, c := newTestEngine(DefaultConfig())
		slowWindow(e, c, span)
		r := e.Report()
		if r.Verdict != VerdictHealthy {
			t.Fatalf("verdict = %s", r.Verdict)
		}
		if _, ok := r.Evidence["ttft_ratio"]; ok {
			t.Errorf("ttft_ratio without a baseline: %v", r.Evidence["ttft_ratio"])
		}
	})
	t.Run("slow for longer than the horizon: warm-up still shows it", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Baseline = 10 * time.Minute
		e, c := newTestEngine(cfg)
		e.Warmup(mdl, be1, warmTTFT, warmTPOT)
		slowWindow(e, c, time.Hour)
		r := e.Report()
		if r.Verdict != VerdictPrefill {
			t.Fatalf("verdict = %s", r.Verdict)
		}
		bev := r.Models[0].Backends[0].Evidence
		near(t, bev, "ttft_moving_baseline_ms", 400, 0.05) // the moving baseline has absorbed the slowness
		if bev["ttft_baseline_source"] != "warmup" {
			t.Errorf("baseline source = %v", bev["ttft_baseline_source"])
		}
		near(t, r.Evidence, "ttft_ratio", 8, 0.05)
	})
}

func TestSlowPathFallback(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	backends := []string{"b1", "b2", "b3", "b4"}
	e.Warmup(mdl, "b1", 50*time.Millisecond, 20*time.Millisecond)
	e.Warmup(mdl, "b2", 55*time.Millisecond, 21*time.Millisecond)
	e.Warmup(mdl, "b3", 48*time.Millisecond, 19*time.Millisecond)
	e.Warmup(mdl, "b4", 400*time.Millisecond, 20*time.Millisecond) // e.g. an attention backend fallback at warm-up
	run(c, span, time.Second, func(i int, _ float64) {
		for _, b := range backends {
			tpot := 20 * time.Millisecond
			if b == "b3" {
				tpot = 80 * time.Millisecond // decodes 4x slower than its peers
			}
			ok(e, c.t, b, 50*time.Millisecond, tpot)
		}
	})
	r := e.Report()
	golden(t, t.Name(), r)
	flags := map[string]BackendReport{}
	for _, b := range r.Models[0].Backends {
		flags[b.Backend] = b
	}
	for b, want := range map[string]string{"b1": "", "b2": "", "b3": "window_tpot_p50", "b4": "warmup_ttft"} {
		br := flags[b]
		if br.SlowPathFallback != (want != "") {
			t.Errorf("%s: slow path = %v, want %v (%v)", b, br.SlowPathFallback, want != "", br.SlowPath)
			continue
		}
		if want != "" {
			if len(br.SlowPath) != 1 || br.SlowPath[0].Signal != want {
				t.Errorf("%s: slow path evidence %v, want %s", b, br.SlowPath, want)
			}
		}
	}
	nearValue(t, "b4 ratio", flags["b4"].SlowPath[0].Ratio, 400.0/50, 0.001)
	nearValue(t, "b4 peers_median_ms", flags["b4"].SlowPath[0].PeersMedianMs, 50, 0)
	nearValue(t, "b3 ratio", flags["b3"].SlowPath[0].Ratio, 4, 0.001)
	if got := r.Evidence["slow_path_backends"]; fmt.Sprint(got) != "[llama-8b/b3 llama-8b/b4]" {
		t.Errorf("slow_path_backends = %v", got)
	}
	// one backend alone has no peers
	e1, c1 := newTestEngine(DefaultConfig())
	e1.Warmup(mdl, "solo", time.Second, time.Second)
	ok(e1, c1.t, "solo", time.Second, time.Second)
	if e1.Report().Models[0].Backends[0].SlowPathFallback {
		t.Error("a single backend was flagged")
	}
}

func TestBoundedMemoryHostileLabels(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	feed := func(base int) {
		for i := 0; i < 10000; i++ {
			n := base + i
			e.Observe(Observation{Time: c.t, Model: fmt.Sprintf("model-%d", n), Layer: LayerDoor,
				Reason: fmt.Sprintf("reason-%d", n), Total: time.Millisecond})
			e.Observe(Observation{Time: c.t, Model: mdl, Backend: fmt.Sprintf("b-%d", n), TTFT: warmTTFT, Total: time.Second})
			e.Sample(BackendSample{Time: c.t, Model: fmt.Sprintf("m-%d", n), Backend: fmt.Sprintf("s-%d", n), Ready: true})
			e.Observe(Observation{Time: c.t, Model: mdl, Layer: Layer(fmt.Sprintf("layer-%d", n)), Total: time.Millisecond})
		}
	}
	feed(0)
	cfg := e.Config()
	check := func() {
		t.Helper()
		if len(e.models) > cfg.MaxModels+1 {
			t.Errorf("%d models tracked, cap %d", len(e.models), cfg.MaxModels)
		}
		total := 0
		for _, m := range e.models {
			if len(m.backends) > cfg.MaxBackends+2 { // + "" and "other"
				t.Errorf("model %q tracks %d backends", m.name, len(m.backends))
			}
			total += len(m.backends)
		}
		if e.nser > cfg.MaxSeries || total > cfg.MaxSeries+2*(cfg.MaxModels+1) {
			t.Errorf("%d series (%d counted), cap %d", total, e.nser, cfg.MaxSeries)
		}
		if len(e.reasonNames) > cfg.MaxReasons {
			t.Errorf("%d reasons tracked", len(e.reasonNames))
		}
	}
	check()
	r := e.Report()
	mustJSON(t, r)
	if r.Requests != 30000 {
		t.Errorf("requests = %d: overflowed values must still be counted", r.Requests)
	}
	var other *ModelReport
	for i := range r.Models {
		if r.Models[i].Model == OverflowLabel {
			other = &r.Models[i]
		}
	}
	if other == nil || other.Requests == 0 {
		t.Fatalf("no %q model in the report", OverflowLabel)
	}
	if n := other.Evidence["rejections_by_reason"].(map[string]int)[OverflowLabel]; n == 0 {
		t.Errorf("overflowed reasons not counted under %q", OverflowLabel)
	}
	// another 10,000 new names: no growth at all
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	feed(10000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	check()
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 1<<20 {
		t.Errorf("heap grew by %d bytes on 10,000 more hostile names", grow)
	}
	if n := testing.AllocsPerRun(100, func() {
		e.Observe(Observation{Time: c.t, Model: "yet-another-hostile-name", Backend: "and-another", Layer: LayerDoor, Reason: "and-a-reason"})
	}); n != 0 {
		t.Errorf("Observe with overflowed labels allocates %v times", n)
	}
}

func TestPreemptionCounterReset(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	// every 10s: 100, 110, 120, restart -> 0, 5, 15 : deltas 10, 10, 0, 5, 10 = 35 in 50s
	for i, v := range []float64{100, 110, 120, 0, 5, 15} {
		c.t = t0.Add(time.Duration(i) * 10 * time.Second)
		sample(e, c.t, be1, 4, 0, 0.5, v)
	}
	r := e.Report()
	near(t, r.Evidence, "preemptions_per_min", 42, 0.001)
	// a sample out of order does not produce a negative or double count
	sample(e, t0.Add(45*time.Second), be1, 4, 0, 0.5, 3)
	near(t, e.Report().Evidence, "preemptions_per_min", 42, 0.001)
}

func TestObserveDoesNotAllocate(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	o := Observation{Model: mdl, Backend: be1, TTFT: warmTTFT, TPOT: warmTPOT, Total: time.Second, ClientStall: 300 * time.Millisecond}
	f := Observation{Model: mdl, Backend: be1, Layer: LayerConnect, Reason: "backend_timeout", Total: time.Second}
	e.Observe(o)
	e.Observe(f)
	e.GatewayQueue(mdl, 3, c.t)
	sample(e, c.t, be1, 1, 1, 0.5, 1)
	i := 0
	n := testing.AllocsPerRun(1000, func() {
		i++
		c.t = t0.Add(time.Duration(i) * 100 * time.Millisecond) // crosses buckets and expires old ones
		o.Time, f.Time = c.t, c.t
		e.Observe(o)
		e.Observe(f)
		e.GatewayQueue(mdl, i%7, c.t)
		sample(e, c.t, be1, 1, 1, 0.5, float64(i))
	})
	if n != 0 {
		t.Errorf("steady-state Observe/Sample/GatewayQueue allocate %v times", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := New(DefaultConfig(), clock)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				at := clock()
				b := fmt.Sprintf("b%d", g)
				switch i % 4 {
				case 0:
					e.Observe(Observation{Time: at, Model: mdl, Backend: b, TTFT: warmTTFT, TPOT: warmTPOT, Total: time.Second})
				case 1:
					e.Sample(BackendSample{Time: at, Model: mdl, Backend: b, Running: 3, KVUsage: 0.5, Preemptions: float64(i), Ready: true})
				case 2:
					e.GatewayQueue(mdl, i%5, at)
				case 3:
					e.Observe(Observation{Time: at, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded"})
				}
				if i%500 == 0 {
					e.Warmup(mdl, b, warmTTFT, warmTPOT)
				}
			}
		}(g)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			mu.Lock()
			// 200 s in all: within the 5 min window, so every observation is
			// still in it at the end however the goroutines interleave.
			now = now.Add(time.Second)
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			mustJSON(t, e.Report())
		}
	}()
	wg.Wait()
	if r := e.Report(); r.Requests == 0 {
		t.Error("nothing recorded")
	}
}

func TestDefaultsFilled(t *testing.T) {
	e := New(Config{Thresholds: Thresholds{KVFull: 0.9}}, nil)
	cfg := e.Config()
	d := DefaultConfig()
	if cfg.Window != d.Window || cfg.Baseline != d.Baseline || cfg.Thresholds.KVFull != 0.9 ||
		cfg.Thresholds.TTFTRiseFactor != 2 || cfg.Thresholds.MinSamples != 20 || cfg.MaxModels != 64 {
		t.Errorf("config = %+v", cfg)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500e6}, {0.95, 950e6}, {0.99, 990e6}} {
		got := h.quantile(c.q)
		if got < c.want*0.94 || got > c.want*1.06 {
			t.Errorf("q%.2f = %.0f, want %.0f ±6%%", c.q, got, c.want)
		}
	}
	var one hist
	for i := 0; i < 10; i++ {
		one.add(400 * time.Millisecond)
	}
	if got := one.quantile(0.5); got != 400e6 {
		t.Errorf("constant histogram p50 = %v", got)
	}
	for v := int64(1); v < 1<<40; v = v*3 + 1 {
		i := histIndex(v)
		lo, hi := histBounds(i)
		if i > 0 && i < histBins-1 && (float64(v) < lo || float64(v) >= hi) {
			t.Fatalf("%d in bin %d [%v, %v)", v, i, lo, hi)
		}
	}
}

func TestPerModelVerdicts(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	e.Warmup(mdl, be1, warmTTFT, warmTPOT)
	e.Warmup("qwen-7b", "q1", warmTTFT, warmTPOT)
	run(c, span, time.Second, func(i int, _ float64) {
		for k := 0; k < 4; k++ {
			ok(e, c.t, be1, warmTTFT, warmTPOT)
			e.Observe(Observation{Time: c.t, Model: "qwen-7b", Backend: "q1", TTFT: warmTTFT, TPOT: 3 * warmTPOT, Total: time.Second})
		}
		e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded"})
	})
	r := e.Report()
	golden(t, t.Name(), r)
	got := map[string]string{}
	for _, m := range r.Models {
		got[m.Model] = m.Verdict
	}
	if got[mdl] != VerdictBoundary || got["qwen-7b"] != VerdictDecode {
		t.Errorf("model verdicts = %v", got)
	}
	// fleet: qwen is half the backend traffic, so decode pressure leads; boundary follows
	if r.Verdict != VerdictDecode || len(r.Others) != 1 || r.Others[0].Verdict != VerdictBoundary {
		t.Errorf("fleet verdict %s, others %v", r.Verdict, verdicts(r.Others))
	}
	near(t, r.Evidence, "affected_share", 0.5, 0)
}

// Requests that time out before their first token leave no TTFT sample:
// the failures themselves point at prefill.
func TestPrefillTimeoutsWithoutTTFT(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	e.Warmup(mdl, be1, warmTTFT, warmTPOT)
	run(c, span, time.Second, func(i int, _ float64) {
		ok(e, c.t, be1, warmTTFT, warmTPOT)
		if i%3 == 0 {
			e.Observe(Observation{Time: c.t, Model: mdl, Backend: be1, Layer: LayerPrefill, Reason: "backend_timeout",
				Connect: time.Millisecond, Total: 30 * time.Second})
		}
		if i%5 == 0 {
			sample(e, c.t, be1, 4, 0, 0.3, 0)
		}
	})
	r := e.Report()
	golden(t, t.Name(), r)
	if r.Verdict != VerdictPrefill {
		t.Fatalf("verdict = %s (others %v)", r.Verdict, verdicts(r.Others))
	}
	near(t, r.Evidence, "prefill_failures", 100, 0)
	if got := r.Evidence["failures_by_reason"].(map[string]int)["backend_timeout"]; got != 100 {
		t.Errorf("failures_by_reason[backend_timeout] = %d", got)
	}
}
