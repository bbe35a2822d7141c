package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// prefixEvidence reads, from a gateway's registry at the end of a run,
// why it routed as it did: its routing decisions by policy (p2c under
// routing: precise is a fallback), the precise fallbacks by reason, the
// hit tokens it expected against the prompt tokens it scored, and each
// backend's KV-event index (live, blocks, events, gaps, replays, clears,
// decode errors; withIndex). One line per family, for the scenario's
// report.
func prefixEvidence(reg *prometheus.Registry, withIndex bool) string {
	if reg == nil {
		return ""
	}
	fams, err := reg.Gather()
	if err != nil {
		return "evidence: " + err.Error()
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	var b strings.Builder
	labelled := func(title, family, label string) {
		f := byName[family]
		if f == nil {
			return
		}
		var parts []string
		for _, m := range f.GetMetric() {
			parts = append(parts, fmt.Sprintf("%s=%.0f", labelOf(m, label), value(m)))
		}
		slices.Sort(parts)
		fmt.Fprintf(&b, "  %s: %s\n", title, strings.Join(parts, " "))
	}
	labelled("routing decisions", "maitred_routing_decisions_total", "policy")
	labelled("precise fallbacks", "maitred_precise_fallbacks_total", "reason")
	if h, p := byName["maitred_prefix_hit_tokens_total"], byName["maitred_prefix_prompt_tokens_total"]; h != nil && p != nil && sum(p) > 0 {
		fmt.Fprintf(&b, "  expected hit tokens: %.1f%% of %.0f prompt tokens scored\n", 100*sum(h)/sum(p), sum(p))
	}
	if !withIndex {
		return b.String()
	}
	for _, k := range []struct{ title, family string }{{"index live", "maitred_kv_index_live"}, {"index blocks", "maitred_kv_index_blocks"},
		{"events", "maitred_kv_events_total"}, {"gaps", "maitred_kv_event_gaps_total"}, {"replays", "maitred_kv_event_replays_total"},
		{"index clears", "maitred_kv_index_clears_total"}, {"decode errors", "maitred_kv_event_decode_errors_total"}} {
		labelled(k.title, k.family, "backend")
	}
	return b.String()
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func sum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		s += value(m)
	}
	return s
}
