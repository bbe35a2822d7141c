package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// A tiny SVG line chart: the scale scenario's curves, each point beside
// its baseline, one line per series, no dependency.

type series struct {
	name string
	ys   []float64 // NaN: no point
}

type chart struct {
	title, xLabel, yLabel string
	xs                    []float64
	logX                  bool
	series                []series
}

const (
	svgW, svgH                     = 640, 400
	padL, padR, padT, padB float64 = 70, 20, 40, 60
)

var svgColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// axisRange is the [lo, hi] the values span, widened so that a flat line
// or a single point still has room; the y axis starts at 0 for values
// that are all positive.
func axisRange(vs []float64, fromZero bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo > hi {
		return 0, 1
	}
	if fromZero && lo > 0 {
		lo = 0
	}
	if hi == lo {
		hi = lo + max(1, math.Abs(lo))
	}
	return lo, hi
}

// scaleTo maps v in [lo, hi] onto [a, b].
func scaleTo(v, lo, hi, a, b float64) float64 {
	return a + (v-lo)/(hi-lo)*(b-a)
}

// lineChart renders c as a standalone SVG document.
func lineChart(c chart) string {
	xv := make([]float64, len(c.xs))
	for i, x := range c.xs {
		xv[i] = x
		if c.logX {
			xv[i] = math.Log10(max(x, 1e-9))
		}
	}
	xlo, xhi := axisRange(xv, false)
	var all []float64
	for _, s := range c.series {
		all = append(all, s.ys...)
	}
	ylo, yhi := axisRange(all, true)
	px := func(x float64) float64 { return scaleTo(x, xlo, xhi, padL, svgW-padR) }
	py := func(y float64) float64 { return scaleTo(y, ylo, yhi, svgH-padB, padT) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="14">%s</text>`+"\n", svgW/2, html.EscapeString(c.title))
	// Axes.
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", padL, svgH-padB, svgW-padR, svgH-padB)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", padL, padT, padL, svgH-padB)
	for i, x := range c.xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(xv[i]), svgH-padB+16, fmtFig(x))
	}
	for k := 0; k <= 4; k++ {
		y := ylo + (yhi-ylo)*float64(k)/4
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", padL, py(y), svgW-padR, py(y))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-4, py(y)+4, fmtFig(y))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (padL+svgW-padR)/2, svgH-20, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (padT+svgH-padB)/2, html.EscapeString(c.yLabel))
	// One polyline per series (broken where a point is missing), with
	// its points marked, and a legend.
	for si, s := range c.series {
		color := svgColors[si%len(svgColors)]
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, y := range s.ys {
			if i >= len(xv) || math.IsNaN(y) || math.IsInf(y, 0) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xv[i]), py(y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(xv[i]), py(y), color)
		}
		flush()
		ly := padT + 4 + float64(si)*16
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", padL+10, ly, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", padL+24, ly+9, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
