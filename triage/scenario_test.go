package triage

import (
	"slices"
	"testing"
	"time"
)

const (
	mdl      = "llama-8b"
	be1      = "http://10.0.0.1:8000"
	warmTTFT = 50 * time.Millisecond
	warmTPOT = 20 * time.Millisecond
)

// ok observes one successful streamed request of 100 output tokens.
func ok(e *Engine, at time.Time, backend string, ttft, tpot time.Duration) {
	e.Observe(Observation{
		Time: at, Model: mdl, Backend: backend,
		Door: time.Millisecond, Connect: 2 * time.Millisecond, TTFT: ttft, TPOT: tpot,
		Total: time.Millisecond + 2*time.Millisecond + ttft + 99*tpot, OutputTokens: 100, Stream: true,
	})
}

func sample(e *Engine, at time.Time, backend string, running, waiting, kv, preempt float64) {
	e.Sample(BackendSample{
		Time: at, Model: mdl, Backend: backend, Running: running, Waiting: waiting, KVUsage: kv,
		Preemptions: preempt, Ready: true, State: "ready", StateSince: t0.Add(-time.Hour),
	})
}

// The window is 5m; every scenario runs 5 minutes at one step a second and
// reports at the last step, so all of it is in the window.
const span = 5 * time.Minute

// scenario feeds an engine for span and names the verdict it should get.
type scenario struct {
	name    string
	feed    func(e *Engine, c *fakeClock)
	verdict string
	check   func(t *testing.T, r Report)
}

