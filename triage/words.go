package triage

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// This file says the evidence in sentences (Report.Said, Finding.Said and
// the *_baseline_words of a backend's evidence): the figures that made a
// verdict and, for latency, which baseline they were judged against. The
// sentences are built from the same values as the evidence maps.

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

// recentSpan is the span Thresholds.Recent covers, in whole buckets.
func (e *Engine) recentSpan() time.Duration {
	return time.Duration(e.recentBuckets()) * e.width
}

// baselineWords says which baseline a backend's TTFT (tpot false) or TPOT
// was judged against, and why that one.
func (e *Engine) baselineWords(be *beval, tpot bool) string {
	name, src, base, warm, mv := "TTFT", be.ttftSrc, be.ttftBase, float64(be.s.warmTTFT), &be.s.base.ttft
	if tpot {
		name, src, base, warm, mv = "TPOT", be.tpotSrc, be.tpotBase, float64(be.s.warmTPOT), &be.s.base.tpot
	}
	minCov := e.cfg.Thresholds.MinBaselineCoverage
	cov := mv.coverage.Round(time.Second)
	mvVal, mvOK := mv.value()
	noMoving := fmt.Sprintf("no moving baseline yet: it covers %s of the %s of traffic it needs", cov, minCov)
	switch src {
	case "warmup":
		if mvOK && mv.coverage >= minCov {
			return fmt.Sprintf("its warm-up %s, %s, measured idle (lower than its moving baseline, %s)", name, fmtNs(base), fmtNs(mvVal))
		}
		return fmt.Sprintf("its warm-up %s, %s, measured idle (%s)", name, fmtNs(base), noMoving)
	case "moving":
		if warm > 0 {
			return fmt.Sprintf("its moving baseline, %s over %s of traffic (lower than its warm-up %s, %s)", fmtNs(base), cov, name, fmtNs(warm))
		}
		return fmt.Sprintf("its moving baseline, %s over %s of traffic (no warm-up %s was measured)", fmtNs(base), cov, name)
	}
	return fmt.Sprintf("no baseline, so %s is not judged (no warm-up %s was measured; %s)", name, name, noMoving)
}

// latencyWords says a backend's TTFT or TPOT p50 against its baseline:
// over the newest part of the window when that is what shows the rise (or
// the larger ratio), else over the whole window.
func (e *Engine) latencyWords(be *beval, tpot bool) string {
	name, p50, n, base, rec := "TTFT", be.ttftP50, int(be.a.ttft.n), be.ttftBase, be.ttftRecent
	if tpot {
		name, p50, n, base, rec = "TPOT", be.tpotP50, int(be.a.tpot.n), be.tpotBase, be.tpotRecent
	}
	over := "the " + e.cfg.Window.String() + " window"
	if rec.n > 0 && (base <= 0 || rec.ratio >= p50/base) {
		p50, n, over = rec.p50, rec.n, "the last "+e.recentSpan().String()
	}
	if n == 0 {
		return fmt.Sprintf("%s: no %s samples", qualified(be), name)
	}
	if base <= 0 {
		return fmt.Sprintf("%s: %s p50 %s over %s (%d samples); %s", qualified(be), name, fmtNs(p50), over, n, e.baselineWords(be, tpot))
	}
	return fmt.Sprintf("%s: %s p50 %s over %s (%d samples) is %.1fx %s", qualified(be), name, fmtNs(p50), over, n, p50/base, e.baselineWords(be, tpot))
}

// sayLatency is one latency sentence per backend (decode: TPOT).
func (e *Engine) sayLatency(aff []*beval, ttft bool) []string {
	out := make([]string, 0, len(aff))
	for _, be := range aff {
		out = append(out, e.latencyWords(be, !ttft))
	}
	return out
}

func (e *Engine) sayKV(aff []*beval) []string {
	th := e.cfg.Thresholds
	var out []string
	for _, be := range aff {
		why := fmt.Sprintf("%.1f preemptions a minute", be.prePerMin)
		if !(be.preKnown && be.prePerMin > th.PreemptionsPerMin) {
			why = fmt.Sprintf("vLLM's waiting queue growing %+.1f a minute while running stays flat", be.waiting.SlopePerMin)
		}
		out = append(out, fmt.Sprintf("%s: KV cache usage reached %s (at least %s reads as full), with %s",
			qualified(be), pct(be.kv.Max), pct(th.KVFull), why))
	}
	return out
}

