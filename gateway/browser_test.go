package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/sim"
)

// TestStatusPageInBrowser renders the status page in headless Chromium
// (Debian's chromium package; .ci/run installs it) and checks what a person
// would see. Without the browser the test is skipped, unless
// MAITRED_REQUIRE_BROWSER=1 (as in CI) makes that a failure.
func TestStatusPageInBrowser(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MAITRED_REQUIRE_BROWSER") == "1" {
			t.Fatal("chromium is required (MAITRED_REQUIRE_BROWSER=1) but not installed")
		}
		t.Skip("chromium not installed; .ci/run installs it")
	}
	e := startE2E(t, sim.Config{OutputTokens: 2}, nil)
	for range 3 {
		readBodyT(t, e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	}
	dir := t.TempDir()
	shot := filepath.Join(dir, "status.png")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--user-data-dir=" + dir,
		"--window-size=1200,900"}
	dom, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", e.gw.URL+"/")...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	page := string(dom)
	for _, want := range []string{"maitred", `id="verdict">healthy`, "Model m", `class="ready">ready`, `id="readiness">ready`} {
		if !strings.Contains(page, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	if out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, e.gw.URL+"/")...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Fatalf("screenshot missing or blank: %v", err)
	}
}
