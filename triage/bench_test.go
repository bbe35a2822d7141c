package triage

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkObserve(b *testing.B) {
	e, c := newTestEngine(DefaultConfig())
	o := Observation{Model: mdl, Backend: be1, TTFT: warmTTFT, TPOT: warmTPOT, Total: time.Second, ClientStall: time.Millisecond}
	e.Observe(o)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.t = t0.Add(time.Duration(i) * time.Millisecond)
		o.Time = c.t
		e.Observe(o)
	}
}

// BenchmarkReport: 8 models x 8 backends = 64 backends, every bucket full.
func BenchmarkReport(b *testing.B) {
	e, c := newTestEngine(DefaultConfig())
	run(c, span, time.Second, func(i int, _ float64) {
		for m := 0; m < 8; m++ {
			model := fmt.Sprintf("m%d", m)
			e.GatewayQueue(model, i%4, c.t)
			for k := 0; k < 8; k++ {
				be := fmt.Sprintf("b%d", k)
				e.Observe(Observation{Time: c.t, Model: model, Backend: be, TTFT: dur(warmTTFT, jitter(i+k, 0.3)),
					TPOT: dur(warmTPOT, jitter(i+k, 0.2)), Total: time.Second})
				if i%5 == 0 {
					e.Sample(BackendSample{Time: c.t, Model: model, Backend: be, Running: 8, KVUsage: 0.5, Ready: true})
				}
			}
		}
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = e.Report()
	}
}