func (e *Engine) sayPrefill(aff []*beval, scopes []*mscope, gq, np int) []string {
	th := e.cfg.Thresholds
	var out []string
	for _, be := range aff {
		out = append(out, e.latencyWords(be, false)+", while TPOT holds steady")
	}
	for _, msc := range scopes {
		if msc.queueGrowing {
			out = append(out, fmt.Sprintf("the gateway's queue for %s grows %+.1f a minute (now %.0f, high at %.0f)",
				msc.m.name, msc.q.SlopePerMin, msc.q.Last, th.QueueDepthHigh))
		}
	}
	for _, be := range aff {
		if be.waiting.N > 0 && (be.waiting.SlopePerMin >= th.GrowthPerMin || be.waiting.Last >= th.WaitingHigh) {
			out = append(out, fmt.Sprintf("%s: vLLM's waiting queue grows %+.1f a minute (now %.0f)", qualified(be), be.waiting.SlopePerMin, be.waiting.Last))
		}
	}
	if gq > 0 {
		out = append(out, fmt.Sprintf("%d requests failed in the gateway's queue (full or timed out) and never reached a backend", gq))
	}
	if np > 0 {
		out = append(out, fmt.Sprintf("%d requests failed before their first token", np))
	}
	return out
}

func sayCompat(bes []*beval) []string {
	var out []string
	for _, be := range bes {
		if be.s.name == "" || !be.incompatible {
			continue
		}
		c := be.s.compat
		out = append(out, fmt.Sprintf("%s is held back: its %s differs from this gateway's (gateway %d, backend %d)",
			qualified(be), strings.ReplaceAll(c.Check, "_", " "), c.Gateway, c.Backend))
	}
	return out
}

func sayUnavailable(bes []*beval, unready, connect, requests int, now time.Time) []string {
	var out []string
	for _, be := range bes {
		if be.s.name == "" || be.incompatible {
			continue
		}
		conn := be.a.layers[layerConnect]
		switch {
		case be.notReadyNow:
			what := "is not ready"
			if be.s.ejected {
				what = "is ejected as an outlier"
			}
			sent := qualified(be) + " " + what
			if be.s.state != "" {
				sent += " (" + be.s.state
				if be.s.stateReason != "" {
					sent += ": " + be.s.stateReason
				}
				sent += ")"
			}
			if !be.s.stateSince.IsZero() {
				sent += " for " + now.Sub(be.s.stateSince).Round(time.Second).String()
			}
			out = append(out, sent)
		case conn > 0:
			out = append(out, fmt.Sprintf("%s: %d requests could not connect", qualified(be), conn))
		}
	}
	if unready+connect > 0 {
		out = append(out, fmt.Sprintf("%d of %d requests failed for want of a backend (%d found none ready, %d could not connect)",
			unready+connect, requests, unready, connect))
	}
	return out
}

func sayBoundary(door, backend, failures, requests int, byReason map[string]int) []string {
	out := []string{fmt.Sprintf("%d of the %d failures were refused requests (%d of %d requests): %d at the door, %d by the backend itself",
		door+backend, failures, door+backend, requests, door, backend)}
	if len(byReason) > 0 {
		type rc struct {
			r string
			n int
		}
		var rs []rc
		for r, n := range byReason {
			rs = append(rs, rc{r, n})
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].r < rs[j].r })
		parts := make([]string, 0, 3)
		for i, x := range rs {
			if i == 3 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %d", x.r, x.n))
		}
		out = append(out, "refused at the door for: "+strings.Join(parts, ", "))
	}
	return out
}

func (e *Engine) sayClient(clientFail bool, closed, failures int, stallDom bool, stalled, requests int) []string {
	var out []string
	if clientFail {
		out = append(out, fmt.Sprintf("%d of the %d failures were clients that left or read too slowly", closed, failures))
	}
	if stallDom {
		out = append(out, fmt.Sprintf("%d of %d requests spent %s or more of their time blocked writing to a slow client",
			stalled, requests, pct(e.cfg.Thresholds.StallFraction)))
	}
	return out
}

func (e *Engine) sayHealthy(requests, failures int) []string {
	if requests == 0 {
		return []string{"no requests in the " + e.cfg.Window.String() + " window"}
	}
	return []string{fmt.Sprintf("nothing stands out over the %s window: %d requests, %d failures", e.cfg.Window, requests, failures)}
}
