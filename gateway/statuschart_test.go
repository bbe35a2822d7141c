package gateway

import (
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

var (
	chartRE = regexp.MustCompile(`(?s)<svg [^>]*class="chart" id="([^"]+)" data-points="(\d+)"[^>]*>(.*?)</svg>`)
	pathRE  = regexp.MustCompile(`<path class="series" data-name="([^"]*)" data-points="(\d+)" d="([^"]*)"`)
)

var wantCharts = []string{"chart-rate", "chart-ttft", "chart-tpot", "chart-queue", "chart-vllm", "chart-kv"}

// statusSVGs fetches / over HTTP and returns each chart's SVG by id and the
// number of values it drew, checking that each path draws as many points
// as it says.
func statusSVGs(t *testing.T, tg *testGateway) (page string, svgs map[string]string, points map[string]int) {
	t.Helper()
	res, err := tg.client.Get(tg.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page = readBodyT(t, res)
	svgs, points = map[string]string{}, map[string]int{}
	for _, m := range chartRE.FindAllStringSubmatch(page, -1) {
		n, _ := strconv.Atoi(m[2])
		svgs[m[1]], points[m[1]] = m[0], n
		sum := 0
		for _, p := range pathRE.FindAllStringSubmatch(m[3], -1) {
			k, _ := strconv.Atoi(p[2])
			if cmds := strings.Count(p[3], "M") + strings.Count(p[3], "L"); cmds != k {
				t.Errorf("%s %q: data-points %d but the path has %d points: %q", m[1], p[1], k, cmds, p[3])
			}
			sum += k
		}
		if sum != n {
			t.Errorf("%s: data-points %d, its paths %d", m[1], n, sum)
		}
	}
	return page, svgs, points
}

// TestStatusPageCharts: after streamed traffic, every chart of the status
// page (request rate and failures, TTFT, TPOT, gateway queue, vLLM waiting
// and running, KV usage) has drawn data, read from the SVG through real
// HTTP; then, where Chromium is installed (Debian's chromium; .ci/run
// installs it), each chart is rendered by it alone and its screenshot must
// show coloured line pixels inside the plot area.
func TestStatusPageCharts(t *testing.T) {
	e := startE2E(t, sim.Config{OutputTokens: 6, TTFT: 2 * time.Millisecond, ITL: time.Millisecond}, func(c *config.Config) {
		c.ScrapeInterval = config.Duration(5 * time.Millisecond)
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { e.gw.Fleet.RunScraper(ctx, 5*time.Millisecond, e.gw.ObserveScrape); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	_, _, points := statusSVGs(t, e.gw)
	for _, id := range wantCharts {
		if _, ok := points[id]; !ok {
			t.Fatalf("the page has no chart %s", id)
		}
	}
	for range 5 {
		res := e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		if body := readBodyT(t, res); res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	}
	var page string
	var svgs map[string]string
	eventually(t, "every chart drew data", func() bool {
		page, svgs, points = statusSVGs(t, e.gw)
		for _, id := range wantCharts {
			if points[id] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("points drawn per chart: %v", points)
	if v := strings.Index(page, `id="verdict"`); v < 0 || v > strings.Index(page, `class="chart"`) || strings.Index(page, `class="chart"`) > strings.Index(page, `class="backends"`) {
		t.Errorf("want the verdict, then the charts, then the tables")
	}
	if !strings.Contains(page, `<ul id="said"><li>nothing stands out`) {
		t.Errorf("the verdict's evidence in words is missing")
	}

	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MAITRED_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium is required (MAITRED_REQUIRE_BROWSER=1) but not installed")
		}
		t.Skip("chromium not installed: the SVG data was checked through HTTP only")
	}
	dir := t.TempDir()
	cctx, ccancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer ccancel()
	for _, id := range wantCharts {
		svgFile := filepath.Join(dir, id+".svg")
		if err := os.WriteFile(svgFile, []byte(svgs[id]), 0o600); err != nil {
			t.Fatal(err)
		}
		shot := filepath.Join(dir, id+".png")
		args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(dir, "profile"),
			"--hide-scrollbars", "--window-size=700,300", "--screenshot=" + shot, "file://" + svgFile}
		if out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot %s: %v\n%s", id, err, out)
		}
		if n := colouredPlotPixels(t, shot); n < 8 { // a lone point is a dot of about 20 pixels
			t.Errorf("%s: the screenshot shows %d coloured pixels in the plot area; nothing was drawn", id, n)
		} else {
			t.Logf("%s: %d coloured pixels drawn", id, n)
		}
	}
}

// colouredPlotPixels counts the saturated pixels (lines and points: the
// axes, grid and text are grey or black) inside a chart's plot area, above
// its legend.
func colouredPlotPixels(t *testing.T, file string) int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < min(b.Max.Y, padT+plotH+3); y++ {
		for x := b.Min.X + padL - 3; x < min(b.Max.X, padL+plotW+3); x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			hi, lo := max(r, g, bl)>>8, min(r, g, bl)>>8
			if hi-lo > 60 {
				n++
			}
		}
	}
	return n
}
