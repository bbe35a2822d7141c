package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/sim"
)

// startSim serves a simulator with the test's accounting (simBackend).
func startSim(t *testing.T, cfg sim.Config) *simBackend {
	t.Helper()
	sb := &simBackend{sim: sim.New(cfg, nil)}
	srv := httptest.NewServer(sb.handler(sb.sim.Handler()))
	sb.addr = strings.TrimPrefix(srv.URL, "http://")
	t.Cleanup(func() { sb.sim.Close(); srv.Close() })
	return sb
}

// reloadConfig is the test's config file: one model, its backends, one
// limit and the API keys (name and key).
func reloadConfig(backends []string, maxInFlightA int, keys ...string) string {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\ndrain_delay: 0s\ndrain_timeout: 30s\nhealth: {interval: 20ms}\nscrape_interval: 50ms\nmodels:\n  - name: m\n    queue_size: 1024\n    backends:\n")
	for i, u := range backends {
		fmt.Fprintf(&b, "      - url: http://%s\n", u)
		if i == 0 {
			fmt.Fprintf(&b, "        max_in_flight: %d\n", maxInFlightA)
		}
	}
	b.WriteString("auth:\n  keys:\n")
	for i := 0; i+1 < len(keys); i += 2 {
		fmt.Fprintf(&b, "    - name: %s\n      sha256: %x\n      models: [\"*\"]\n", keys[i], sha256.Sum256([]byte(keys[i+1])))
	}
	return b.String()
}

// writeFile replaces path's content at once (a rename over it), as a
// config management tool does.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReloadOnSIGHUPUnderLoad: with 200 streams open, the config file gains
// a backend, a key, and a changed limit, and the process gets a real
// SIGHUP: no stream is cut and no request fails, the change shows in
// /debug/backends (the time is logged), the new backend takes
// traffic only once warmed up, and the new key is accepted. Then a file
// that does not validate is refused, naming the key path, and the running
// config keeps serving.
func TestReloadOnSIGHUPUnderLoad(t *testing.T) {
	// Long streams, few events (6 s each, longer than 200 clients take to
	// connect on a loaded machine): 200 of them are open at once.
	simCfg := sim.Config{Model: "m", OutputTokens: 40, ITL: 150 * time.Millisecond}
	a, b, c := startSim(t, simCfg), startSim(t, simCfg), startSim(t, simCfg)
	dir := t.TempDir()
	path := filepath.Join(dir, "maitred.yaml")
	writeFile(t, path, reloadConfig([]string{a.addr, b.addr}, 0, "team-a", "key-a"))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	started, adminStarted := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, cfg, zap.New(core), runOptions{configPath: path, started: func(a net.Addr) { started <- a }, adminStarted: func(a net.Addr) { adminStarted <- a }})
	}()
	base := "http://" + (<-started).String()
	admin := "http://" + (<-adminStarted).String() // /debug/* and /metrics: the config has auth
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	awaitDebug(t, cl, admin, "2 backends ready", func(bs []debugBackend) bool { return readyOnly(bs, a.addr, b.addr) })
	const body = `{"model":"m","prompt":"hi","stream":true,"max_tokens":40}`
	if err := oneStream(cl, base, body, "Authorization", "Bearer key-b"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a key not yet configured: %v", err)
	}

	load := startStreams(base, cl, 200, body, "Authorization", "Bearer key-a")
	defer load.end()
	awaitCond(t, "200 streams open", func() bool {
		sa, sb := a.sim.Stats(), b.sim.Stats()
		return sa.Running+sa.Waiting+sb.Running+sb.Waiting >= 200
	})

	writeFile(t, path, reloadConfig([]string{a.addr, b.addr, c.addr}, 1000, "team-a", "key-a", "team-b", "key-b"))
	sent := time.Now()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	awaitDebug(t, cl, admin, "the reload in /debug/backends", func(bs []debugBackend) bool {
		return len(bs) == 3 && bs[0].MaxInFlight == 1000 && bs[2].URL == "http://"+c.addr && bs[2].Source == "static"
	})
	visible := time.Since(sent)
	// Logged, not asserted (no timing assertions): the target is 1 s.
	t.Logf("the reload was visible in /debug/backends %s after SIGHUP", visible.Round(time.Millisecond))
	if err := oneStream(cl, base, body, "Authorization", "Bearer key-b"); err != nil {
		t.Fatalf("the key added by the reload: %v", err)
	}
	awaitCond(t, "the new backend takes traffic", func() bool { return c.clients() >= 20 })

	// A file that does not validate: refused, named by its key path.
	writeFile(t, path, strings.Replace(reloadConfig([]string{a.addr}, 0, "team-a", "key-a"), "queue_size", "queue_sizee", 1))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	awaitCond(t, "the broken file refused", func() bool {
		// The file watcher may see the change first: SIGHUP loads it again.
		return scrapeCounter(t, cl, admin, `maitred_config_reloads_total{result="failure"}`) >= 1
	})
	refused := logs.FilterMessage("config reload refused; the running config keeps serving").All()
	if len(refused) == 0 || !strings.Contains(fmt.Sprint(refused[0].ContextMap()["error"]), "models[0].queue_sizee (line 9): unknown key") {
		t.Fatalf("refusal logged as %+v", refused)
	}
	if bs, err := debugBackends(cl, admin); err != nil || len(bs) != 3 {
		t.Fatalf("after the refused file: %+v %v", bs, err)
	}
	if err := oneStream(cl, base, body, "Authorization", "Bearer key-b"); err != nil {
		t.Fatalf("the running config after a refused file: %v", err)
	}
	load.end()

	if f := load.failed.Load(); f != 0 {
		t.Errorf("%d of %d streams failed: %v", f, f+load.ok.Load(), load.errors())
	}
	for name, s := range map[string]*simBackend{"a": a, "b": b, "c": c} {
		if st := s.sim.Stats(); st.Aborted != 0 || st.Failed != 0 {
			t.Errorf("backend %s: %d streams aborted, %d failed", name, st.Aborted, st.Failed)
		}
	}
	if n := c.beforeWarm(); n != 0 {
		t.Errorf("the added backend got %d requests before its warm-up completed", n)
	}
	if n := scrapeCounter(t, cl, admin, `maitred_config_reloads_total{result="success"}`); n < 1 {
		t.Errorf("%v successful reloads", n)
	}
	t.Logf("%d streams, none cut or failed", load.ok.Load())
}

