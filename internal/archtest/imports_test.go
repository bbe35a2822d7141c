// Package archtest holds tests of the code's shape rather than its
// behaviour.
package archtest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The tokenizer and the admission pipeline must stay free of HTTP, so that
// they can be tested and benchmarked as plain functions and reused outside
// the gateway. fleet may use net/http as a client only, never chi or the
// gateway. quota (the keys' limits) is pure logic too, importing no other
// package of maitred. The Redis client lives in package store alone.
// config is a leaf: plain data, decoding and validation, read by every
// layer and importing none of them (nor any network code).
func TestLayering(t *testing.T) {
	const mod = "github.com/maitred-dev/maitred/"
	const redis = "github.com/redis/go-redis/v9"
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"tokenize/...", []string{"net/http", "github.com/go-chi/chi/v5", mod + "gateway", mod + "fleet", mod + "sim", mod + "admission"}},
		{"admission/...", []string{"net/http", "github.com/go-chi/chi/v5", mod + "gateway", mod + "sim", redis, mod + "store"}},
		// The shared store is its own package: the network client stays
		// out of admission (which declares the Shared interface it
		// consumes) and out of the gateway (cmd wires it in).
		{"store/...", []string{"github.com/go-chi/chi/v5", mod + "gateway", mod + "fleet", mod + "sim"}},
		{"gateway/...", []string{redis, mod + "store"}},
		{"fleet/...", []string{"github.com/go-chi/chi/v5", mod + "gateway", mod + "sim", "net/http/httptest"}},
		{"internal/ojson", []string{"net/http"}},
		// The backend client knows HTTP/1.1, not maitred: the gateway
		// reads its errors, never the other way round.
		{"internal/upstream", []string{"github.com/go-chi/chi/v5", mod + "gateway", mod + "fleet", mod + "sim", mod + "admission", mod + "config"}},
		{"config/...", []string{"net/http", "github.com/go-chi/chi/v5", mod + "gateway", mod + "fleet", mod + "admission", mod + "sim", mod + "tokenize", mod + "triage"}},
		{"quota/...", []string{"net/http", redis, mod + "store", mod + "gateway", mod + "fleet", mod + "admission", mod + "config", mod + "sim", mod + "tokenize", mod + "triage"}},
		{"triage/...", []string{"net/http", "github.com/prometheus/client_golang/prometheus", mod + "gateway", mod + "fleet"}},
		// The trace pipeline is built from the config alone; the gateway
		// gets a Provider, never the other way round.
		{"internal/telemetry", []string{mod + "gateway", mod + "fleet", mod + "sim", mod + "admission"}},
	}
	for _, r := range rules {
		if _, err := os.Stat("../../" + strings.TrimSuffix(r.pkg, "/...")); err != nil {
			continue // the package does not exist yet
		}
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../../"+r.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", r.pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[d] = true
		}
		for _, f := range r.forbidden {
			if deps[f] {
				t.Errorf("%s depends on %s", r.pkg, f)
			}
		}
	}
}

// testPackage is an import path of a package made for tests: the
// OpenTelemetry SDK's tracetest and metrictest (metricdatatest), the
// standard library's net/http/httptest, testing/iotest, fstest, slogtest
// and synctest, maitred's own internal/dnstest and internal/redistest,
// anything called testutil, and testing itself.
func testPackage(path string) bool {
	last := path[strings.LastIndexByte(path, '/')+1:]
	return strings.HasSuffix(last, "test") || last == "testutil" || path == "testing"
}

// Production code imports no test package: they are built for tests
// (fake spans, in-process servers, t.Helper plumbing), not for serving.
// Every package's non-test files are checked (the helpers that are test
// packages themselves aside), and the shipped binary's whole dependency
// graph, third-party packages included.
func TestNoTestPackagesInProductionCode(t *testing.T) {
	const mod = "github.com/maitred-dev/maitred/"
	// Test helpers: made for tests, imported by test files (and by the
	// benchmark harness, bench), never by what ships.
	helpers := map[string]bool{mod + "internal/dnstest": true, mod + "internal/redistest": true, mod + "internal/fixtures": true}

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || helpers[f[0]] || testPackage(f[0]) {
			continue
		}
		checked++
		for _, imp := range f[1:] {
			if imp == "testing" && f[0] == mod+"bench" {
				continue // the benchmark harness is a tool, not the product
			}
			if testPackage(imp) {
				t.Errorf("%s imports the test package %s in non-test code", f[0], imp)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d packages: go list did not list the module", checked)
	}

	out, err = exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../../cmd/maitred").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps cmd/maitred: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, mod+"internal/telemetry") {
		t.Fatalf("cmd/maitred's dependencies do not include internal/telemetry: %v", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "internal/") {
			continue // the runtime's own (internal/synctest is in every binary)
		}
		if testPackage(d) || helpers[d] {
			t.Errorf("cmd/maitred depends on the test package %s", d)
		}
	}
}
