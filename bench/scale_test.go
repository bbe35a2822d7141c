package main

import (
	"crypto/sha256"
	"encoding/xml"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/maitred-dev/maitred/config"
)

// The chart is well-formed XML, draws one polyline per series through
// its points (broken at a missing one), and places points by value: the
// larger y higher up (smaller SVG y), x on a log scale.
func TestLineChart(t *testing.T) {
	svg := lineChart(chart{title: "a <title> & more", xLabel: "n", yLabel: "us", xs: []float64{1, 10, 100, 1000}, logX: true,
		series: []series{{name: "maitred", ys: []float64{1, 2, 4, 8}}, {name: "base", ys: []float64{1, math.NaN(), 1, 1}}}})
	dec := xml.NewDecoder(strings.NewReader(svg))
	var polylines []string
	var circles [][2]float64
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed: %v\n%s", err, svg)
			}
			break
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := func(name string) string {
			for _, a := range se.Attr {
				if a.Name.Local == name {
					return a.Value
				}
			}
			return ""
		}
		switch se.Name.Local {
		case "polyline":
			polylines = append(polylines, attr("points"))
		case "circle":
			x, err1 := strconv.ParseFloat(attr("cx"), 64)
			y, err2 := strconv.ParseFloat(attr("cy"), 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("circle at %q, %q", attr("cx"), attr("cy"))
			}
			circles = append(circles, [2]float64{x, y})
		}
	}
	// maitred: one line of 4 points; base: broken at the NaN, so one
	// line of its last 2 points (a single point draws no line).
	if len(polylines) != 2 || strings.Count(polylines[0], ",") != 4 || strings.Count(polylines[1], ",") != 2 {
		t.Fatalf("polylines %q", polylines)
	}
	if len(circles) != 7 {
		t.Fatalf("%d points, want 7", len(circles))
	}
	// Log x: 1, 10, 100, 1000 equally spaced.
	d1, d2 := circles[1][0]-circles[0][0], circles[3][0]-circles[2][0]
	if math.Abs(d1-d2) > 0.2 || d1 <= 0 {
		t.Errorf("x spacing %v and %v, want equal and positive (log scale)", d1, d2)
	}
	if !(circles[3][1] < circles[2][1] && circles[2][1] < circles[0][1]) {
		t.Errorf("larger values must be drawn higher: %v", circles[:4])
	}
	if !strings.Contains(svg, "a &lt;title&gt; &amp; more") {
		t.Error("the title is not escaped")
	}
}

func TestAxisRange(t *testing.T) {
	for _, tt := range []struct {
		vs       []float64
		fromZero bool
		lo, hi   float64
	}{
		{[]float64{3, 5, 4}, true, 0, 5},
		{[]float64{3, 5, 4}, false, 3, 5},
		{[]float64{2, 2}, false, 2, 4},               // flat: widened
		{[]float64{math.NaN()}, true, 0, 1},          // nothing to draw
		{[]float64{-2, 1, math.Inf(1)}, true, -2, 1}, // infinities skipped
	} {
		lo, hi := axisRange(tt.vs, tt.fromZero)
		if lo != tt.lo || hi != tt.hi {
			t.Errorf("axisRange(%v, %v) = %v, %v; want %v, %v", tt.vs, tt.fromZero, lo, hi, tt.lo, tt.hi)
		}
	}
}

// Each event read pairs with the simulator's last flush before it, even
// when read just before the flush was stamped, and a flush carrying two
// events pairs with both.
func TestEventDelays(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sent := []time.Time{at(0), at(1000), at(2000)}
	recv := []time.Time{at(2), at(3), at(999), at(2005)}
	got := eventDelays(sent, recv, 100*time.Millisecond)
	want := []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, -time.Millisecond, 5 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("delay %d = %v, want %v", i, got[i], want[i])
		}
	}
	if d := eventDelays(sent, []time.Time{at(-500)}, 100*time.Millisecond); len(d) != 0 {
		t.Errorf("an event before any flush: %v, want none", d)
	}
}

