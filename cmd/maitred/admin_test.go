package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestServeAdminListen runs the gateway as `maitred serve` does with
// admin_listen: /metrics and /debug/backends answer on the admin port and
// 404 on the API port; the probes answer on both; the admin port closes
// when the gateway stops.
func TestServeAdminListen(t *testing.T) {
	backend := sim.New(sim.Config{Model: "m", OutputTokens: 2}, nil)
	bsrv := httptest.NewServer(backend.Handler())
	defer bsrv.Close()
	defer backend.Close()
	cfg := config.Default()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DrainDelay = 0
	cfg.Models = []config.ModelConfig{{Name: "m", Backends: []config.BackendConfig{{URL: bsrv.URL}}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	api, admin := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, cfg, zap.NewNop(), runOptions{
			started:      func(a net.Addr) { api <- a },
			adminStarted: func(a net.Addr) { admin <- a },
		})
	}()
	var apiURL, adminURL string
	for apiURL == "" || adminURL == "" {
		select {
		case a := <-api:
			apiURL = "http://" + a.String()
		case a := <-admin:
			adminURL = "http://" + a.String()
		case err := <-done:
			cancel()
			t.Fatalf("gateway did not start: %v", err)
		}
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	get := func(u string) int {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, p := range []string{"/metrics", "/debug/backends"} {
		if got := get(adminURL + p); got != http.StatusOK {
			t.Errorf("admin port %s: %d, want 200", p, got)
		}
		if got := get(apiURL + p); got != http.StatusNotFound {
			t.Errorf("API port %s: %d, want 404", p, got)
		}
	}
	for _, p := range []string{"/livez", "/readyz"} {
		for _, base := range []string{apiURL, adminURL} {
			if got := get(base + p); got != http.StatusOK {
				t.Errorf("%s%s: %d, want 200", base, p, got)
			}
		}
	}
	tr.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if conn, err := net.Dial("tcp", adminURL[len("http://"):]); err == nil {
		conn.Close()
		t.Errorf("the admin port still accepts connections after the gateway stopped")
	}
}
