// Package archtest holds tests of the code's shape rather than its
// behaviour.
package archtest

import (
	"os"
	"os/exec"
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
