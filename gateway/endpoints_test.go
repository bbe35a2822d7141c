package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestEveryRouteHasASpec: every route either listener serves, with every
// method it answers, is an endpoint of the spec list on that listener; and
// every spec's paths are routed where the spec says. A route added beside
// the list (a handler the specs do not know: no operation, no triage
// class, no simulator check) fails here.
func TestEveryRouteHasASpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config)
	}{
		{"open", nil}, // the admin pages on the API listener too (adminOnAPI)
		{"keyed", func(c *config.Config) {
			c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{{Name: "a", SHA256: digestOf("sk-a"), Models: []string{"*"}}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startGateway(t, tc.mutate, startKeyedSim(t))
			for _, l := range []listenerKind{apiListener, adminListener} {
				pages := l == adminListener || tg.adminOnAPI()
				routed := map[string][]string{}
				err := chi.Walk(tg.router(l), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
					routed[route] = append(routed[route], method)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for route, methods := range routed {
					e := specOf(route)
					if e == unmatched {
						t.Errorf("listener %d: route %s %v has no spec in endpointList", l, route, methods)
						continue
					}
					for _, m := range methods {
						if !slices.Contains(e.methods, m) {
							t.Errorf("listener %d: %s %s is routed but its spec allows %v", l, m, route, e.methods)
						}
					}
				}
				for _, e := range endpoints.list {
					want := e.on == onBoth || (e.on == onAPI && l == apiListener) || (e.on == onAdmin && pages)
					for _, p := range e.paths {
						if _, ok := routed[p]; ok != want {
							t.Errorf("listener %d (admin pages %v): spec %s (on %d) routed %v, want %v", l, pages, p, e.on, ok, want)
						}
					}
				}
			}
		})
	}
}

// TestEverySpecHasASimulatorRoute: every endpoint vLLM serves (spec.vllm)
// is served by the simulator too, with the spec's methods: a simulator
// on a real port is sent a minimal well-formed request on each path and
// method, and must not answer it as an unknown route (its 404 for a path
// it has no route for) or a method it has no route for (405).
func TestEverySpecHasASimulatorRoute(t *testing.T) {
	s := sim.New(sim.Config{Model: "m", OutputTokens: 2}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); s.Close() })
	base := "http://" + ln.Addr().String()
	client := &http.Client{}
	send := func(method, path string) (int, []byte) {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"model":"m"}`)
		}
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	nfStatus, notFound := send(http.MethodPost, "/no-such-route")
	if nfStatus != http.StatusNotFound {
		t.Fatalf("the simulator answers an unknown route %d %s, want its 404", nfStatus, notFound)
	}
	checked := 0
	for _, e := range endpoints.list {
		if !e.vllm {
			continue
		}
		for _, p := range e.paths {
			path := strings.ReplaceAll(p, "{id}", "resp_0")
			for _, m := range e.methods {
				checked++
				status, b := send(m, path)
				t.Logf("%s %s: %d", m, path, status)
				if status == http.StatusMethodNotAllowed || (status == nfStatus && bytes.Equal(b, notFound)) {
					t.Errorf("%s %s: the simulator has no route for this spec (answered %d %s)", m, path, status, b)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d spec routes against the simulator, want every vLLM route", checked)
	}
}

// TestSpecsAreWhole: every spec can be served: paths and methods, a door
// or a handler (not both), and every model API an operation name.
func TestSpecsAreWhole(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range endpoints.list {
		if len(e.paths) == 0 || len(e.methods) == 0 || e.errors == nil {
			t.Errorf("spec %v: no path, method or error envelope", e.paths)
		}
		handlers := 0
		for _, set := range []bool{e.door != nil, e.local != nil, e.raw != nil} {
			if set {
				handlers++
			}
		}
		if handlers != 1 {
			t.Errorf("spec %v: %d of door, local, raw set, want exactly one", e.paths, handlers)
		}
		if e.door != nil && (e.operation == "" || e.read == nil || !e.keyed || !e.vllm) {
			t.Errorf("spec %v: a model API needs an operation name, a body reader, a key and a vLLM route", e.paths)
		}
		for _, p := range e.paths {
			if seen[p] {
				t.Errorf("path %s in two specs", p)
			}
			seen[p] = true
			if specOf(p) != e {
				t.Errorf("specOf(%s) is not its spec", p)
			}
		}
	}
	if specOf("unmatched") != unmatched || specOf("unmatched").operation != "" {
		t.Error("a path no spec has must read as unmatched")
	}
}

// TestEndpointsAsDocumented: the endpoints docs/endpoints.md lists as
// served (its table's first column, `METHOD /path`; rows saying "not
// served" aside) are exactly endpointList's paths and methods (HEAD, which
// every GET probe also answers, aside). A spec removed, or added without
// its line in the docs, fails here.
func TestEndpointsAsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/endpoints.md")
	if err != nil {
		t.Fatal(err)
	}
	cell := regexp.MustCompile("`(GET|POST) (/[^`]*)`")
	documented := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 3 || strings.Contains(cols[2], "not served") {
			continue
		}
		for _, m := range cell.FindAllStringSubmatch(cols[1], -1) {
			documented[m[1]+" "+m[2]] = true
		}
	}
	specified := map[string]bool{}
	for _, e := range endpointList() {
		for _, p := range e.paths {
			for _, m := range e.methods {
				if m != http.MethodHead {
					specified[m+" "+p] = true
				}
			}
		}
	}
	for k := range specified {
		if !documented[k] {
			t.Errorf("%s has a spec but no row in docs/endpoints.md's table", k)
		}
	}
	for k := range documented {
		if !specified[k] {
			t.Errorf("docs/endpoints.md lists %s as served, but endpointList has no spec for it", k)
		}
	}
	if len(specified) < 20 {
		t.Errorf("only %d endpoints specified", len(specified))
	}
}
