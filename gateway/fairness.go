package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/maitred-dev/maitred/admission"
)

// Fairness between tenants (a model's fairness: tokens): the request's
// ticket names its flow, its API key (pipeline.go); the pool charges the
// flow its input at the grant, the attempt its output as events stream
// (clockEvents) and settles both to the answer's usage before the lease
// is released (settleFlow). The flows' shares are exported at scrape time
// (flowCollector), listed in /debug/fairness and on the status page.

// noFlow names the flow of requests that carry no key (a gateway without
// auth: one flow) in the access log and /debug.
const noFlow = "-"

// FlowSyncInterval is how often each replica pushes its flows' service
// to the shared store and reads the others': the counters of two
// replicas differ by at most the service the others charged a flow in
// one interval (and a round trip), which adds to VTC's bound across
// replicas (docs/fairness.md). While flows are contended (a request
// waits on this replica, or another replica claims a waiting flow) it
// syncs every FlowSyncContended instead, so that a flow waiting on one
// replica is seen soon by the others, which hold their grants back for it
// for at most FlowHoldBack (admission.Pool.SyncFlows).
const (
	FlowSyncInterval  = 100 * time.Millisecond
	FlowSyncContended = 25 * time.Millisecond
	FlowHoldBack      = FlowSyncInterval
)

// RunFlowSync shares the flows of every model under fairness tokens with
// the other replicas, every FlowSyncInterval (FlowSyncContended while
// contended), until ctx is done; it returns at once without a FlowSync.
// A failed sync keeps the deltas for the next (the store's own state says
// it is down).
func (g *Gateway) RunFlowSync(ctx context.Context) {
	g.runFlowSync(ctx, FlowSyncInterval, FlowSyncContended, FlowHoldBack)
}

func (g *Gateway) runFlowSync(ctx context.Context, every, contended, hold time.Duration) {
	if g.flowSync == nil {
		return
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		busy := false
		for _, rt := range g.live().models {
			if rt.fair {
				c, _ := rt.pool.SyncFlows(ctx, g.flowSync, hold)
				busy = busy || c
			}
		}
		if busy {
			t.Reset(contended)
		} else {
			t.Reset(every)
		}
	}
}

// flowName is the request's flow as the access line names it.
func (x *exchange) flowName() string {
	if x.key == nil {
		return noFlow
	}
	return x.key.name
}

// settleFlow gives the lease the answer's usage, each part that is known
// (reported by the backend, or counted), so that the flow is charged that
// rather than the door's estimate and the streamed events. A request the
// backend refused (4xx), or that never reached a live backend, used
// nothing; an answer whose usage is unknown keeps what was charged.
func (a *attempt) settleFlow(res attemptResult) {
	l := a.lease
	switch st := a.usage.status; {
	case st == 0 && res.neverSent, st >= http.StatusBadRequest && st < http.StatusInternalServerError:
		l.SettleInput(0)
		l.SettleOutput(0)
	case st >= http.StatusOK && st < http.StatusMultipleChoices:
		p := a.usage.parts()
		if p.promptFrom != usageUnknown {
			l.SettleInput(p.prompt)
		}
		if p.completionFrom != usageUnknown {
			l.SettleOutput(p.completion)
		}
	}
}

var (
	flowServiceDesc = prometheus.NewDesc("maitred_flow_service_tokens_total",
		"Weighted token service of a flow's (API key's) finished requests, under the model's fairness tokens: input x fairness_weights.input + output x fairness_weights.output, settled to the backends' usage. rate() / the key's weight is what the queue evens out.",
		[]string{"model", "flow"}, nil)
	flowTokensDesc = prometheus.NewDesc("maitred_flow_tokens_total",
		"Tokens of a flow's finished requests under fairness tokens, by kind (input, output), settled to the backends' usage.",
		[]string{"model", "flow", "kind"}, nil)
	flowCounterDesc = prometheus.NewDesc("maitred_flow_virtual_counter",
		"A flow's virtual token counter under fairness tokens: its weighted service (requests in flight included, as charged so far, and other replicas' as last synced) over its weight, lifts included; the queue grants the waiting flow with the least.",
		[]string{"model", "flow"}, nil)
	flowWaitingDesc = prometheus.NewDesc("maitred_flow_waiting",
		"Requests of a flow waiting in the model's queue under fairness tokens.",
		[]string{"model", "flow"}, nil)
)

