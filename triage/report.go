package triage

import (
	"reflect"
	"strings"
	"time"
)

// This file assembles the Report from the rules that fire: for the fleet
// and for each model, every rule in order over a snapshot of the window;
// the first that fires is the verdict, the others follow it.

// Report is the triage of the current window.
type Report struct {
	Verdict  string         `json:"verdict"`
	Evidence map[string]any `json:"evidence"`
	// Said is the verdict's evidence in sentences (the figures that made
	// it, and for latency which baseline they were judged against).
	Said        []string      `json:"said"`
	Next        []string      `json:"next"`
	Window      string        `json:"window"`
	Requests    int           `json:"requests"`
	Models      []ModelReport `json:"models"`
	Others      []Finding     `json:"others,omitempty"`
	GeneratedAt time.Time     `json:"generated_at"`
	// Dropped counts observations and samples that arrived older than the
	// window, since the engine started.
	Dropped uint64 `json:"dropped,omitempty"`
}

// Finding is one symptom class that matches, with its evidence.
type Finding struct {
	Verdict  string         `json:"verdict"`
	Evidence map[string]any `json:"evidence"`
	Said     []string       `json:"said"`
	Next     []string       `json:"next"`
}

// ModelReport is the triage of one model.
type ModelReport struct {
	Model    string          `json:"model"`
	Verdict  string          `json:"verdict"`
	Evidence map[string]any  `json:"evidence"`
	Said     []string        `json:"said"`
	Next     []string        `json:"next"`
	Requests int             `json:"requests"`
	Backends []BackendReport `json:"backends"`
	Others   []Finding       `json:"others,omitempty"`
}

// BackendReport is the detail of one backend of a model.
type BackendReport struct {
	Backend     string `json:"backend"`
	Requests    int    `json:"requests"`
	Ready       bool   `json:"ready"`
	State       string `json:"state,omitempty"`
	StateReason string `json:"state_reason,omitempty"`
	StateSince  string `json:"state_since,omitempty"`
	// Ejected: the gateway's queue ejected it as an outlier (StateReason
	// says until when).
	Ejected bool `json:"ejected,omitempty"`
	// Gauges is the gateway's trust in its scraped gauges: unknown, fresh,
	// stale (counted as saturated) or unavailable (scrapes failing; the
	// backend is admitted on its in-flight and token-budget limits alone).
	Gauges string `json:"gauges,omitempty"`
	// Compatibility is a difference of ingredients found at warm-up,
	// holding it back or accepted (tokenizer_check: warn).
	Compatibility *Compatibility `json:"compatibility,omitempty"`
	// Matches lists the per-backend classes this backend shows
	// (compatibility, backend_unavailable, kv_pressure, decode_pressure,
	// admission_or_prefill_pressure), in precedence order.
	Matches          []string `json:"matches,omitempty"`
	SlowPathFallback bool     `json:"possible_slow_path_fallback"`
	// SlowPath lists the figures that flag it.
	SlowPath []SlowPathSignal `json:"slow_path_evidence,omitempty"`
	Evidence map[string]any   `json:"evidence"`
}

// Report classifies the current window. It folds buckets that have left
// the window into the moving baselines, so it takes the engine's lock while
// it copies the windows; the rules run on the copy. It costs O(models x
// backends x buckets).
func (e *Engine) Report() Report {
	e.mu.Lock()
	t := &terms{th: e.cfg.Thresholds, window: e.cfg.Window, recent: time.Duration(e.recentBuckets()) * e.width, now: e.now()}
	models := e.windows(t)
	rep := Report{Window: e.cfg.Window.String(), GeneratedAt: t.now, Dropped: e.dropped}
	e.mu.Unlock()

	fleet, others := assess(newSnapshot(t, models))
	rep.Verdict, rep.Evidence, rep.Said, rep.Next, rep.Others = fleet.Verdict, fleet.Evidence, fleet.Said, fleet.Next, others
	for _, mw := range models {
		m, others := assess(newSnapshot(t, []*modelWindow{mw}))
		mr := ModelReport{Model: mw.name, Requests: mw.requests,
			Verdict: m.Verdict, Evidence: m.Evidence, Said: m.Said, Next: m.Next, Others: others}
		rep.Requests += mw.requests
		for _, b := range mw.backends {
			if b.name != "" {
				mr.Backends = append(mr.Backends, b.report(t))
			}
		}
		rep.Models = append(rep.Models, mr)
	}
	return rep
}

// assess applies every rule to a scope. The verdict is the first rule that
// fires (healthy when none does), with the scope's evidence laid over with
// that rule's; the other rules that fire follow, in order.
func assess(s *snapshot) (verdict Finding, others []Finding) {
	var found []Finding
	var first evidence
	for _, r := range rules {
		ev, ok := r.fires(s)
		if !ok {
			continue
		}
		if first == nil {
			first = ev
		}
		found = append(found, Finding{Verdict: r.verdict, Evidence: fields(ev), Said: ev.said(s.terms), Next: Next(r.verdict)})
	}
	if len(found) == 0 {
		said := healthyEvidence{s.requests, s.requests - s.ok}.said(s.terms)
		return Finding{Verdict: VerdictHealthy, Evidence: fields(s.evidence()), Said: said, Next: Next(VerdictHealthy)}, nil
	}
	verdict = found[0]
	verdict.Evidence = fields(s.evidence(), first)
	if len(found) > 1 {
		others = found[1:]
	}
	return verdict, others
}

// fields is evidence as the JSON object the report serves, for the
// Report's Evidence maps (which the status page, `maitred triage` and
// clients index by key): the fields of each value in turn, a later value's
// field replacing an earlier one of the same name. The values are typed;
// this is the one place they become a map. A field is named by its json
// tag and follows its omitempty; embedded structs lay their fields in
// place, a pointer is its value, a slice of structs a slice of maps, and
// every other value (numbers, strings, map[string]int) is kept as it is.
func fields(evs ...any) map[string]any {
	out := map[string]any{}
	for _, ev := range evs {
		putFields(out, reflect.ValueOf(ev))
	}
	return out
}

func putFields(out map[string]any, v reflect.Value) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Anonymous {
			putFields(out, fv)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		if opts == "omitempty" && empty(fv) {
			continue
		}
		out[name] = fieldValue(fv)
	}
}

// empty is encoding/json's omitempty.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map, reflect.String:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return v.IsZero()
}

func fieldValue(v reflect.Value) any {
	switch {
	case v.Kind() == reflect.Pointer && v.IsNil():
		return nil
	case v.Kind() == reflect.Pointer:
		return v.Elem().Interface()
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct && !v.IsNil():
		list := make([]map[string]any, v.Len())
		for i := range list {
			list[i] = map[string]any{}
			putFields(list[i], v.Index(i))
		}
		return list
	}
	return v.Interface()
}

func (b *backendWindow) report(t *terms) BackendReport {
	br := BackendReport{
		Backend:          b.name,
		Requests:         b.a.requests,
		Ready:            b.sampled && b.ready,
		State:            b.state,
		StateReason:      b.stateReason,
		StateSince:       rfc3339(b.stateSince),
		Ejected:          b.sampled && b.ejected,
		Gauges:           b.gaugesState,
		Compatibility:    b.compat,
		SlowPathFallback: len(b.slow) > 0,
		SlowPath:         b.slow,
		Evidence:         fields(b.evidence(t)),
	}
	for _, r := range rules {
		if r.backend != nil && r.backend(b, &t.th) {
			br.Matches = append(br.Matches, r.verdict)
		}
	}
	return br
}
