package gateway

// The admin pages (/metrics, /debug/*, the status page) name every tenant's
// key, its usage and the backends' URLs: they belong on their own listener
// (admin_listen), never in reach of an API key holder.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// adminPaths are the admin pages.
var adminPaths = []string{"/metrics", "/debug/triage", "/debug/backends", "/debug/store", "/debug/fairness", "/"}

// startKeyedSim starts a simulator serving model (default "m") and
// returns its URL.
func startKeyedSim(t *testing.T, model ...string) string {
	t.Helper()
	name := "m"
	if len(model) > 0 {
		name = model[0]
	}
	s := sim.New(sim.Config{Model: name, OutputTokens: 3}, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	return srv.URL
}

// twoTenants configures keys for two tenants: team-a may use "m", team-b
// also its own model "tenant-b-model" on the backend at bURL.
func twoTenants(bURL string) func(c *config.Config) {
	return func(c *config.Config) {
		c.Models = append(c.Models, config.ModelConfig{Name: "tenant-b-model", Backends: []config.BackendConfig{{URL: bURL}}})
		c.Auth = &config.AuthConfig{Keys: []config.KeyConfig{
			{Name: "team-a", SHA256: digestOf("sk-a"), Models: []string{"m"}},
			{Name: "team-b", SHA256: digestOf("sk-b"), Models: []string{"*"}},
		}}
	}
}

// serveAdmin runs the gateway's admin listener on a real socket until the
// test ends and returns its base URL.
func serveAdmin(t *testing.T, tg *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tg.ServeAdmin(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeAdmin: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func getT(t *testing.T, c *http.Client, u string, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, readBodyT(t, res)
}

// TestAdminListenSeparatesAdminPages: with admin_listen, /metrics, /debug/*
// and the status page answer on the admin listener (per-key series
// included) and 404 unknown_url on the API listener; the probes answer on
// both, /readyz with its backends' detail on the admin listener only; the
// admin listener runs no model request.
func TestAdminListenSeparatesAdminPages(t *testing.T) {
	backend, backendB := startKeyedSim(t), startKeyedSim(t, "tenant-b-model")
	tg := startGateway(t, func(c *config.Config) {
		twoTenants(backendB)(c)
		c.AdminListen = "127.0.0.1:0"
	}, backend)
	admin := serveAdmin(t, tg)
	sdkB := keyedSDK(tg, "sk-b")
	if _, err := sdkB.Chat.Completions.New(t.Context(), chatParams(2)); err != nil {
		t.Fatal(err)
	}
	host := mustHost(t, backend)

	for _, p := range adminPaths {
		code, body := getT(t, tg.client, admin+p, "")
		if code != http.StatusOK {
			t.Errorf("admin GET %s: %d %.200s, want 200", p, code, body)
		}
		code, body = getT(t, tg.client, tg.URL+p, "sk-b")
		if code != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) {
			t.Errorf("API GET %s: %d %.200s, want 404 unknown_url", p, code, body)
		}
	}
	if _, body := getT(t, tg.client, admin+"/metrics", ""); !strings.Contains(body, `maitred_key_requests_total{key="team-b"}`) {
		t.Errorf("admin /metrics lacks the keys' series:\n%.2000s", body)
	}
	if _, body := getT(t, tg.client, admin+"/debug/backends", ""); !strings.Contains(body, host) {
		t.Errorf("admin /debug/backends lacks the backend %s: %.500s", host, body)
	}
	for _, p := range []string{"/livez", "/readyz", "/health"} {
		for _, base := range []string{admin, tg.URL} {
			if code, body := getT(t, tg.client, base+p, ""); code != http.StatusOK {
				t.Errorf("GET %s%s: %d %.200s, want 200", base, p, code, body)
			}
		}
	}
	if _, body := getT(t, tg.client, admin+"/readyz", ""); !strings.Contains(body, host) || !strings.Contains(body, "tenant-b-model") {
		t.Errorf("admin /readyz lacks the detail: %s", body)
	}
	if _, body := getT(t, tg.client, tg.URL+"/readyz", ""); body != `{"status":"ready","phase":"ready"}`+"\n" {
		t.Errorf("API /readyz = %q, want the verdict alone", body)
	}
	// The admin listener is not a way around the keys.
	res, err := tg.client.Post(admin+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if body := readBodyT(t, res); res.StatusCode != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) {
		t.Errorf("admin POST /v1/chat/completions: %d %s, want 404 unknown_url", res.StatusCode, body)
	}
}

// TestAuthWithoutAdminListenHidesTenants: with auth and no admin_listen, a
// key holder finds nothing of another tenant on the API listener: not its
// key's name or usage, not its model, not the backends' URLs, on any page
// or probe, with or without its key. The admin pages are not served there
// (404 unknown_url).
func TestAuthWithoutAdminListenHidesTenants(t *testing.T) {
	backend, backendB := startKeyedSim(t), startKeyedSim(t, "tenant-b-model")
	tg := startGateway(t, twoTenants(backendB), backend)
	// team-b uses its model; team-a then looks around.
	bParams := chatParams(2)
	bParams.Model = "tenant-b-model"
	sdkB, sdkA := keyedSDK(tg, "sk-b"), keyedSDK(tg, "sk-a")
	if _, err := sdkB.Chat.Completions.New(t.Context(), bParams); err != nil {
		t.Fatal(err)
	}
	if _, err := sdkA.Chat.Completions.New(t.Context(), chatParams(2)); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{"/livez", "/readyz", "/health", "/v1/models"}, adminPaths...) {
		for _, key := range []string{"sk-a", ""} {
			code, body := getT(t, tg.client, tg.URL+p, key)
			for _, secret := range []string{"team-b", "tenant-b-model", mustHost(t, backend), mustHost(t, backendB)} {
				if strings.Contains(body, secret) {
					t.Errorf("GET %s (key %q): %d, the body names %q:\n%.1000s", p, key, code, secret, body)
				}
			}
		}
	}
	for _, p := range adminPaths {
		if code, body := getT(t, tg.client, tg.URL+p, "sk-a"); code != http.StatusNotFound || !strings.Contains(body, `"code":"unknown_url"`) {
			t.Errorf("GET %s: %d %.200s, want 404 unknown_url", p, code, body)
		}
	}
}

// TestOpenGatewayKeepsAdminPagesOnAPI: an open gateway (no auth) without
// admin_listen serves the admin pages and /readyz's detail on its one
// listener, as before admin_listen existed (the demo, existing configs).
func TestOpenGatewayKeepsAdminPagesOnAPI(t *testing.T) {
	backend := startKeyedSim(t)
	tg := startGateway(t, nil, backend)
	for _, p := range append([]string{"/readyz"}, adminPaths...) {
		if code, body := getT(t, tg.client, tg.URL+p, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %.200s, want 200", p, code, body)
		}
	}
	if _, body := getT(t, tg.client, tg.URL+"/readyz", ""); !strings.Contains(body, mustHost(t, backend)) {
		t.Errorf("/readyz lacks the backends' detail: %s", body)
	}
}

func mustHost(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}
