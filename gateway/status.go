package gateway

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"time"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/triage"
)

// statusTmpl is the status page: server-rendered, no scripts, readable by a
// person in a browser and by curl. The verdict and its evidence in words
// come first, then SVG charts of the triage window (drawn here, see
// statuschart.go), then the tables. It reloads itself every 5 seconds.
var statusTmpl = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>maitred status</title>
<meta http-equiv="refresh" content="5">
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
.ready{color:#060}.warming,.loading{color:#a60}.unhealthy{color:#b00}
.verdict{font-size:1.3em;font-weight:bold}
.charts{display:flex;flex-wrap:wrap;gap:1em 2em}
.charts figure{margin:0}.charts figcaption{font-weight:bold;margin-bottom:.2em}
</style></head><body>
<h1>maitred</h1>
<p>Gateway <b id="phase">{{.Phase}}</b>, readiness <b id="readiness">{{.Readiness}}</b>, generated {{.Now}}.</p>
{{with .Store}}<p id="store">Shared store {{.URL}}: <b class="{{if .Up}}ready{{else}}unhealthy{{end}}">{{if .Up}}up{{else}}down{{end}}</b> since {{.Since.Format "2006-01-02T15:04:05Z07:00"}}; {{.Live}} live replicas (this one {{.Replica}}); {{.Detail}}.{{with .Error}} Last error: {{.}}{{end}}</p>{{end}}
<h2>Triage</h2>
<p class="verdict" id="verdict">{{.Report.Verdict}}</p>
{{with .Report.Said}}<ul id="said">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
<p>Over the last {{.Report.Window}}: {{.Report.Requests}} requests.</p>
{{with .Report.Next}}<p>Inspect next:</p><ul>{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>The last {{.Report.Window}}</h2>
<div class="charts">{{range .Charts}}<figure><figcaption>{{.Title}}</figcaption>{{.SVG}}</figure>
{{end}}</div>
{{range .Models}}
<h2>Model {{.Name}}</h2>
<p>Verdict <b>{{.Verdict}}</b>; queue depth {{.Queue}}; max_model_len {{.MaxModelLen}}; fairness {{.Fairness}}.</p>
{{with .Uncounted}}<p class="uncounted">Chat requests forwarded uncounted: {{.}}.</p>{{end}}
<table class="backends"><tr><th>backend</th><th>from</th><th>state</th><th>since</th><th>reason</th><th>in flight</th><th>tokens / budget</th><th>TTFT p50</th><th>TPOT p50</th><th>notes</th></tr>
{{range .Backends}}<tr><td>{{.Host}}</td><td>{{.Source}}</td><td class="{{.State}}">{{.State}}</td><td>{{.Since}}</td><td>{{.Reason}}</td><td>{{.InFlight}}</td><td>{{.Tokens}} / {{.Budget}}</td><td>{{.TTFT}}</td><td>{{.TPOT}}</td><td>{{.Notes}}</td></tr>
{{end}}</table>
{{with .Flows}}<table class="flows"><tr><th>flow</th><th>weight</th><th>share of service</th><th>service tokens</th><th>virtual counter</th><th>waiting</th><th>in flight</th></tr>
{{range .}}<tr><td>{{.Flow}}</td><td>{{.Weight}}</td><td>{{printf "%.1f%%" .SharePct}}</td><td>{{printf "%.0f" .Service}}</td><td>{{printf "%.0f" .Counter}}</td><td>{{.Waiting}}</td><td>{{.InFlight}}</td></tr>
{{end}}</table>{{end}}
{{end}}
<h2>Evidence</h2>
{{with .Evidence}}<table id="evidence"><tr><th>evidence</th><th>value</th></tr>{{range .}}<tr><td>{{.K}}</td><td>{{.V}}</td></tr>{{end}}</table>{{end}}
<p><a href="/debug/triage">/debug/triage</a> · <a href="/debug/backends">/debug/backends</a> · <a href="/readyz">/readyz</a> · <a href="/metrics">/metrics</a></p>
</body></html>
`))

type kv struct{ K, V string }

type statusBackend struct {
	Host, Source, State, Since, Reason, TTFT, TPOT, Notes string
	InFlight                                              int64
	Tokens, Budget                                        int
}

type statusModel struct {
	Name, Verdict      string
	Fairness           string
	Flows              []statusFlow
	Uncounted          string
	Queue, MaxModelLen int
	Backends           []statusBackend
}

// statusFlow is a flow's row under fairness tokens: its share of the
// model's settled service, in percent.
type statusFlow struct {
	flowShare
	SharePct float64
}

type statusData struct {
	Phase, Readiness, Now string
	Report                triage.Report
	Evidence              []kv
	Models                []statusModel
	Charts                []chart
	Store                 *storeStatus
}

// statusPage answers GET / with the status page.
func (g *Gateway) statusPage(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	rep := g.triage.Report()
	d := statusData{Phase: g.Phase().String(), Readiness: "not ready", Now: time.Now().UTC().Format(time.RFC3339), Report: rep,
		Charts: statusCharts(g.triage.Series()), Store: g.storeStatus()}
	ready := g.Phase() == Serving
	for k, v := range rep.Evidence {
		b, _ := json.Marshal(v)
		d.Evidence = append(d.Evidence, kv{k, string(b)})
	}
	sort.Slice(d.Evidence, func(i, j int) bool { return d.Evidence[i].K < d.Evidence[j].K })
	for _, rt := range g.live().models {
		m := rt.fm
		sm := statusModel{Name: m.Name, Verdict: verdictOf(rep, m.Name), MaxModelLen: m.MaxModelLen(), Uncounted: rt.uncountedWhy}
		sm.Fairness = admission.FIFO.String()
		if rt.fair {
			sm.Fairness = admission.Tokens.String()
		}
		sm.Flows = statusFlows(rt)
		pst := rt.pool.Stats()
		for _, q := range pst.Depth {
			sm.Queue += q
		}
		bev := map[string]triage.BackendReport{}
		for _, mr := range rep.Models {
			if mr.Model == m.Name {
				for _, br := range mr.Backends {
					bev[br.Backend] = br
				}
			}
		}
		ready = ready && m.ReadyCount() >= m.MinReady()
		slots := rt.slotStats()
		for _, b := range m.Backends() {
			st := b.Status()
			br := bev[b.URL.Host]
			slot := slots[b.URL.Host]
			sb := statusBackend{Host: b.URL.Host, Source: st.Source, State: st.State.String(), Since: st.Since.UTC().Format(time.RFC3339), Reason: st.Reason,
				InFlight: st.InFlight, Tokens: slot.Tokens, Budget: slot.Budget,
				TTFT: msOf(br.Evidence["ttft_p50_ms"]), TPOT: msOf(br.Evidence["tpot_p50_ms"])}
			if br.SlowPathFallback {
				sb.Notes = "possible slow-path fallback"
			}
			if st.Draining {
				sb.Notes += " draining"
			}
			if slot.Ejected {
				sb.Notes += " ejected"
			}
			if slot.GaugesState == admission.GaugesUnavailable {
				sb.Notes += " gauges unavailable"
			}
			if mm := st.Mismatch; mm != nil {
				sb.Notes += fmt.Sprintf(" %s mismatch (gateway %d, backend %d)", mm.Check, mm.Gateway, mm.Backend)
			}
			if st.State != fleet.Ready && sb.Notes == "" {
				sb.Notes = "no traffic"
			}
			if ki := kvIndexOf(rt, b.URL.Host); ki != nil { // routing: precise
				sb.Notes += fmt.Sprintf(" kv index %s (%d blocks)", ki.State, ki.Blocks)
				if ki.Reason != "" {
					sb.Notes += ": " + ki.Reason
				}
			}
			sm.Backends = append(sm.Backends, sb)
		}
		d.Models = append(d.Models, sm)
	}
	if ready {
		d.Readiness = "ready"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	return statusTmpl.Execute(w, d)
}

func msOf(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.1f ms", f)
	}
	return "-"
}