// flowCollector exports the flows of the models under fairness tokens.
type flowCollector struct{ g *Gateway }

func (c flowCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{flowServiceDesc, flowTokensDesc, flowCounterDesc, flowWaitingDesc} {
		ch <- d
	}
}

func (c flowCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rt := range c.g.live().models {
		for _, f := range rt.pool.Flows() {
			name := flowLabel(f.Name)
			ch <- prometheus.MustNewConstMetric(flowServiceDesc, prometheus.CounterValue, f.Service, rt.name, name)
			ch <- prometheus.MustNewConstMetric(flowTokensDesc, prometheus.CounterValue, float64(f.TokensIn), rt.name, name, "input")
			ch <- prometheus.MustNewConstMetric(flowTokensDesc, prometheus.CounterValue, float64(f.TokensOut), rt.name, name, "output")
			ch <- prometheus.MustNewConstMetric(flowCounterDesc, prometheus.GaugeValue, f.Counter, rt.name, name)
			ch <- prometheus.MustNewConstMetric(flowWaitingDesc, prometheus.GaugeValue, float64(f.Waiting), rt.name, name)
		}
	}
}

// flowLabel is a flow's name in metrics and /debug: its key's, or noFlow.
func flowLabel(name string) string {
	if name == "" {
		return noFlow
	}
	return name
}

// flowShare is one flow of a model in /debug/fairness and the status page.
type flowShare struct {
	Flow     string  `json:"flow"`
	Weight   float64 `json:"weight"`
	Counter  float64 `json:"virtual_counter"`
	Service  float64 `json:"service_tokens"`
	Share    float64 `json:"share"` // of the model's service
	Input    int64   `json:"input_tokens"`
	Output   int64   `json:"output_tokens"`
	Waiting  int     `json:"waiting"`
	InFlight int     `json:"in_flight"`
}

// modelFairness is one model's fairness in /debug/fairness.
type modelFairness struct {
	Model        string      `json:"model"`
	Fairness     string      `json:"fairness"`
	InputWeight  float64     `json:"input_weight,omitempty"`
	OutputWeight float64     `json:"output_weight,omitempty"`
	Flows        []flowShare `json:"flows"`
}

// fairness lists every model's policy and, under tokens, its flows'
// shares: each flow's part of the model's settled service.
func (g *Gateway) fairness() []modelFairness {
	var out []modelFairness
	for _, rt := range g.live().models {
		mf := modelFairness{Model: rt.name, Fairness: admission.FIFO.String(), Flows: []flowShare{}}
		if rt.fair {
			mf.Fairness = admission.Tokens.String()
			mf.InputWeight, mf.OutputWeight = rt.inW, rt.outW
		}
		mf.Flows = append(mf.Flows, shares(rt)...)
		out = append(out, mf)
	}
	return out
}

// shares are the model's flows, each with its share of the model's
// settled service.
func shares(rt *modelRuntime) []flowShare {
	flows := rt.pool.Flows()
	total := 0.0
	for _, f := range flows {
		total += f.Service
	}
	out := make([]flowShare, 0, len(flows))
	for _, f := range flows {
		s := flowShare{Flow: flowLabel(f.Name), Weight: f.Weight, Counter: f.Counter, Service: f.Service,
			Input: f.TokensIn, Output: f.TokensOut, Waiting: f.Waiting, InFlight: f.InFlight}
		if total > 0 {
			s.Share = f.Service / total
		}
		out = append(out, s)
	}
	return out
}

// statusFlows are the status page's rows of the model's flows.
func statusFlows(rt *modelRuntime) []statusFlow {
	var out []statusFlow
	for _, s := range shares(rt) {
		out = append(out, statusFlow{flowShare: s, SharePct: 100 * s.Share})
	}
	return out
}

// debugFairness answers GET /debug/fairness: {"models": [...]}, each
// model's policy and its flows' shares (fairness).
func (g *Gateway) debugFairness(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	writeJSON(w, http.StatusOK, struct {
		Models []modelFairness `json:"models"`
	}{g.fairness()})
	return nil
}
