package triage

import (
	"slices"
	"testing"
	"time"
)

// A scope built directly as a snapshot: one model, two backends serving
// 100 requests each and a series for the requests that reached none, all
// quiet. Each case below changes one thing: the evidence of one rule.
func quietScope() (*modelWindow, *backendWindow, *backendWindow, *backendWindow) {
	mw := &modelWindow{name: mdl, rejections: map[string]int{}, failures: map[string]int{}}
	none := &backendWindow{model: mw, name: "", tpotStable: true}
	mk := func(name string) *backendWindow {
		b := &backendWindow{model: mw, name: name, tpotStable: true, sampled: true, ready: true, state: "ready",
			lastSample: t0, a: agg{requests: 100, ok: 100, samples: 30}}
		b.ttft = latency{name: "TTFT", n: 100, p50: float64(warmTTFT), base: float64(warmTTFT), src: "warmup", ratio: 1}
		b.tpot = latency{name: "TPOT", n: 100, p50: float64(warmTPOT), base: float64(warmTPOT), src: "warmup", ratio: 1}
		b.kv = gaugeStat{N: 30, Min: 0.2, Max: 0.4, Mean: 0.3, First: 0.3, Last: 0.3}
		b.running = gaugeStat{N: 30, Min: 4, Max: 4, Mean: 4, First: 4, Last: 4}
		b.waiting = gaugeStat{N: 30}
		b.preKnown = true
		return b
	}
	b1, b2 := mk("b1"), mk("b2")
	mw.backends = []*backendWindow{none, b1, b2}
	mw.requests = 200
	return mw, none, b1, b2
}

// fail counts n failures in layer l on series b.
func fail(b *backendWindow, l int, n int) {
	b.a.requests += n
	b.a.layers[l] += n
	b.model.requests += n
}

// ruleCases: for each verdict, a scope that shows its evidence and the
// backend that shows it (nil for the scope-wide classes).
var ruleCases = map[string]func() (*modelWindow, *backendWindow){
	VerdictCompat: func() (*modelWindow, *backendWindow) {
		mw, _, _, b2 := quietScope()
		b2.ready, b2.notReadyNow, b2.state = false, true, "unhealthy"
		b2.compat = &Compatibility{Check: "tokenizer", Gateway: 41, Backend: 44}
		return mw, b2
	},
	VerdictUnavailable: func() (*modelWindow, *backendWindow) {
		mw, _, _, b2 := quietScope()
		b2.ready, b2.notReadyNow, b2.state, b2.stateSince = false, true, "unhealthy", t0.Add(-time.Minute)
		return mw, b2
	},
	VerdictKV: func() (*modelWindow, *backendWindow) {
		mw, _, _, b2 := quietScope()
		b2.kv.Max, b2.prePerMin = 0.97, 12
		return mw, b2
	},
	VerdictDecode: func() (*modelWindow, *backendWindow) {
		mw, _, _, b2 := quietScope()
		b2.tpot.p50, b2.tpot.ratio, b2.tpot.rising, b2.tpotStable = 4*float64(warmTPOT), 4, true, false
		return mw, b2
	},
	VerdictPrefill: func() (*modelWindow, *backendWindow) {
		mw, _, _, b2 := quietScope()
		mw.q = gaugeStat{N: 30, First: 0, Last: 12, Max: 12, SlopePerMin: 2.4}
		mw.queueGrowing = true
		b2.ttft.p50, b2.ttft.ratio, b2.ttft.rising = 5*float64(warmTTFT), 5, true
		return mw, b2
	},
	VerdictBoundary: func() (*modelWindow, *backendWindow) {
		mw, none, _, _ := quietScope()
		fail(none, layerDoor, 40)
		mw.rejections["context_length_exceeded"] = 40
		return mw, nil
	},
	VerdictClient: func() (*modelWindow, *backendWindow) {
		mw, _, b1, _ := quietScope()
		b1.a.stalled = 60
		return mw, nil
	},
	VerdictHealthy: func() (*modelWindow, *backendWindow) {
		mw, _, _, _ := quietScope()
		return mw, nil
	},
}

