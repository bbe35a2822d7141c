package triage

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeFromTheFirstMinute: with no moving baseline yet, TPOT is judged
// against the warm-up's, and over the newest 20s on its own, so a change
// from 20ms to 200ms per token 20s after the start is named within 20s
// (issue 16). The evidence says which baseline was used.
func TestDecodeFromTheFirstMinute(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	e.Warmup(mdl, be1, warmTTFT, warmTPOT)
	tpot := warmTPOT
	named := time.Duration(-1)
	var r Report
	run(c, time.Minute, 200*time.Millisecond, func(i int, _ float64) {
		at := time.Duration(i) * 200 * time.Millisecond
		if at == 20*time.Second {
			if r := e.Report(); r.Verdict != VerdictHealthy {
				t.Fatalf("before the change: %s %v", r.Verdict, r.Said)
			}
			tpot = 10 * warmTPOT
		}
		ok(e, c.t, be1, warmTTFT, tpot)
		if at >= 20*time.Second && named < 0 && i%5 == 0 {
			if r = e.Report(); r.Verdict == VerdictDecode {
				named = at - 20*time.Second
			}
		}
	})
	if named < 0 || named > 20*time.Second {
		t.Fatalf("decode_pressure named after %v, want within 20s", named)
	}
	bev := r.Models[0].Backends[0].Evidence
	if bev["tpot_baseline_source"] != "warmup" || !strings.HasPrefix(bev["tpot_baseline_words"].(string), "its warm-up TPOT, 20.0 ms, measured idle (no moving baseline yet") {
		t.Errorf("baseline words %q", bev["tpot_baseline_words"])
	}
	if len(r.Said) != 1 || !strings.Contains(r.Said[0], "over the last 20s") || !strings.Contains(r.Said[0], "10.0x its warm-up TPOT") {
		t.Errorf("said %q", r.Said)
	}
	t.Logf("named after %v: %s", named, r.Said)
}

// TestBaselineWords: the sentence names the baseline that was used.
func TestBaselineWords(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Baseline = 10 * time.Minute
	for _, tc := range []struct {
		name   string
		warm   time.Duration
		before time.Duration // traffic before the window, at warmTPOT
		want   string
	}{
		{"none", 0, 0, "no baseline, so TPOT is not judged (no warm-up TPOT was measured; no moving baseline yet: it covers 0s of the 2m0s of traffic it needs)"},
		{"moving", 0, 10 * time.Minute, "its moving baseline, 20.0 ms over 6m0s of traffic (no warm-up TPOT was measured)"},
		{"warm-up lower", warmTPOT / 2, 10 * time.Minute, "its warm-up TPOT, 10.0 ms, measured idle (lower than its moving baseline, 20.0 ms)"},
		{"moving lower", 2 * warmTPOT, 10 * time.Minute, "its moving baseline, 20.0 ms over 6m0s of traffic (lower than its warm-up TPOT, 40.0 ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c := newTestEngine(cfg)
			if tc.warm > 0 {
				e.Warmup(mdl, be1, warmTTFT, tc.warm)
			}
			run(c, tc.before+time.Minute, time.Second, func(int, float64) { ok(e, c.t, be1, warmTTFT, warmTPOT) })
			r := e.Report()
			if got := r.Models[0].Backends[0].Evidence["tpot_baseline_words"]; got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
