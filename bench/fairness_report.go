package main

import (
	"fmt"
	"slices"
	"time"
)

// fairFigures are one run's figures over an interval (from, to] of it.
type fairFigures struct {
	from, to time.Duration
	flows    [2]flowFigures
	// replicaWaits are B's queue waits (ms, sorted) by the gateway it
	// was sent to.
	replicaWaits map[int][]float64
	credits      [2][]credit
	// gap is the largest difference in service (each flow's divided by
	// its key weight) over any window inside both, the spans in which
	// both flows had a request waiting; gapAt is the span where it was.
	gap   float64
	gapAt span
	// settled is item 4's gap from fairSettled on (fairItem4).
	settled float64
	both    []span
	// cost is the largest weighted cost of one request answered in the
	// run (fairWeights): the bound is 2 * cost. maxOut is the largest
	// completion answered (the slot bound's).
	cost   float64
	maxOut int
}

// flowFigures are one flow's figures in a run's interval.
type flowFigures struct {
	sent, ok, refused int
	waits             []float64 // queue waits (ms) of requests dispatched in the interval, sorted
	took              []float64 // dispatch to end (ms) of requests answered in the interval, sorted
	service           float64   // weighted tokens served in the interval
}

// analyseFair computes run's figures over (from, to] with the keys'
// weights keyW.
func analyseFair(run fairRun, keyW [2]float64, from, to time.Duration) fairFigures {
	out := fairFigures{from: from, to: to, replicaWaits: map[int][]float64{}}
	prompt := map[bool]int{}
	for _, r := range run.reqs {
		if r.usage {
			prompt[r.long] = r.prompt
		}
	}
	in := func(t time.Duration) bool { return t > from && t <= to }
	var backlog [2][]span
	for i := range run.reqs {
		r := &run.reqs[i]
		f := &out.flows[r.flow]
		out.credits[r.flow] = append(out.credits[r.flow], r.credits(fairWeights, prompt[r.long])...)
		backlog[r.flow] = append(backlog[r.flow], r.backlog(run.d))
		if in(r.sent) {
			f.sent++
		}
		if r.status != 0 && r.status != 200 && in(r.end) {
			f.refused++
		}
		if r.dispatched >= 0 && in(r.dispatched) {
			f.waits = append(f.waits, r.queueMs)
			if r.flow == 1 {
				out.replicaWaits[r.replica] = append(out.replicaWaits[r.replica], r.queueMs)
			}
		}
		if r.ok {
			out.cost = max(out.cost, fairWeights.of(r.prompt, r.completion))
			out.maxOut = max(out.maxOut, r.completion)
			if in(r.end) {
				f.ok++
				f.took = append(f.took, float64(r.end-r.dispatched)/1e6)
			}
		}
	}
	for k := range out.flows {
		f := &out.flows[k]
		slices.Sort(f.waits)
		slices.Sort(f.took)
		f.service = total(out.credits[k], from, to)
	}
	for _, w := range out.replicaWaits {
		slices.Sort(w)
	}
	out.both = clipSpans(intersectSpans(mergeSpans(backlog[0]), mergeSpans(backlog[1])), from, to)
	out.gap, out.gapAt = serviceGap(out.credits[0], out.credits[1], keyW[0], keyW[1], out.both)
	return out
}

// clipSpans is the part of merged spans s inside [from, to].
func clipSpans(s []span, from, to time.Duration) []span {
	var out []span
	for _, x := range s {
		x.from, x.to = max(x.from, from), min(x.to, to)
		if x.to > x.from {
			out = append(out, x)
		}
	}
	return out
}

func (f *fairFigures) secs() float64 { return (f.to - f.from).Seconds() }

// bound is VTC's: twice the largest single request's weighted cost.
func (f *fairFigures) bound() float64 { return 2 * f.cost }

func (f *fairFigures) withinBound() bool { return f.gap <= f.bound() }

// slotBound is the bound for a scheduler that grants whole requests to
// -fair-slots slots and cannot take back one already running: twice the
// larger of the largest request's weighted cost (VTC's one-at-a-time
// bound: a grant moves a counter by at most that) and the weighted output
// the slots generate at once (the running batch's capacity, as in VTC's
// analysis of a batching engine). A flow whose counter is ahead keeps
// being served by its running requests until the other's grants catch
// up. With one slot it is the one-request bound.
func (f *fairFigures) slotBound() float64 {
	return 2 * max(f.cost, fairWeights.out*float64(*fairSlots*f.maxOut))
}

func (f *fairFigures) bothSecs() float64 {
	var d time.Duration
	for _, s := range f.both {
		d += s.to - s.from
	}
	return d.Seconds()
}

// fairCol is one column of a table: a run's figures, or nil when the run
// could not be made (a build without the tokens policy).
type fairCol struct {
	name string
	f    *fairFigures
}

// fairRow is a table row: its label and its cell for a column's figures.
type fairRow struct {
	label string
	cell  func(f *fairFigures) string
}

