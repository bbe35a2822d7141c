package replicas

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/maitred-dev/maitred/sim"
)

// binary is the maitred binary built by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "maitred-replicas")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "maitred")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/maitred")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build ./cmd/maitred:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		defer func() {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}()
		code = m.Run()
	}()
	os.Exit(code)
}

// backend is a simulated vLLM server in this process.
type backend struct {
	sim  *sim.Server
	srv  *httptest.Server
	addr string // host:port when srv is nil (backendsOnOnePort)
}

func startBackend(t *testing.T, c sim.Config) *backend {
	t.Helper()
	if c.Model == "" {
		c.Model = "m"
	}
	s := sim.New(c, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Close()
		srv.Close()
	})
	return &backend{sim: s, srv: srv}
}

// fleetConfig is the replicas' config: one model "m" on the backends, each
// with max_in_flight maxIn; store is the store URL ("" for none); extra is
// more top-level YAML.
func fleetConfig(backends []*backend, maxIn int, store, extra string) string {
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\ndrain_delay: 0s\ndrain_timeout: 2s\nscrape_interval: 100ms\n")
	b.WriteString("health: {interval: 200ms, timeout: 2s}\n")
	if store != "" {
		b.WriteString("store: " + store + "\n")
	}
	b.WriteString(extra)
	b.WriteString("models:\n  - name: m\n    queue_size: 2000\n    queue_timeout: 60s\n    backends:\n")
	for _, be := range backends {
		fmt.Fprintf(&b, "      - url: %s\n        max_in_flight: %d\n", be.srv.URL, maxIn)
	}
	return b.String()
}

// replica is one maitred process.
type replica struct {
	name string
	url  string
	path string // its config file
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its log is read

	mu   sync.Mutex
	logs []string // lines about the store
}

// startReplica runs `maitred serve` with cfg and returns once it is ready.
func startReplica(t *testing.T, name, cfg string) *replica {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "serve", "--config", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, path: path, cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			json.Unmarshal(sc.Bytes(), &line)
			if line.Msg == "listening" {
				addr <- line.Addr
			}
			if strings.Contains(line.Msg, "store") || strings.Contains(line.Msg, "replicas") {
				r.mu.Lock()
				r.logs = append(r.logs, sc.Text())
				r.mu.Unlock()
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() { r.stop() })
	select {
	case a := <-addr:
		r.url = "http://" + a
	case <-r.done:
		t.Fatalf("replica %s exited before listening", name)
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s did not listen within 60s", name)
	}
	// Readiness has no event to wait on from outside: ask /readyz.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(r.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not ready within 60s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the replica with SIGTERM (a drain) and waits for it.
func (r *replica) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
}

// kill ends the replica as a crash does: SIGKILL, nothing released.
func (r *replica) kill() {
	r.cmd.Process.Kill()
	<-r.done
}

// storeLog returns the replica's log lines about the store.
func (r *replica) storeLog() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.logs, "\n")
}

// metric reads one unlabelled sample from the replica's /metrics.
func (r *replica) metric(t *testing.T, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// awaitMetric polls the replica's metric until want holds (no event to
// wait on from outside the process; the deadline is generous).
func (r *replica) awaitMetric(t *testing.T, name string, want func(float64) bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if v, ok := r.metric(t, name); ok && want(v) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			v, _ := r.metric(t, name)
			t.Fatalf("replica %s: %s = %v after %s", r.name, name, v, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":%d}`

// result is one request's outcome.
type result struct {
	replica string
	status  int
	err     error
	body    string
}

// chat sends one chat completion through r.
func chat(ctx context.Context, r *replica, maxTokens int) result {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(chatBody, maxTokens)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return result{replica: r.name, err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{replica: r.name, status: resp.StatusCode, err: err, body: string(b)}
}

// load runs clients concurrent clients, spread round-robin over the
// replicas, each sending requests until stop is closed (or n requests
// each, when n > 0); it returns every result.
func load(replicas []*replica, clients, n, maxTokens int, stop <-chan struct{}) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for c := range clients {
		r := replicas[c%len(replicas)]
		wg.Go(func() {
			for i := 0; n == 0 || i < n; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res := chat(context.Background(), r, maxTokens)
				mu.Lock()
				out = append(out, res)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// failures lists the results that are not 200.
func failures(rs []result) []string {
	var out []string
	for _, r := range rs {
		if r.err != nil || r.status != http.StatusOK {
			msg := fmt.Sprintf("%s: %d %v %.200s", r.replica, r.status, r.err, r.body)
			out = append(out, msg)
		}
	}
	return out
}
