package triage

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// This file says the evidence in sentences (Report.Said, Finding.Said and
// the *_baseline_words of a backend's evidence): the figures that made a
// verdict and, for latency, which baseline they were judged against. Each
// evidence value says itself, from the same values as its figures.

// fmtNs writes a duration given in nanoseconds for people.
func fmtNs(ns float64) string {
	msv := ns / 1e6
	switch {
	case msv < 10:
		return fmt.Sprintf("%.2f ms", msv)
	case msv < 100:
		return fmt.Sprintf("%.1f ms", msv)
	case msv < 1000:
		return fmt.Sprintf("%.0f ms", msv)
	}
	return fmt.Sprintf("%.2f s", msv/1000)
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", x*100) }

// baselineWords says which baseline a latency was judged against, and why
// that one.
func (l *latency) baselineWords(t *terms) string {
	minCov := t.th.MinBaselineCoverage
	cov := l.moving.coverage.Round(time.Second)
	noMoving := fmt.Sprintf("no moving baseline yet: it covers %s of the %s of traffic it needs", cov, minCov)
	switch l.src {
	case "warmup":
		if l.moving.ok && l.moving.coverage >= minCov {
			return fmt.Sprintf("its warm-up %s, %s, measured idle (lower than its moving baseline, %s)", l.name, fmtNs(l.base), fmtNs(l.moving.value))
		}
		return fmt.Sprintf("its warm-up %s, %s, measured idle (%s)", l.name, fmtNs(l.base), noMoving)
	case "moving":
		if l.warm > 0 {
			return fmt.Sprintf("its moving baseline, %s over %s of traffic (lower than its warm-up %s, %s)", fmtNs(l.base), cov, l.name, fmtNs(l.warm))
		}
		return fmt.Sprintf("its moving baseline, %s over %s of traffic (no warm-up %s was measured)", fmtNs(l.base), cov, l.name)
	}
	return fmt.Sprintf("no baseline, so %s is not judged (no warm-up %s was measured; %s)", l.name, l.name, noMoving)
}

// latencyWords says a backend's TTFT or TPOT p50 against its baseline:
// over the newest part of the window when that is what shows the rise (or
// the larger ratio), else over the whole window.
func latencyWords(b *backendWindow, l *latency, t *terms) string {
	p50, n, over := l.p50, l.n, "the "+t.window.String()+" window"
	if l.recent.n > 0 && (l.base <= 0 || l.recent.ratio >= p50/l.base) {
		p50, n, over = l.recent.p50, l.recent.n, "the last "+t.recent.String()
	}
	if n == 0 {
		return fmt.Sprintf("%s: no %s samples", b.qualified(), l.name)
	}
	if l.base <= 0 {
		return fmt.Sprintf("%s: %s p50 %s over %s (%d samples); %s", b.qualified(), l.name, fmtNs(p50), over, n, l.baselineWords(t))
	}
	return fmt.Sprintf("%s: %s p50 %s over %s (%d samples) is %.1fx %s", b.qualified(), l.name, fmtNs(p50), over, n, p50/l.base, l.baselineWords(t))
}

func (ev *compatEvidence) said(*terms) []string {
	var out []string
	for _, b := range ev.Incompatible {
		out = append(out, fmt.Sprintf("%s is held back: its %s differs from this gateway's (gateway %d, backend %d)",
			b.Backend, strings.ReplaceAll(b.Check, "_", " "), b.Gateway, b.BackendValue))
	}
	return out
}

func (ev *unavailableEvidence) said(t *terms) []string {
	var out []string
	for _, d := range ev.Down {
		b := d.b
		switch {
		case b.notReadyNow:
			what := "is not ready"
			if b.ejected {
				what = "is ejected as an outlier"
			}
			sent := d.Backend + " " + what
			if b.state != "" {
				sent += " (" + b.state
				if b.stateReason != "" {
					sent += ": " + b.stateReason
				}
				sent += ")"
			}
			if !b.stateSince.IsZero() {
				sent += " for " + t.now.Sub(b.stateSince).Round(time.Second).String()
			}
			out = append(out, sent)
		case d.ConnectFailures > 0:
			out = append(out, fmt.Sprintf("%s: %d requests could not connect", d.Backend, d.ConnectFailures))
		}
	}
	if ev.Failures > 0 {
		out = append(out, fmt.Sprintf("%d of %d requests failed for want of a backend (%d found none ready, %d could not connect)",
			ev.Failures, ev.requests, ev.NoReadyBackend, ev.Connect))
	}
	return out
}

func (ev *kvEvidence) said(t *terms) []string {
	th := &t.th
	var out []string
	for _, b := range ev.backends {
		why := fmt.Sprintf("%.1f preemptions a minute", b.prePerMin)
		if !(b.preKnown && b.prePerMin > th.PreemptionsPerMin) {
			why = fmt.Sprintf("vLLM's waiting queue growing %+.1f a minute while running stays flat", b.waiting.SlopePerMin)
		}
		out = append(out, fmt.Sprintf("%s: KV cache usage reached %s (at least %s reads as full), with %s",
			b.qualified(), pct(b.kv.Max), pct(th.KVFull), why))
	}
	return out
}

func (ev *decodeEvidence) said(t *terms) []string {
	out := make([]string, 0, len(ev.backends))
	for _, b := range ev.backends {
		out = append(out, latencyWords(b, &b.tpot, t))
	}
	return out
}

func (ev *prefillEvidence) said(t *terms) []string {
	th := &t.th
	var out []string
	for _, b := range ev.aff {
		out = append(out, latencyWords(b, &b.ttft, t)+", while TPOT holds steady")
	}
	for _, mw := range ev.queues {
		if mw.queueGrowing {
			out = append(out, fmt.Sprintf("the gateway's queue for %s grows %+.1f a minute (now %.0f, high at %.0f)",
				mw.name, mw.q.SlopePerMin, mw.q.Last, th.QueueDepthHigh))
		}
	}
	for _, b := range ev.aff {
		if b.waitingGrowing(th) {
			out = append(out, fmt.Sprintf("%s: vLLM's waiting queue grows %+.1f a minute (now %.0f)", b.qualified(), b.waiting.SlopePerMin, b.waiting.Last))
		}
	}
	if ev.QueueFailures > 0 {
		out = append(out, fmt.Sprintf("%d requests failed in the gateway's queue (full or timed out) and never reached a backend", ev.QueueFailures))
	}
	if ev.PrefillFailures > 0 {
		out = append(out, fmt.Sprintf("%d requests failed before their first token", ev.PrefillFailures))
	}
	return out
}

func (ev *boundaryEvidence) said(*terms) []string {
	refused := ev.Door + ev.Backend
	out := []string{fmt.Sprintf("%d of the %d failures were refused requests (%d of %d requests): %d at the door, %d by the backend itself",
		refused, ev.failures, refused, ev.requests, ev.Door, ev.Backend)}
	if len(ev.ByReason) == 0 {
		return out
	}
	type rc struct {
		r string
		n int
	}
	var rs []rc
	for r, n := range ev.ByReason {
		rs = append(rs, rc{r, n})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].r < rs[j].r })
	parts := make([]string, 0, 3)
	for _, x := range rs[:min(3, len(rs))] {
		parts = append(parts, fmt.Sprintf("%s %d", x.r, x.n))
	}
	return append(out, "refused at the door for: "+strings.Join(parts, ", "))
}

func (ev *clientEvidence) said(t *terms) []string {
	var out []string
	if ev.left {
		out = append(out, fmt.Sprintf("%d of the %d failures were clients that left or read too slowly", ev.Closed, ev.failures))
	}
	if ev.stalledDominate {
		out = append(out, fmt.Sprintf("%d of %d requests spent %s or more of their time blocked writing to a slow client",
			ev.Stalled, ev.requests, pct(t.th.StallFraction)))
	}
	return out
}

func (ev healthyEvidence) said(t *terms) []string {
	if ev.requests == 0 {
		return []string{"no requests in the " + t.window.String() + " window"}
	}
	return []string{fmt.Sprintf("nothing stands out over the %s window: %d requests, %d failures", t.window, ev.requests, ev.failures)}
}
