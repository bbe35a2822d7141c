package triage

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the report goldens in testdata/report")

// golden compares a report's JSON, as /debug/triage serves it, with
// testdata/report/<name>.json: the same field names holding the same values
// (the order of fields within an object is not compared). The goldens were
// written by the engine before its rules became a list of typed values, so
// they hold the wire format the gateway, `maitred triage` and the status
// page read.
func golden(t *testing.T, name string, r Report) {
	t.Helper()
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
	path := filepath.Join("testdata", "report", slug+".json")
	if *update {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no golden (run with -update once): %v", err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("report differs from %s:\n%s", path, jsonDiff("", g, w))
	}
}

// jsonDiff lists the paths where two decoded JSON values differ.
func jsonDiff(at string, got, want any) string {
	gm, gok := got.(map[string]any)
	wm, wok := want.(map[string]any)
	if gok && wok {
		var out strings.Builder
		for k, wv := range wm {
			gv, ok := gm[k]
			if !ok {
				out.WriteString(at + "." + k + ": missing\n")
				continue
			}
			out.WriteString(jsonDiff(at+"."+k, gv, wv))
		}
		for k := range gm {
			if _, ok := wm[k]; !ok {
				out.WriteString(at + "." + k + ": unexpected\n")
			}
		}
		return out.String()
	}
	ga, gok := got.([]any)
	wa, wok := want.([]any)
	if gok && wok && len(ga) == len(wa) {
		var out strings.Builder
		for i := range wa {
			out.WriteString(jsonDiff(at+"["+string(rune('0'+i%10))+"]", ga[i], wa[i]))
		}
		return out.String()
	}
	if reflect.DeepEqual(got, want) {
		return ""
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	return at + ": " + string(g) + ", golden " + string(w) + "\n"
}

// TestReportGoldenFleet is a fleet of two models where every rule has
// something to say at once: a backend held back for its tokenizer, one
// ejected as an outlier, connect failures, a full KV cache, a slow decoder,
// a growing queue, door and backend rejections and slow clients. Its report
// holds the evidence of every finding (others) and the compatibility and
// unavailable lists the scenarios do not reach.
func TestReportGoldenFleet(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	const qwen = "qwen-7b"
	for _, b := range []string{"a1", "a2", "a3"} {
		e.Warmup(mdl, b, warmTTFT, warmTPOT)
	}
	for _, b := range []string{"q1", "q2", "q3"} {
		e.Warmup(qwen, b, warmTTFT, warmTPOT)
	}
	since := t0.Add(-10 * time.Minute)
	run(c, span, time.Second, func(i int, _ float64) {
		for k := 0; k < 3; k++ {
			ok(e, c.t, "a1", dur(warmTTFT, jitter(i+k, 0.1)), 4*warmTPOT)
			ok(e, c.t, "a2", dur(warmTTFT, jitter(i+k, 0.1)), dur(warmTPOT, jitter(i, 0.05)))
			e.Observe(Observation{Time: c.t, Model: qwen, Backend: "q1", TTFT: 6 * warmTTFT, TPOT: warmTPOT, Total: time.Second,
				ClientStall: 400 * time.Millisecond})
			e.Observe(Observation{Time: c.t, Model: qwen, Backend: "q2", TTFT: warmTTFT, TPOT: warmTPOT, Total: time.Second})
		}
		e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded", Total: time.Millisecond})
		if i%2 == 0 {
			e.Observe(Observation{Time: c.t, Model: mdl, Backend: "a2", Layer: LayerBackend, Reason: "backend_rejected", Total: time.Millisecond})
			e.Observe(Observation{Time: c.t, Model: qwen, Backend: "q2", Layer: LayerConnect, Reason: "backend_connect_failed", Total: time.Millisecond})
			e.Observe(Observation{Time: c.t, Model: qwen, Layer: LayerQueue, Reason: "queue_timeout", Queue: time.Second, Total: time.Second})
			e.Observe(Observation{Time: c.t, Model: qwen, Backend: "q1", Layer: LayerClient, Reason: "client_closed", Total: time.Second})
		}
		if i%3 == 0 {
			e.Observe(Observation{Time: c.t, Model: qwen, Backend: "q2", Layer: LayerPrefill, Reason: "backend_timeout", Total: 30 * time.Second})
		}
		if i%5 == 0 {
			e.GatewayQueue(qwen, i/10, c.t)
			e.GatewayQueue(mdl, 1, c.t)
			sample(e, c.t, "a1", 6, float64(i/20), 0.97, float64(i))
			sample(e, c.t, "a2", 4, 0, 0.4, 0)
			e.Sample(BackendSample{Time: c.t, Model: mdl, Backend: "a3", Ready: false, NoGauges: true, State: "unhealthy",
				StateReason: "tokenizer mismatch", StateSince: since, GaugesState: "unknown",
				Compat: &Compatibility{Check: "tokenizer", Gateway: 41, Backend: 44}})
			e.Sample(BackendSample{Time: c.t, Model: qwen, Backend: "q1", Running: 3, Waiting: float64(i / 15), KVUsage: 0.5,
				Ready: true, State: "ready", StateSince: since, GaugesState: "fresh"})
			e.Sample(BackendSample{Time: c.t, Model: qwen, Backend: "q2", Running: 3, KVUsage: 0.5, Ready: true, State: "ready",
				StateSince: since, GaugesState: "fresh", Compat: &Compatibility{Check: "max_model_len", Gateway: 8192, Backend: 4096, Accepted: true}})
			e.Sample(BackendSample{Time: c.t, Model: qwen, Backend: "q3", Running: 1, KVUsage: 0.1, Ready: true, Ejected: true,
				State: "ready", StateReason: "ejected until 22:20:00", StateSince: since, GaugesState: "stale"})
		}
	})
	r := e.Report()
	golden(t, t.Name(), r)
	for _, m := range r.Models {
		golden(t, t.Name()+"-"+m.Model+"-verdict", Report{Verdict: m.Verdict, Evidence: m.Evidence, Said: m.Said, Next: m.Next, Others: m.Others})
	}
}

// TestReportGoldenQuiet: an engine with nothing observed, and one with
// samples only.
func TestReportGoldenQuiet(t *testing.T) {
	e, c := newTestEngine(DefaultConfig())
	golden(t, "quiet-empty", e.Report())
	e.Sample(BackendSample{Time: c.t, Model: mdl, Backend: be1, Running: 1, KVUsage: 0.1, Ready: true, State: "ready", StateSince: t0})
	e.GatewayQueue(mdl, 2, c.t)
	golden(t, "quiet-samples", e.Report())
}

// TestEvidenceFieldsAreItsJSON: the Evidence maps hold exactly the fields
// the typed evidence marshals to (names, omitted fields, values), for every
// finding, every scope and every backend of the rule cases.
func TestEvidenceFieldsAreItsJSON(t *testing.T) {
	tm := &terms{th: DefaultThresholds(), window: 5 * time.Minute, recent: 20 * time.Second, now: t0}
	same := func(what string, typed any) {
		t.Helper()
		a, err := json.Marshal(typed)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(fields(typed))
		if err != nil {
			t.Fatal(err)
		}
		var x, y any
		_ = json.Unmarshal(a, &x)
		_ = json.Unmarshal(b, &y)
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: fields differ from its JSON:\n%s", what, jsonDiff("", y, x))
		}
	}
	n := 0
	for verdict, build := range ruleCases {
		mw, _ := build()
		s := newSnapshot(tm, []*modelWindow{mw})
		same(verdict+" scope", s.evidence())
		for _, r := range rules {
			if ev, ok := r.fires(s); ok {
				same(verdict+" "+r.verdict, ev)
				n++
			}
		}
		for _, b := range mw.backends {
			same(verdict+" "+b.name, b.evidence(tm))
		}
	}
	if n < len(rules) {
		t.Errorf("%d findings checked, fewer than the %d rules", n, len(rules))
	}
}