// TestRulesFireOnTheirOwnEvidence: every rule fires on a scope that shows
// its evidence, and on no other rule's; a per-backend class is shown by the
// backend that carries the evidence and by no other.
func TestRulesFireOnTheirOwnEvidence(t *testing.T) {
	tm := &terms{th: DefaultThresholds(), window: 5 * time.Minute, recent: 20 * time.Second, now: t0}
	for _, r := range rules {
		if ruleCases[r.verdict] == nil {
			t.Errorf("rule %s has no case here", r.verdict)
		}
	}
	if len(ruleCases) != len(rules)+1 {
		t.Errorf("%d cases for %d rules and healthy", len(ruleCases), len(rules))
	}
	for want, build := range ruleCases {
		mw, shows := build()
		s := newSnapshot(tm, []*modelWindow{mw})
		for _, r := range rules {
			ev, fired := r.fires(s)
			if fired != (r.verdict == want) {
				t.Errorf("on %s's evidence, rule %s fires = %v", want, r.verdict, fired)
			}
			if fired && len(ev.said(tm)) == 0 {
				t.Errorf("rule %s fired with nothing to say", r.verdict)
			}
			if r.backend == nil {
				continue
			}
			for _, b := range mw.backends[1:] {
				if got := r.backend(b, &tm.th); got != (b == shows && r.verdict == want) {
					t.Errorf("on %s's evidence, %s shows %s = %v", want, b.name, r.verdict, got)
				}
			}
		}
		if got, _ := assess(s); got.Verdict != want {
			t.Errorf("on %s's evidence, the verdict is %s", want, got.Verdict)
		}
	}
}

// TestRuleLayers: a rule's layers are the failures it classifies: a
// significant count of failures in one of them fires that rule and no
// rule that does not list it; failures in a layer no rule lists (decode:
// a stream that broke after its first token) fire none.
func TestRuleLayers(t *testing.T) {
	tm := &terms{th: DefaultThresholds(), window: 5 * time.Minute, recent: 20 * time.Second, now: t0}
	claimed := map[Layer]bool{}
	for _, r := range rules {
		for _, l := range r.layers {
			claimed[l] = true
		}
	}
	for _, l := range Layers() {
		mw, none, b1, _ := quietScope()
		on := b1 // a failure of a request that reached a backend
		if l == LayerDoor || l == LayerQueue || l == LayerUnready {
			on = none
		}
		fail(on, layerIndex(l), 40)
		s := newSnapshot(tm, []*modelWindow{mw})
		var fired []string
		for _, r := range rules {
			if _, ok := r.fires(s); ok {
				fired = append(fired, r.verdict)
				if !slices.Contains(r.layers, l) {
					t.Errorf("40 %s failures fire %s, which does not list that layer", l, r.verdict)
				}
			}
		}
		if claimed[l] && len(fired) == 0 {
			t.Errorf("40 %s failures fire no rule", l)
		}
		if !claimed[l] && len(fired) > 0 {
			t.Errorf("40 %s failures fire %v", l, fired)
		}
	}
}

// TestPrecedenceIsTheRuleOrder: Precedence and Next read the rule list.
func TestPrecedenceIsTheRuleOrder(t *testing.T) {
	want := []string{VerdictCompat, VerdictUnavailable, VerdictKV, VerdictDecode, VerdictPrefill, VerdictBoundary, VerdictClient}
	if got := Precedence(); !slices.Equal(got, want) {
		t.Errorf("precedence %v, want %v", got, want)
	}
	for _, v := range append(want, VerdictHealthy) {
		if len(Next(v)) == 0 {
			t.Errorf("no next steps for %s", v)
		}
	}
	if Next("no such verdict") != nil {
		t.Error("next steps for an unknown verdict")
	}
}
