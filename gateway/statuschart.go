package gateway

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/triage"
)

// The status page's charts: inline SVG drawn here, on the server, from the
// triage window bucket by bucket (triage.Engine.Series). No scripts.

// chartLine is one line of a chart: a value per bucket (absent values
// break the line).
type chartLine struct {
	name string
	vals []triage.Value
}

// chart is one drawn chart.
type chart struct {
	ID, Title string
	SVG       template.HTML
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

const (
	chartW, chartH                 = 640, 190
	padL, padR, padT, padB         = 56, 10, 18, 22
	legendH                        = 16
	plotW, plotH                   = chartW - padL - padR, chartH - padT - padB
	chartFmtY                      = "%.3g"
	chartPointRadius       float64 = 2.5
)

// drawChart renders lines over n buckets as an SVG. yMax > 0 fixes the
// scale (e.g. 100 for a percentage); else it is the largest value. The svg
// element carries data-points, the number of values drawn, and each line
// is a path (class "series") with data-points of its own.
func drawChart(id, unit string, lines []chartLine, n int, span string, yMax float64) template.HTML {
	fixed := yMax > 0
	if !fixed {
		for _, l := range lines {
			for _, v := range l.vals {
				if v.Has && v.V > yMax {
					yMax = v.V
				}
			}
		}
		if yMax <= 0 {
			yMax = 1
		}
		yMax *= 1.1
	}
	x := func(i int) float64 {
		if n <= 1 {
			return padL
		}
		return padL + float64(i)*plotW/float64(n-1)
	}
	y := func(v float64) float64 { return padT + plotH - math.Min(v, yMax)/yMax*plotH }
	h := chartH + legendH*((len(lines)+2)/3)
	var sb strings.Builder
	total := 0
	var body strings.Builder
	for li, l := range lines {
		color := palette[li%len(palette)]
		var d strings.Builder
		pts := 0
		prev := false
		var dots []string
		for i, v := range l.vals {
			if !v.Has {
				prev = false
				continue
			}
			cmd := "L"
			if !prev {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, x(i), y(v.V))
			// A value with no neighbour would draw nothing: mark it.
			next := i+1 < len(l.vals) && l.vals[i+1].Has
			if !prev && !next {
				dots = append(dots, fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s"/>`, x(i), y(v.V), chartPointRadius, color))
			}
			prev = true
			pts++
		}
		total += pts
		fmt.Fprintf(&body, `<path class="series" data-name="%s" data-points="%d" d="%s" fill="none" stroke="%s" stroke-width="1.8"/>`,
			template.HTMLEscapeString(l.name), pts, strings.TrimSpace(d.String()), color)
		body.WriteString(strings.Join(dots, ""))
		lx, ly := padL+(li%3)*(plotW/3), chartH+legendH*(li/3)+4
		fmt.Fprintf(&body, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`,
			lx, ly, color, lx+14, ly+9, template.HTMLEscapeString(l.name))
	}
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="%s" data-points="%d" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11" font-family="system-ui,sans-serif">`,
		id, total, chartW, h, chartW, h)
	// Axes, gridlines at 0, half and the top, and the time span.
	for _, f := range []float64{0, 0.5, 1} {
		yy := padT + plotH - f*plotH
		fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">`+chartFmtY+`</text>`,
			padL, padL+plotW, yy, yy, padL-4, yy+4, f*yMax)
	}
	fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="end">%s</text>`, padL-4, padT-6, template.HTMLEscapeString(unit))
	fmt.Fprintf(&sb, `<text x="%d" y="%d">%s ago</text><text x="%d" y="%d" text-anchor="end">now</text>`,
		padL, padT+plotH+15, template.HTMLEscapeString(span), padL+plotW, padT+plotH+15)
	if total == 0 {
		fmt.Fprintf(&sb, `<text class="nodata" x="%d" y="%d" text-anchor="middle" fill="#888">no data in the window</text>`, padL+plotW/2, padT+plotH/2)
	}
	sb.WriteString(body.String())
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}

// statusCharts draws the triage window: request rate and failures by layer;
// TTFT and TPOT p50/p99 per backend; the gateway queue depth per model;
// vLLM's waiting and running requests, and KV cache usage, per backend.
func statusCharts(s triage.Series) []chart {
	n := s.Buckets
	secs := s.Width.Seconds()
	span := (s.Width * time.Duration(n)).String()
	rate := chartLine{name: "requests/s", vals: make([]triage.Value, n)}
	fails := make([][]triage.Value, len(s.Layers))
	for k := range fails {
		fails[k] = make([]triage.Value, n)
	}
	anyFail := make([]bool, len(s.Layers))
	var ttft, tpot, vllm, kv, queue []chartLine
	for i := range n {
		rate.vals[i] = triage.Value{V: 0, Has: true}
		for k := range fails {
			fails[k][i] = triage.Value{V: 0, Has: true}
		}
	}
	for _, m := range s.Models {
		queue = append(queue, chartLine{name: m.Model, vals: m.Queue})
		for _, b := range m.Backends {
			name := m.Model + "/" + b.Backend
			if b.Backend == "" {
				name = m.Model + " (no backend)"
			}
			col := func(f func(p triage.Point) triage.Value) []triage.Value {
				out := make([]triage.Value, n)
				for i, p := range b.Points {
					out[i] = f(p)
				}
				return out
			}
			for i, p := range b.Points {
				rate.vals[i].V += float64(p.Requests) / secs
				for k, c := range p.Failures {
					if c > 0 {
						fails[k][i].V += float64(c) / secs
						anyFail[k] = true
					}
				}
			}
			if b.Backend == "" {
				continue
			}
			ttft = append(ttft,
				chartLine{name + " p50", col(func(p triage.Point) triage.Value { return p.TTFTP50 })},
				chartLine{name + " p99", col(func(p triage.Point) triage.Value { return p.TTFTP99 })})
			tpot = append(tpot,
				chartLine{name + " p50", col(func(p triage.Point) triage.Value { return p.TPOTP50 })},
				chartLine{name + " p99", col(func(p triage.Point) triage.Value { return p.TPOTP99 })})
			vllm = append(vllm,
				chartLine{name + " waiting", col(func(p triage.Point) triage.Value { return p.Waiting })},
				chartLine{name + " running", col(func(p triage.Point) triage.Value { return p.Running })})
			kv = append(kv, chartLine{name, col(func(p triage.Point) triage.Value {
				v := p.KV
				v.V *= 100
				return v
			})})
		}
	}
	rateLines := []chartLine{rate}
	for k, f := range fails {
		if anyFail[k] {
			rateLines = append(rateLines, chartLine{"failed at " + s.Layers[k] + "/s", f})
		}
	}
	return []chart{
		{"chart-rate", "Requests and failures by layer", drawChart("chart-rate", "per s", rateLines, n, span, 0)},
		{"chart-ttft", "Time to first token, p50 and p99", drawChart("chart-ttft", "ms", ttft, n, span, 0)},
		{"chart-tpot", "Time per output token, p50 and p99", drawChart("chart-tpot", "ms", tpot, n, span, 0)},
		{"chart-queue", "Gateway queue depth", drawChart("chart-queue", "requests", queue, n, span, 0)},
		{"chart-vllm", "vLLM waiting and running", drawChart("chart-vllm", "requests", vllm, n, span, 0)},
		{"chart-kv", "vLLM KV cache usage", drawChart("chart-kv", "%", kv, n, span, 100)},
	}
}