// TestConfigFileChangeReloads: a Kubernetes ConfigMap update (the folder
// symlink swapped to a new one) is seen without a signal.
func TestConfigFileChangeReloads(t *testing.T) {
	simCfg := sim.Config{Model: "m", OutputTokens: 2}
	a, b := startSim(t, simCfg), startSim(t, simCfg)
	dir := t.TempDir()
	v1, v2 := filepath.Join(dir, "..v1"), filepath.Join(dir, "..v2")
	os.Mkdir(v1, 0o700)
	os.Mkdir(v2, 0o700)
	os.WriteFile(filepath.Join(v1, "maitred.yaml"), []byte(reloadConfig([]string{a.addr}, 0, "team-a", "key-a")), 0o600)
	os.WriteFile(filepath.Join(v2, "maitred.yaml"), []byte(reloadConfig([]string{a.addr, b.addr}, 0, "team-a", "key-a")), 0o600)
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "maitred.yaml")
	os.Symlink(filepath.Join("..data", "maitred.yaml"), path)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, adminStarted := make(chan net.Addr, 1), make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, cfg, zap.NewNop(), runOptions{configPath: path, started: func(a net.Addr) { started <- a }, adminStarted: func(a net.Addr) { adminStarted <- a }})
	}()
	<-started
	admin := "http://" + (<-adminStarted).String() // /debug/*: the config has auth
	defer func() { cancel(); <-done }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	awaitDebug(t, cl, admin, "1 backend", func(bs []debugBackend) bool { return readyOnly(bs, a.addr) })
	// The swap: a new symlink renamed over ..data.
	os.Symlink("..v2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	awaitDebug(t, cl, admin, "the swapped file in force", func(bs []debugBackend) bool {
		return len(bs) == 2 && bs[1].URL == "http://"+b.addr && bs[1].State == fleet.Ready
	})
}