// A generated keys_file is valid as maitred reads it, with n keys whose
// digests are those of benchKey, and a new generation differs; written
// as JSON, it holds the same keys.
func TestKeysFileYAML(t *testing.T) {
	cfg := config.Default()
	keys, err := config.ParseKeys(keysFileYAML(3, 0), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fromJSON, err := config.ParseKeys(keysFileJSON(3, 0), &cfg); err != nil || !reflect.DeepEqual(fromJSON, keys) {
		t.Errorf("the JSON keys_file reads %+v, %v; want the YAML one's %+v", fromJSON, err, keys)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys, want 3", len(keys))
	}
	d, err := keys[2].Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d != sha256.Sum256([]byte(benchKey(2))) {
		t.Errorf("key 2's digest is not benchKey(2)'s")
	}
	if string(keysFileYAML(3, 0)) == string(keysFileYAML(3, 1)) {
		t.Error("two generations are the same file: a rewrite would not reload")
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts("1, 8,64")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 8 || got[2] != 64 {
		t.Fatalf("parseInts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,,2", "0", "-3", "x"} {
		if _, err := parseInts(bad); err == nil {
			t.Errorf("parseInts(%q): no error", bad)
		}
	}
}

// The table prints a row per point and "-" where a figure was not
// measured; a column reads back its values in order.
func TestCurveTable(t *testing.T) {
	c := &curve{dim: "d", xName: "n", cols: []string{"a", "b"}}
	c.add(1, 1.5, math.NaN())
	c.add(1000, 12345, 0.25)
	tab := c.table()
	lines := strings.Split(strings.TrimSpace(tab), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], "1.500") || !strings.Contains(lines[2], " -") || !strings.Contains(lines[3], "12345") {
		t.Fatalf("table:\n%s", tab)
	}
	if a := c.col("a"); len(a) != 2 || a[0] != 1.5 || a[1] != 12345 {
		t.Errorf("col a = %v", a)
	}
}

// The scrape sums a metric's samples across labels, and only that
// metric (not one whose name it prefixes).
func TestSumMetric(t *testing.T) {
	text := "# HELP go_goroutines x\ngo_goroutines 12\ngo_goroutines_total 99\ngo_goroutines_x{a=\"1\"} 5\nmaitred_x{a=\"1\"} 2\nmaitred_x{a=\"2\"} 3.5\n"
	if v, err := sumMetric(strings.NewReader(text), "go_goroutines"); err != nil || v != 12 {
		t.Errorf("go_goroutines = %v, %v; want 12", v, err)
	}
	if v, err := sumMetric(strings.NewReader(text), "maitred_x"); err != nil || v != 5.5 {
		t.Errorf("maitred_x = %v, %v; want 5.5", v, err)
	}
	if _, err := sumMetric(strings.NewReader(text), "absent"); err == nil {
		t.Error("an absent metric: no error")
	}
}

// Several metrics come from one scrape: an absent one is 0 and the
// error, the others are read all the same.
func TestScrapeMetrics(t *testing.T) {
	scrapes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scrapes++
		io.WriteString(w, "go_goroutines 12\nmaitred_x{a=\"1\"} 2\nmaitred_x{a=\"2\"} 3.5\n")
	}))
	defer srv.Close()
	v := make([]float64, 3)
	err := scrapeMetrics(srv.URL, []string{"maitred_x", "absent", "go_goroutines"}, v)
	if err == nil || v[0] != 5.5 || v[1] != 0 || v[2] != 12 || scrapes != 1 {
		t.Errorf("got %v, %v in %d scrapes; want [5.5 0 12], an error for absent, 1 scrape", v, err, scrapes)
	}
	if g, err := scrapeMetric(srv.URL, "go_goroutines"); err != nil || g != 12 {
		t.Errorf("scrapeMetric: %v, %v; want 12", g, err)
	}
}

// TestReadEventsNotify: every "\n\n"-terminated event is timed, across
// reads that split it, and first is called once (at the first event, or
// at the end when none came).
func TestReadEventsNotify(t *testing.T) {
	stream := "data: a\n\ndata: b\n\ndata: c\n\n"
	calls := 0
	if got := readEventsNotify(strings.NewReader(stream), 3, func() { calls++ }); len(got) != 3 || calls != 1 {
		t.Errorf("%d events, first called %d times; want 3 and 1", len(got), calls)
	}
	calls = 0
	if got := readEventsNotify(strings.NewReader("data: partial"), 64, func() { calls++ }); len(got) != 0 || calls != 1 {
		t.Errorf("%d events, first called %d times; want 0 and 1", len(got), calls)
	}
	if got := readEvents(strings.NewReader(stream)); len(got) != 3 {
		t.Errorf("readEvents: %d events, want 3", len(got))
	}
}

// A stream is whole once it ended cleanly after its [DONE]; cut anywhere
// else, or ended by an error, it is not.
func TestStreamEnd(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		whole      bool
	}{
		{"done", "data: {}\n\ndata: [DONE]\n\n", true},
		{"cut before done", "data: {}\n\n", false},
		{"cut inside done", "data: {}\n\ndata: [DO", false},
		{"long stream", strings.Repeat("data: {\"x\":1}\n\n", 100) + "data: [DONE]\n\n", true},
	} {
		s := &streamEnd{r: strings.NewReader(tc.body)}
		readEventsNotify(s, 7, nil)
		if err := s.whole(); (err == nil) != tc.whole {
			t.Errorf("%s: whole() = %v, want whole %v", tc.name, err, tc.whole)
		}
	}
	s := &streamEnd{r: io.MultiReader(strings.NewReader("data: [DONE]\n\n"), iotest.ErrReader(io.ErrUnexpectedEOF))}
	readEventsNotify(s, 64, nil)
	if err := s.whole(); err != io.ErrUnexpectedEOF {
		t.Errorf("a read error after [DONE]: whole() = %v", err)
	}
}
