package main

import (
	"testing"
	"time"
)

func TestServerTimingsAdd(t *testing.T) {
	st := serverTimings{}
	for _, h := range []string{
		"door;dur=0.031, queue;dur=0.004, backend;dur=0.250",
		"door;desc=\"the door\";dur=0.010",    // any parameter order
		"",                                    // the other paths send none
		"door;dur=abc, queue, backend;dur=-1", // unparsable values are left out
	} {
		st.add(h)
	}
	want := map[string][]time.Duration{
		"door":    {31 * time.Microsecond, 10 * time.Microsecond},
		"queue":   {4 * time.Microsecond},
		"backend": {250 * time.Microsecond},
	}
	if len(st) != len(want) {
		t.Fatalf("phases %v, want %v", st, want)
	}
	for name, w := range want {
		got := st[name]
		if len(got) != len(w) {
			t.Fatalf("%s: %v, want %v", name, got, w)
		}
		for i := range w {
			if d := got[i] - w[i]; d < -time.Nanosecond || d > time.Nanosecond {
				t.Errorf("%s[%d] = %v, want %v", name, i, got[i], w[i])
			}
		}
	}
	q := st.quantiles()
	if q["door"].P50 < 30 || q["door"].P50 > 32 { // two values: the upper one
		t.Errorf("door p50 = %.3f us, want 31", q["door"].P50)
	}
	if q["queue"].P99 != 4 {
		t.Errorf("queue p99 = %.3f us, want 4", q["queue"].P99)
	}
}

func TestQuantile(t *testing.T) {
	d := []float64{1, 2, 3, 4}
	for _, tt := range []struct{ p, want float64 }{{0, 1}, {.5, 3}, {.99, 4}, {1, 4}} {
		if got := quantile(d, tt.p); got != tt.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", d, tt.p, got, tt.want)
		}
	}
	if got := quantile([]time.Duration(nil), .5); got != 0 {
		t.Errorf("quantile of nothing = %v, want 0", got)
	}
}
