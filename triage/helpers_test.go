package triage

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// t0 is aligned to the 10s buckets of the default 5m window.
var t0 = time.Unix(1_700_000_000, 0)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestEngine(cfg Config) (*Engine, *fakeClock) {
	c := &fakeClock{t: t0}
	return New(cfg, c.now), c
}

// run steps the clock from its current time through dur in steps of step,
// calling f with the step number and the fraction of dur elapsed. The clock
// is left at the last step's time.
func run(c *fakeClock, dur, step time.Duration, f func(i int, frac float64)) {
	start := c.t
	n := int(dur / step)
	for i := 0; i < n; i++ {
		c.t = start.Add(time.Duration(i) * step)
		f(i, float64(i)/float64(n))
	}
}

// jitter returns a deterministic factor in [1-a, 1+a] for step i.
func jitter(i int, a float64) float64 {
	return 1 + a*math.Sin(float64(i)*1.7)
}

func dur(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

func num(t *testing.T, ev map[string]any, key string) float64 {
	t.Helper()
	v, ok := ev[key]
	if !ok {
		t.Fatalf("evidence has no %q: %v", key, ev)
	}
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	}
	t.Fatalf("evidence %q is %T, not a number", key, v)
	return 0
}

// near asserts evidence key is within rel (relative) of want.
func near(t *testing.T, ev map[string]any, key string, want, rel float64) {
	t.Helper()
	nearValue(t, key, num(t, ev, key), want, rel)
}

// nearValue asserts got is within rel (relative) of want.
func nearValue(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want)+1e-9 {
		t.Errorf("%s = %v, want %v ±%.0f%%", what, got, want, rel*100)
	}
}

func verdicts(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Verdict)
	}
	return out
}

func mustJSON(t *testing.T, r Report) {
	t.Helper()
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
}

func dump(t *testing.T, r Report) {
	t.Helper()
	b, _ := json.MarshalIndent(r, "", "  ")
	t.Logf("%s", b)
}