// scenarios are the triage manual's symptom classes, each driven through
// the engine as the gateway would see it.
var scenarios = []scenario{
	{
		name: "a/boundary: flood of over-long prompts",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, _ float64) {
				for k := 0; k < 5; k++ {
					ok(e, c.t, be1, dur(warmTTFT, jitter(i+k, 0.1)), dur(warmTPOT, jitter(i+k, 0.05)))
				}
				for k := 0; k < 3; k++ {
					e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded",
						Door: 3 * time.Millisecond, Total: 3 * time.Millisecond})
				}
				if i%7 == 0 {
					e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "invalid_json", Total: time.Millisecond})
				}
				if i%5 == 0 {
					sample(e, c.t, be1, 5, 0, 0.3, 7)
				}
			})
		},
		verdict: VerdictBoundary,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "door_rejections", 900+43, 0)
			rbr := ev["rejections_by_reason"].(map[string]int)
			if rbr["context_length_exceeded"] != 900 || rbr["invalid_json"] != 43 {
				t.Errorf("rejections_by_reason = %v", rbr)
			}
			near(t, ev, "door_share", 1, 0)
			near(t, ev, "ttft_ratio", 1, 0.1)
			near(t, ev, "tpot_ratio", 1, 0.06)
			if r.Requests != 300*8+43 {
				t.Errorf("requests = %d", r.Requests)
			}
		},
	},
	{
		name: "b/admission_or_prefill_pressure: load above capacity, ITL fixed",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, f float64) {
				for k := 0; k < 10; k++ {
					ok(e, c.t, be1, dur(400*time.Millisecond, jitter(i+k, 0.03)), dur(warmTPOT, jitter(i+k, 0.05)))
				}
				if i%5 == 0 {
					sample(e, c.t, be1, 32, 30*f, 0.7, 3) // waiting 0 -> 30: +6/min; running flat
					e.GatewayQueue(mdl, int(20*f), c.t)   // 0 -> 20: +4/min
				}
			})
		},
		verdict: VerdictPrefill,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "ttft_p50_ms", 400, 0.03)
			near(t, ev, "ttft_baseline_ms", 50, 0)
			near(t, ev, "ttft_ratio", 8, 0.03)
			near(t, ev, "tpot_ratio", 1, 0.05)
			near(t, ev, "waiting_slope_per_min", 6, 0.05)
			near(t, ev, "waiting_first", 0, 0)
			near(t, ev, "waiting_last", 29.5, 0.01)
			near(t, ev, "queue_depth_first", 0, 0)
			near(t, ev, "queue_depth_last", 19, 0)
			near(t, ev, "queue_slope_per_min", 4, 0.05)
			near(t, ev, "running_slope_per_min", 0, 0)
			near(t, ev, "affected_share", 1, 0)
		},
	},
	{
		name: "c/decode_pressure: ITL raised under fixed load",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, _ float64) {
				for k := 0; k < 10; k++ {
					ok(e, c.t, be1, dur(60*time.Millisecond, jitter(i+k, 0.05)), dur(60*time.Millisecond, jitter(i+k, 0.05)))
				}
				if i%5 == 0 {
					sample(e, c.t, be1, 24, 0, 0.5, 0)
					e.GatewayQueue(mdl, 0, c.t)
				}
			})
		},
		verdict: VerdictDecode,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "tpot_p50_ms", 60, 0.05)
			near(t, ev, "tpot_baseline_ms", 20, 0)
			near(t, ev, "tpot_ratio", 3, 0.05)
			near(t, ev, "ttft_ratio", 1.2, 0.05)
			if len(r.Others) != 0 {
				t.Errorf("others = %v", verdicts(r.Others))
			}
		},
	},
	{
		name: "d/kv_pressure: KV >= 0.95, preemptions rising",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, f float64) {
				for k := 0; k < 10; k++ {
					ok(e, c.t, be1, dur(150*time.Millisecond, jitter(i+k, 0.05)), dur(24*time.Millisecond, jitter(i+k, 0.05)))
				}
				if i%5 == 0 {
					// +2 preemptions per 5s scrape = 24/min; waiting grows, running falls
					sample(e, c.t, be1, 40-10*f, 20*f, 0.96+0.01*f, float64(1000+2*(i/5)))
				}
			})
		},
		verdict: VerdictKV,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "kv_usage_max", 0.97, 0.005)
			near(t, ev, "kv_usage_mean", 0.965, 0.005)
			near(t, ev, "preemptions_per_min", 24, 0.001)
			near(t, ev, "waiting_slope_per_min", 4, 0.05)
			near(t, ev, "running_slope_per_min", -2, 0.05)
			// TTFT 3x and waiting growing: prefill pressure matches too, explained by KV.
			if !slices.Contains(verdicts(r.Others), VerdictPrefill) {
				t.Errorf("others = %v, want %s among them", verdicts(r.Others), VerdictPrefill)
			}
		},
	},
	{
		name: "e/backend_unavailable: the backend killed",
		feed: func(e *Engine, c *fakeClock) {
			died := t0.Add(2 * time.Minute)
			run(c, span, time.Second, func(i int, _ float64) {
				alive := c.t.Before(died)
				for k := 0; k < 5; k++ {
					if alive {
						ok(e, c.t, be1, dur(warmTTFT, jitter(i+k, 0.05)), warmTPOT)
					} else if k < 2 {
						e.Observe(Observation{Time: c.t, Model: mdl, Backend: be1, Layer: LayerConnect, Reason: "backend_connect_failed",
							Connect: time.Millisecond, Total: 2 * time.Millisecond})
					} else {
						e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerUnready, Reason: "no_ready_backend",
							Queue: 5 * time.Second, Total: 5 * time.Second})
					}
				}
				if i%5 == 0 {
					s := BackendSample{Time: c.t, Model: mdl, Backend: be1, Running: 4, KVUsage: 0.2, Ready: true, State: "ready", StateSince: t0.Add(-time.Hour)}
					if !alive {
						s = BackendSample{Time: c.t, Model: mdl, Backend: be1, Ready: false, State: "unhealthy",
							StateReason: "health check: connection refused", StateSince: died.Add(3 * time.Second)}
					}
					e.Sample(s)
				}
			})
		},
		verdict: VerdictUnavailable,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "connect_failures", 360, 0)
			near(t, ev, "no_ready_backend_failures", 540, 0)
			near(t, ev, "unavailable_share", 900.0/1500, 0.001)
			near(t, ev, "backends_ready", 0, 0)
			down := ev["unavailable_backends"].([]map[string]any)
			if len(down) != 1 {
				t.Fatalf("unavailable_backends = %v", down)
			}
			d := down[0]
			if d["backend"] != mdl+"/"+be1 || d["state"] != "unhealthy" || d["state_reason"] != "health check: connection refused" ||
				d["since"] != "2023-11-14T22:15:23Z" || d["ready"] != false {
				t.Errorf("unavailable backend = %v", d)
			}
			near(t, d, "not_ready_share", 0.6, 0)
			near(t, d, "for_s", 299-123, 0)
		},
	},
	{
		name: "f/client_side: slow readers and disconnects",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, _ float64) {
				for k := 0; k < 10; k++ {
					o := Observation{Time: c.t, Model: mdl, Backend: be1, TTFT: warmTTFT, TPOT: warmTPOT,
						Total: 2 * time.Second, OutputTokens: 100, Stream: true}
					if k < 4 { // 40% of requests spend half their time blocked on the client
						o.ClientStall = time.Second
					}
					if k == 0 && i%2 == 0 { // 5% of requests: the client gave up
						o.Layer, o.Reason = LayerClient, "client_closed"
					}
					e.Observe(o)
				}
				if i%5 == 0 {
					sample(e, c.t, be1, 10, 0, 0.3, 0)
				}
			})
		},
		verdict: VerdictClient,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "stalled_request_share", 0.4, 0)
			near(t, ev, "client_stall_share", 0.2, 0)
			near(t, ev, "client_closed", 150, 0)
			near(t, ev, "client_failure_share", 1, 0)
			near(t, ev, "ttft_ratio", 1, 0)
			near(t, ev, "tpot_ratio", 1, 0)
		},
	},
	{
		name: "g/healthy: normal load",
		feed: func(e *Engine, c *fakeClock) {
			run(c, span, time.Second, func(i int, _ float64) {
				for k := 0; k < 8; k++ {
					ok(e, c.t, be1, dur(55*time.Millisecond, jitter(i+k, 0.2)), dur(21*time.Millisecond, jitter(i+k, 0.1)))
				}
				if i == 100 || i == 200 { // a stray bad request now and then
					e.Observe(Observation{Time: c.t, Model: mdl, Layer: LayerDoor, Reason: "context_length_exceeded", Total: time.Millisecond})
				}
				if i%5 == 0 {
					sample(e, c.t, be1, 8+float64(i%3), float64(i%2), 0.4, 12)
					e.GatewayQueue(mdl, i%2, c.t)
				}
			})
		},
		verdict: VerdictHealthy,
		check: func(t *testing.T, r Report) {
			ev := r.Evidence
			near(t, ev, "ttft_ratio", 1.1, 0.05)
			near(t, ev, "tpot_ratio", 1.05, 0.05)
			near(t, ev, "failures", 2, 0)
			near(t, ev, "preemptions_per_min", 0, 0)
			if len(r.Others) != 0 {
				t.Errorf("others = %v", verdicts(r.Others))
			}
		},
	},
}

func TestScenarios(t *testing.T) {
	for _, tc := range scenarios {
		t.Run(tc.name, func(t *testing.T) {
			e, c := newTestEngine(DefaultConfig())
			e.Warmup(mdl, be1, warmTTFT, warmTPOT)
			tc.feed(e, c)
			r := e.Report()
			mustJSON(t, r)
			golden(t, "scenario-"+tc.name, r)
			if r.Verdict != tc.verdict {
				dump(t, r)
				t.Fatalf("verdict = %s, want %s (others %v)", r.Verdict, tc.verdict, verdicts(r.Others))
			}
			if len(r.Next) == 0 {
				t.Errorf("no next steps")
			}
			if len(r.Models) != 1 || r.Models[0].Verdict != tc.verdict {
				t.Errorf("model verdicts = %+v", r.Models)
			}
			tc.check(t, r)
			if t.Failed() {
				dump(t, r)
			}
		})
	}
}
