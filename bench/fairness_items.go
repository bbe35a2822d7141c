package main

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// The fairness scenario's four items, each run with fifo and with tokens.

var fairPolicies = []string{"fifo", "tokens"}

// fairRunOnce starts replicas gateways with policy, sends loads for d and
// stops them. A nil figures pointer with no error: the build refuses the
// tokens policy.
func fairRunOnce(env *fairEnv, c *fairClient, what, policy string, keyW [2]float64, replicas int, loads []fairLoad, d time.Duration) (*fairRun, error) {
	urls, stop, err := env.startGateways(policy, keyW, replicas)
	if errors.Is(err, errNoFairness) {
		fmt.Fprintf(os.Stderr, "%s, %s: skipped: %v\n", what, policy, err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintf(os.Stderr, "%s, %s: %s through %d gateway(s)\n", what, policy, d, replicas)
	run := c.runFairLoad(urls, loads, d)
	return &run, nil
}

// fairItem1: A's backlog of long requests against B's short ones every
// 200 ms, for each of -fair-backlog.
func fairItem1(env *fairEnv, c *fairClient, o fairOpts, v *fairVerdicts) error {
	var cols []fairCol
	byBacklog := map[string][]*fairFigures{}
	for _, b := range o.backlogs {
		for _, p := range fairPolicies {
			loads := []fairLoad{{flow: 0, conc: b, long: true}, {flow: 1, every: fairEvery}}
			run, err := fairRunOnce(env, c, fmt.Sprintf("item 1 (A %d)", b), p, [2]float64{1, 1}, 1, loads, o.dur)
			if err != nil {
				return err
			}
			col := fairCol{name: fmt.Sprintf("%s A%d", p, b)}
			if run != nil {
				f := analyseFair(*run, [2]float64{1, 1}, 0, run.d)
				col.f = &f
			}
			cols = append(cols, col)
			byBacklog[p] = append(byBacklog[p], col.f)
			if p == "tokens" {
				v.check(fmt.Sprintf("1. A %d: B's p99 queue wait within one of A's requests", b), col.f, (*fairFigures).bWaitWithinA,
					func(f *fairFigures) string {
						return fmt.Sprintf("p99 %.0f ms, A's request p50 %.0f ms", quantile(f.flows[1].waits, .99), quantile(f.flows[0].took, .5))
					})
				v.check(fmt.Sprintf("1. A %d: service gap while both backlogged within 2x the largest request", b), col.f, (*fairFigures).withinBound, gapDetail)
			}
		}
	}
	printFairTable(fmt.Sprintf("item 1: A keeps N long requests in flight without pause (column AN), B sends one short every %s; one backend, max_in_flight %d; %s each", fairEvery, *fairSlots, o.dur), cols, boundRows())
	if f := byBacklog["fifo"]; len(f) > 1 && f[0] != nil && f[len(f)-1] != nil {
		first, last := f[0], f[len(f)-1]
		v.check("1. fifo: B's queue wait grows with A's backlog", last, func(*fairFigures) bool {
			return quantile(last.flows[1].waits, .5) > quantile(first.flows[1].waits, .5)
		}, func(*fairFigures) string {
			return fmt.Sprintf("B p50 %.0f ms at A %d, %.0f ms at A %d", quantile(first.flows[1].waits, .5), o.backlogs[0], quantile(last.flows[1].waits, .5), o.backlogs[len(o.backlogs)-1])
		})
	}
	return nil
}

// fairItem2: key weights 1 and 3, both flows backlogged for -fair-long.
func fairItem2(env *fairEnv, c *fairClient, o fairOpts, v *fairVerdicts) error {
	keyW := [2]float64{1, 3}
	conc := o.backlogs[0]
	var cols []fairCol
	for _, p := range fairPolicies {
		loads := []fairLoad{{flow: 0, conc: conc, long: true}, {flow: 1, conc: conc, long: true}}
		run, err := fairRunOnce(env, c, "item 2", p, keyW, 1, loads, o.long)
		if err != nil {
			return err
		}
		col := fairCol{name: p}
		if run != nil {
			f := analyseFair(*run, keyW, 0, run.d)
			col.f = &f
		}
		cols = append(cols, col)
	}
	win := 2 * o.window
	ratio := func(f *fairFigures) float64 { return f.flows[1].service / f.flows[0].service }
	windows := func(f *fairFigures) (lo, hi float64) {
		a, b := perWindow(f.credits[0], f.from, f.to, win), perWindow(f.credits[1], f.from, f.to, win)
		lo, hi = -1, 0
		for k := range a {
			r := b[k] / a[k]
			if lo < 0 || r < lo {
				lo = r
			}
			hi = max(hi, r)
		}
		return lo, hi
	}
	met := func(f *fairFigures) bool { r := ratio(f); return r >= 2.7 && r <= 3.3 }
	rows := []fairRow{
		{"A service, weighted tokens/s", func(f *fairFigures) string { return num0(f.flows[0].service / f.secs()) }},
		{"B service, weighted tokens/s", func(f *fairFigures) string { return num0(f.flows[1].service / f.secs()) }},
		{"B / A over the run", func(f *fairFigures) string { return rate2(ratio(f)) }},
		{fmt.Sprintf("B / A per %s window, min-max", win), func(f *fairFigures) string {
			lo, hi := windows(f)
			return fmt.Sprintf("%.2f-%.2f", lo, hi)
		}},
		{"A, B answered req/s", func(f *fairFigures) string {
			return fmt.Sprintf("%.2f, %.2f", float64(f.flows[0].ok)/f.secs(), float64(f.flows[1].ok)/f.secs())
		}},
		{"gap of A/1 - B/3 while both backlogged", func(f *fairFigures) string { return num0(f.gap) }},
		{"B / A within 3 ± 10%", func(f *fairFigures) string { return yesNo(met(f)) }},
	}
	printFairTable(fmt.Sprintf("item 2: key weights A 1, B 3; each %d long requests at once without pause; %s each", conc, o.long), cols, rows)
	v.check("2. weights 1:3, both backlogged: B receives 3x A's service ± 10%", cols[1].f, met,
		func(f *fairFigures) string { return fmt.Sprintf("B/A %.3f over %s", ratio(f), o.long) })
	return nil
}

// fairItem3: A alone for -fair-idle, then B as backlogged as A.
func fairItem3(env *fairEnv, c *fairClient, o fairOpts, v *fairVerdicts) error {
	conc := o.backlogs[0]
	// The first seconds fill the backend: not counted in A's throughput.
	warm := min(2*time.Second, o.idle/4)
	var alone, after []fairCol
	for _, p := range fairPolicies {
		loads := []fairLoad{{flow: 0, conc: conc, long: true}, {flow: 1, conc: conc, long: true, from: o.idle}}
		run, err := fairRunOnce(env, c, "item 3", p, [2]float64{1, 1}, 1, loads, o.idle+o.dur)
		if err != nil {
			return err
		}
		a, b := fairCol{name: p}, fairCol{name: p}
		if run != nil {
			fa, fb := analyseFair(*run, [2]float64{1, 1}, warm, o.idle), analyseFair(*run, [2]float64{1, 1}, o.idle, run.d)
			a.f, b.f = &fa, &fb
		}
		alone, after = append(alone, a), append(after, b)
	}
	fifo, tokens := alone[0].f, alone[1].f
	tput := func(f *fairFigures) float64 { return f.flows[0].service / f.secs() }
	rows := []fairRow{
		{"A service, weighted tokens/s", func(f *fairFigures) string { return num0(tput(f)) }},
		{"A answered req/s", func(f *fairFigures) string { return rate2(float64(f.flows[0].ok) / f.secs()) }},
		{"A queue wait p50 ms", func(f *fairFigures) string { return ms1(quantile(f.flows[0].waits, .5)) }},
	}
	printFairTable(fmt.Sprintf("item 3a: A alone, %d long requests at once without pause; %s (the first %s not counted)", conc, o.idle-warm, warm), alone, rows)
	var share float64
	if fifo != nil && tokens != nil {
		share = tput(tokens) / tput(fifo)
		fmt.Printf("  tokens / fifo: %.3f\n", share)
	}
	v.check("3. work-conserving: A alone, tokens' throughput within 5% of fifo's", tokens, func(*fairFigures) bool { return share >= 0.95 && share <= 1.05 },
		func(*fairFigures) string { return fmt.Sprintf("tokens/fifo %.3f", share) })

	rows = nil
	for k := range int(o.dur / o.window) {
		rows = append(rows, fairRow{fmt.Sprintf("B's share of service, %s-%s after", time.Duration(k)*o.window, time.Duration(k+1)*o.window), func(f *fairFigures) string {
			a, b := perWindow(f.credits[0], f.from, f.to, o.window), perWindow(f.credits[1], f.from, f.to, o.window)
			return fmt.Sprintf("%.0f%%", 100*b[k]/(a[k]+b[k]))
		}})
	}
	rows = append(rows, gapRows()...)
	printFairTable(fmt.Sprintf("item 3b: then B, idle for %s, sends %d long requests at once without pause; %s", o.idle, conc, o.dur), after, rows)
	v.check("3. B active after idling does not monopolise: gap within the bound from its start", after[1].f, (*fairFigures).withinBound, gapDetail)
	return nil
}

// fairSettled is when item 4's figures leave out the start: A's first
// requests and B's arrive together, and the slots go to whichever reach
// the store first, on one replica as on three (at most the backend's S
// of A's requests before B's first: S x one request's cost).
const fairSettled = 2 * time.Second

// fairItem4: item 1's load (A at the first -fair-backlog) spread over 3
// replicas sharing a redis-server.
func fairItem4(env *fairEnv, c *fairClient, o fairOpts, v *fairVerdicts) error {
	b := o.backlogs[0]
	var cols []fairCol
	for _, p := range fairPolicies {
		loads := []fairLoad{{flow: 0, conc: b, long: true}, {flow: 1, every: fairEvery}}
		run, err := fairRunOnce(env, c, "item 4", p, [2]float64{1, 1}, 3, loads, o.dur)
		if err != nil {
			return err
		}
		col := fairCol{name: p}
		if run != nil {
			f := analyseFair(*run, [2]float64{1, 1}, 0, run.d)
			if run.d > fairSettled {
				f.settled = analyseFair(*run, [2]float64{1, 1}, fairSettled, run.d).gap
			}
			col.f = &f
		}
		cols = append(cols, col)
	}
	rows := append(boundRows(), fairRow{fmt.Sprintf("largest gap from %s (after the start's grants)", fairSettled), func(f *fairFigures) string {
		if f.to <= fairSettled {
			return "n/a"
		}
		return num0(f.settled)
	}})
	for k := range 3 {
		rows = append(rows, fairRow{fmt.Sprintf("B queue wait p50/p99 ms via replica %d", k+1), func(f *fairFigures) string {
			w := f.replicaWaits[k]
			return fmt.Sprintf("%.0f/%.0f", quantile(w, .5), quantile(w, .99))
		}})
	}
	printFairTable(fmt.Sprintf("item 4: item 1 (A %d) over 3 replicas sharing a redis-server, A's workers and B's requests spread over them; %s each", b, o.dur), cols, rows)
	v.check("4. 3 replicas: service gap while both backlogged within 2x the largest request", cols[1].f, (*fairFigures).withinBound, gapDetail)
	v.check("4. 3 replicas: B's p99 queue wait within one of A's requests", cols[1].f, (*fairFigures).bWaitWithinA,
		func(f *fairFigures) string {
			return fmt.Sprintf("p99 %.0f ms, A's request p50 %.0f ms", quantile(f.flows[1].waits, .99), quantile(f.flows[0].took, .5))
		})
	return nil
}
