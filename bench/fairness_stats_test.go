package main

import (
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestMergeAndIntersectSpans(t *testing.T) {
	a := mergeSpans([]span{{50 * ms, 60 * ms}, {0, 10 * ms}, {5 * ms, 20 * ms}, {20 * ms, 30 * ms}, {40 * ms, 40 * ms}})
	if want := []span{{0, 30 * ms}, {50 * ms, 60 * ms}}; !slices.Equal(a, want) {
		t.Fatalf("merged %v, want %v", a, want)
	}
	b := mergeSpans([]span{{25 * ms, 55 * ms}, {58 * ms, 70 * ms}})
	if got, want := intersectSpans(a, b), []span{{25 * ms, 30 * ms}, {50 * ms, 55 * ms}, {58 * ms, 60 * ms}}; !slices.Equal(got, want) {
		t.Fatalf("intersection %v, want %v", got, want)
	}
	if got := intersectSpans(a, nil); len(got) != 0 {
		t.Fatalf("intersection with nothing: %v", got)
	}
}

// The gap is the largest difference over any window inside a span, not
// over the whole span: A leads by 30, then B catches up and leads by 10,
// a swing of 40; credits outside the spans, or at a span's start, do not
// count.
func TestServiceGap(t *testing.T) {
	a := []credit{{10 * ms, 1000}, {100 * ms, 10}, {110 * ms, 20}, {150 * ms, 5}}
	b := []credit{{100 * ms, 3}, {120 * ms, 12}, {130 * ms, 35}, {500 * ms, 1000}}
	spans := []span{{0, 5 * ms}, {100 * ms, 140 * ms}}
	// In (100, 140]: A +20 at 110 (D 20), B +12 at 120 (D 8), B +35 at 130
	// (D -27): the range is 20 - (-27) = 47. A's 10 and B's 3 at 100 are
	// at the span's start.
	gap, where := serviceGap(a, b, 1, 1, spans)
	if gap != 47 || where != spans[1] {
		t.Fatalf("gap %v in %v, want 47 in %v", gap, where, spans[1])
	}
	// Weights divide each flow's service: B's weight 5 makes its 47 count 9.4.
	if gap, _ := serviceGap(a, b, 1, 5, spans); gap != 20 {
		t.Fatalf("weighted gap %v, want 20 (A's 20 against B's 47/5)", gap)
	}
	// Credits at one moment land together: A and B both +50 at 120 is no gap.
	if gap, _ := serviceGap([]credit{{120 * ms, 50}}, []credit{{120 * ms, 50}}, 1, 1, spans); gap != 0 {
		t.Fatalf("simultaneous credits: gap %v, want 0", gap)
	}
}

func TestPerWindowAndTotal(t *testing.T) {
	c := []credit{{0, 100}, {1 * ms, 1}, {10 * ms, 2}, {11 * ms, 4}, {25 * ms, 8}, {31 * ms, 16}}
	// Windows (0, 10], (10, 20], (20, 30]: the credit at 0 is before the
	// first, the one at 31 after the last whole window.
	if got, want := perWindow(c, 0, 35*ms, 10*ms), []float64{3, 4, 8}; !slices.Equal(got, want) {
		t.Fatalf("windows %v, want %v", got, want)
	}
	if got := total(c, 10*ms, 31*ms); got != 28 {
		t.Fatalf("total (10, 31]: %v, want 28", got)
	}
}

func TestRequestCreditsAndBacklog(t *testing.T) {
	w := fairCost{in: 1, out: 2}
	// Answered: input at dispatch, 6 completion tokens over 3 events.
	r := fairReq{sent: 0, dispatched: 40 * ms, end: 90 * ms, prompt: 7, completion: 6, usage: true, events: []time.Duration{50 * ms, 60 * ms, 70 * ms}}
	want := []credit{{40 * ms, 7}, {50 * ms, 4}, {60 * ms, 4}, {70 * ms, 4}}
	if got := r.credits(w, 99); !slices.Equal(got, want) {
		t.Fatalf("credits %v, want %v", got, want)
	}
	if got := r.backlog(time.Second); got != (span{0, 40 * ms}) {
		t.Fatalf("backlog %v", got)
	}
	// Cut before its usage: the prompt given, one token an event.
	cut := fairReq{dispatched: 10 * ms, events: []time.Duration{20 * ms}}
	if got, want := cut.credits(w, 5), []credit{{10 * ms, 5}, {20 * ms, 2}}; !slices.Equal(got, want) {
		t.Fatalf("cut credits %v, want %v", got, want)
	}
	// Never dispatched: no service, backlogged until the run's end.
	waiting := fairReq{sent: 5 * ms, dispatched: -1, end: 2 * time.Second}
	if got := waiting.credits(w, 5); got != nil {
		t.Fatalf("undispatched credits %v", got)
	}
	if got := waiting.backlog(time.Second); got != (span{5 * ms, time.Second}) {
		t.Fatalf("undispatched backlog %v", got)
	}
}

func TestTimingPhase(t *testing.T) {
	h := "door;dur=0.031, queue;dur=12.500, backend;dur=50.250"
	if got := timingPhase(h, "backend"); got != 50.25 {
		t.Fatalf("backend %v", got)
	}
	if got := timingPhase(h, "nope"); got != 0 {
		t.Fatalf("absent %v", got)
	}
}

// A run of three requests: A's first dispatched at 10 ms and streaming,
// its second waiting to the end, B's waiting 100 ms. Both are backlogged
// while B waits, and in that window A's two events count, and B's input
// at its dispatch.
func TestAnalyseFair(t *testing.T) {
	run := fairRun{d: time.Second, reqs: []fairReq{
		{flow: 0, long: true, sent: 0, dispatched: 10 * ms, end: 300 * ms, status: 200, ok: true, prompt: 10, completion: 4, usage: true,
			events: []time.Duration{50 * ms, 80 * ms, 150 * ms, 250 * ms}},
		{flow: 0, long: true, sent: 0, dispatched: -1, end: time.Second}, // still waiting at the end
		{flow: 1, sent: 20 * ms, dispatched: 120 * ms, end: 200 * ms, queueMs: 100, status: 200, ok: true, prompt: 3, completion: 1, usage: true,
			events: []time.Duration{190 * ms}},
	}}
	f := analyseFair(run, [2]float64{1, 1}, 0, run.d)
	if want := []span{{20 * ms, 120 * ms}}; !slices.Equal(f.both, want) {
		t.Fatalf("both backlogged %v, want %v", f.both, want)
	}
	// In (20, 120]: A +2 at 50, +2 at 80; B +3 at 120 (its input): D
	// goes 0, 2, 4, 1: range 4.
	if f.gap != 4 {
		t.Fatalf("gap %v, want 4", f.gap)
	}
	if f.cost != 18 || f.bound() != 36 {
		t.Fatalf("largest cost %v (bound %v), want 18 (36)", f.cost, f.bound())
	}
	if f.flows[0].service != 18 || f.flows[1].service != 5 {
		t.Fatalf("service %v and %v, want 18 and 5", f.flows[0].service, f.flows[1].service)
	}
	if !slices.Equal(f.flows[1].waits, []float64{100}) || f.flows[0].ok != 1 || f.flows[1].ok != 1 || f.flows[1].sent != 1 {
		t.Fatalf("flows %+v", f.flows)
	}
	if got := quantile(f.flows[0].took, .5); got != 290 {
		t.Fatalf("A's request took %v ms, want 290", got)
	}
}