func printFairTable(title string, cols []fairCol, rows []fairRow) {
	fmt.Printf("\n%s\n", title)
	fmt.Printf("  %-44s", "")
	for _, c := range cols {
		fmt.Printf(" %14s", c.name)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("  %-44s", r.label)
		for _, c := range cols {
			v := "n/a"
			if c.f != nil {
				v = r.cell(c.f)
			}
			fmt.Printf(" %14s", v)
		}
		fmt.Println()
	}
}

func ms1(v float64) string   { return fmt.Sprintf("%.1f", v) }
func num0(v float64) string  { return fmt.Sprintf("%.0f", v) }
func rate2(v float64) string { return fmt.Sprintf("%.2f", v) }

// item 1's rows (and item 4's): B's waits, throughput, and the bound.
func boundRows() []fairRow {
	q := func(flow int, p float64) func(f *fairFigures) string {
		return func(f *fairFigures) string { return ms1(quantile(f.flows[flow].waits, p)) }
	}
	return append(append([]fairRow{
		{"B queue wait p50 ms", q(1, .5)},
		{"B queue wait p99 ms", q(1, .99)},
		{"B queue wait max ms", q(1, 1)},
		{"A queue wait p50 ms", q(0, .5)},
		{"A request, dispatch to end, p50 (p99) ms", func(f *fairFigures) string {
			return fmt.Sprintf("%.0f (%.0f)", quantile(f.flows[0].took, .5), quantile(f.flows[0].took, .99))
		}},
		{"A answered req/s", func(f *fairFigures) string { return rate2(float64(f.flows[0].ok) / f.secs()) }},
		{"B answered req/s (sent)", func(f *fairFigures) string {
			return fmt.Sprintf("%.2f (%.2f)", float64(f.flows[1].ok)/f.secs(), float64(f.flows[1].sent)/f.secs())
		}},
		{"A service, weighted tokens/s", func(f *fairFigures) string { return num0(f.flows[0].service / f.secs()) }},
		{"B service, weighted tokens/s", func(f *fairFigures) string { return num0(f.flows[1].service / f.secs()) }},
		{"refused (A, B)", func(f *fairFigures) string { return fmt.Sprintf("%d, %d", f.flows[0].refused, f.flows[1].refused) }},
	}, gapRows()...), fairRow{"B p99 wait within one A request (p50)", func(f *fairFigures) string { return yesNo(f.bWaitWithinA()) }})
}

// gapRows: the time both flows were backlogged, the largest gap in their
// service then, and the bound.
func gapRows() []fairRow {
	return []fairRow{
		{"both backlogged: s in spans", func(f *fairFigures) string { return fmt.Sprintf("%.1f in %d", f.bothSecs(), len(f.both)) }},
		{"largest service gap, weighted tokens", func(f *fairFigures) string { return num0(f.gap) }},
		{"bound: 2x largest request's cost", func(f *fairFigures) string { return num0(f.bound()) }},
		{"gap within the bound", func(f *fairFigures) string { return yesNo(f.withinBound()) }},
		{fmt.Sprintf("slot bound: 2x max(a request, %d slots' output)", *fairSlots), func(f *fairFigures) string {
			return fmt.Sprintf("%.0f (%s)", f.slotBound(), yesNo(f.gap <= f.slotBound()))
		}},
	}
}

// bWaitWithinA: B's p99 queue wait is at most the time of one of A's
// requests (its median, dispatch to end).
func (f *fairFigures) bWaitWithinA() bool {
	return quantile(f.flows[1].waits, .99) <= quantile(f.flows[0].took, .5)
}

// fairVerdicts collects the checks against the targets.
type fairVerdicts struct {
	lines         []string
	pass, fail, n int
}

// check records one target: ok, or not met; f nil: not measured (the
// tokens runs could not be made).
func (v *fairVerdicts) check(what string, f *fairFigures, ok func(f *fairFigures) bool, detail func(f *fairFigures) string) {
	switch {
	case f == nil:
		v.n++
		v.lines = append(v.lines, "n/a   "+what+" (not measured: the build refuses fairness: tokens)")
	case ok(f):
		v.pass++
		v.lines = append(v.lines, "pass  "+what+": "+detail(f))
	default:
		v.fail++
		v.lines = append(v.lines, "FAIL  "+what+": "+detail(f))
	}
}

func (v *fairVerdicts) print() {
	fmt.Printf("\nverdicts against issue 28's targets\n")
	for _, l := range v.lines {
		fmt.Println("  " + l)
	}
	overall := "PASS"
	switch {
	case v.fail > 0:
		overall = "FAIL"
	case v.n > 0:
		overall = "INCOMPLETE"
	}
	fmt.Printf("overall: %s (%d passed, %d failed, %d not measured)\n", overall, v.pass, v.fail, v.n)
}

// gapDetail names a run's gap, its bound and where it was.
func gapDetail(f *fairFigures) string {
	return fmt.Sprintf("largest gap %.0f against %.0f, slot bound %.0f (in the span %s-%s of %.1f s both backlogged)",
		f.gap, f.bound(), f.slotBound(), f.gapAt.from.Round(time.Millisecond), f.gapAt.to.Round(time.Millisecond), f.bothSecs())
}
