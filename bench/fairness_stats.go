package main

import (
	"slices"
	"time"
)

// The fairness scenario's arithmetic, on what its clients recorded: when
// each flow was backlogged, the service it received (weighted tokens, at
// the moment each was served), and the largest difference in service
// between two flows over any window in which both were backlogged, the
// quantity VTC's bound (Sheng et al., OSDI 2024) is about.

// span is the interval [from, to), as offsets from a run's start.
type span struct{ from, to time.Duration }

// credit is service a flow received at one moment: weighted tokens.
type credit struct {
	at    time.Duration
	units float64
}

// fairCost weighs tokens into service: input and output token weights
// (the model's fairness_weights).
type fairCost struct{ in, out float64 }

func (w fairCost) of(prompt, completion int) float64 {
	return w.in*float64(prompt) + w.out*float64(completion)
}

// mergeSpans is the union of s: sorted, disjoint, touching spans joined.
// Empty spans are dropped.
func mergeSpans(s []span) []span {
	var in []span
	for _, x := range s {
		if x.to > x.from {
			in = append(in, x)
		}
	}
	slices.SortFunc(in, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, x := range in {
		if n := len(out); n > 0 && x.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// intersectSpans is the intersection of two merged span lists
// (mergeSpans): the times both cover.
func intersectSpans(a, b []span) []span {
	var out []span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := max(a[i].from, b[j].from), min(a[i].to, b[j].to)
		if to > from {
			out = append(out, span{from, to})
		}
		if a[i].to < b[j].to {
			i++
		} else {
			j++
		}
	}
	return out
}

// serviceGap is the largest difference between two flows' service, each
// divided by its weight, over any window [t1, t2] that lies inside one of
// spans: the service of a window is the credits with t1 < at <= t2. Inside
// one span that is the range (max - min) of D(t) = A(t)/wa - B(t)/wb, so
// each span is walked once. It also returns the span where the largest
// gap was.
func serviceGap(a, b []credit, wa, wb float64, spans []span) (gap float64, where span) {
	type step struct {
		at time.Duration
		d  float64
	}
	steps := make([]step, 0, len(a)+len(b))
	for _, c := range a {
		steps = append(steps, step{c.at, c.units / wa})
	}
	for _, c := range b {
		steps = append(steps, step{c.at, -c.units / wb})
	}
	slices.SortFunc(steps, func(x, y step) int { return int(x.at - y.at) })
	for _, s := range spans {
		// The first step after s.from.
		i, _ := slices.BinarySearchFunc(steps, s.from, func(x step, t time.Duration) int {
			if x.at <= t {
				return -1
			}
			return 1
		})
		var d, lo, hi float64
		for ; i < len(steps) && steps[i].at <= s.to; i++ {
			d += steps[i].d
			// Steps at the same moment land together: no window sees
			// one without the others.
			if i+1 < len(steps) && steps[i+1].at == steps[i].at {
				continue
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if hi-lo > gap {
			gap, where = hi-lo, s
		}
	}
	return gap, where
}

// total is the sum of the credits with from < at <= to.
func total(c []credit, from, to time.Duration) float64 {
	var sum float64
	for _, x := range c {
		if x.at > from && x.at <= to {
			sum += x.units
		}
	}
	return sum
}

// perWindow sums credits into consecutive windows of width starting at
// from, up to to (a last partial window is dropped).
func perWindow(c []credit, from, to, width time.Duration) []float64 {
	if width <= 0 || to-from < width {
		return nil
	}
	out := make([]float64, int((to-from)/width))
	for _, x := range c {
		if x.at <= from || x.at > from+time.Duration(len(out))*width {
			continue
		}
		// A credit at a window's end belongs to it: windows are (start, end].
		k := int((x.at - from - 1) / width)
		out[k] += x.units
	}
	return out
}

// fairReq is what a client saw of one request, times as offsets from its
// run's start.
type fairReq struct {
	flow    int  // 0: A, 1: B
	long    bool // one of the long requests
	replica int  // the gateway it was sent to (item 4: one of 3)
	sent    time.Duration
	// dispatched is when the gateway sent it to the backend: the answer's
	// headers less the backend's time (Server-Timing); -1 when it never
	// was (refused, or still waiting when the run ended).
	dispatched time.Duration
	end        time.Duration
	queueMs    float64 // Server-Timing's queue
	status     int
	// prompt and completion are the answer's usage (usage: it was read).
	prompt, completion int
	usage              bool
	events             []time.Duration // content events, when read
	ok                 bool            // answered 200 and read to the end
}

// credits is the service r received under weights w: its input when it
// was dispatched (what the gateway charges at the grant), its output as it
// was streamed (the usage's completion tokens spread over the content
// events; one token an event when the stream was cut before its usage; at
// the end when no event was read). prompt stands for the prompt's count
// when the answer's usage was not read.
func (r *fairReq) credits(w fairCost, prompt int) []credit {
	if r.dispatched < 0 {
		return nil
	}
	p := r.prompt
	if !r.usage {
		p = prompt
	}
	out := []credit{{r.dispatched, w.in * float64(p)}}
	switch {
	case len(r.events) > 0:
		each := w.out
		if r.usage {
			each = w.out * float64(r.completion) / float64(len(r.events))
		}
		for _, at := range r.events {
			out = append(out, credit{at, each})
		}
	case r.usage && r.completion > 0:
		out = append(out, credit{r.end, w.out * float64(r.completion)})
	}
	return out
}

// backlog is when r waited in the gateway's queue: from its send to its
// dispatch; to its end when it was never dispatched, at most to runEnd.
func (r *fairReq) backlog(runEnd time.Duration) span {
	to := r.dispatched
	if to < 0 {
		to = r.end
	}
	return span{r.sent, min(to, runEnd)}
}
