package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.signal_recv"), goleak.IgnoreTopFunction("os/signal.loop"))
}

func TestCommands(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"version"}, 0, "maitred ", ""},
		{[]string{"help"}, 0, "maitred serve --config FILE", ""},
		{nil, 2, "", "Usage:"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"serve"}, 2, "", "--config is required"},
		{[]string{"serve", "--help"}, 0, "", "Usage: maitred serve"},
		{[]string{"sim", "--help"}, 0, "", "-max-num-seqs"},
		{[]string{"demo", "--help"}, 0, "", "Usage: maitred demo"},
		{[]string{"serve", "--config", "../../configs/bad/unknown-key.yaml"}, 1, "", "models[0].backends[0].urll (line 5): unknown key"},
		{[]string{"serve", "--config", "nonexistent.yaml"}, 1, "", "no such file"},
		{[]string{"serve", "--config", "x", "extra"}, 2, "", "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errb.String())
			}
			if !strings.Contains(out.String(), tt.out) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.out)
			}
			if !strings.Contains(errb.String(), tt.err) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.err)
			}
		})
	}
}

// syncBuffer is written by the command's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoServesPrintedCommands runs the demo as a user would, takes the
// address from what it printed, and sends the chat requests it suggests.
func TestDemoServesPrintedCommands(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cmdDemo(ctx, []string{"--listen", "127.0.0.1:0", "--log-level", "warn"}, &out, io.Discard)
	}()
	addrRe := regexp.MustCompile(`curl -s (http://127\.0\.0\.1:\d+)/v1/chat/completions`)
	var base string
	// The demo prints its commands once it is ready (tokenizer loaded,
	// backends warm): on a loaded machine that can take many seconds.
	deadline := time.Now().Add(2 * time.Minute)
	for base == "" {
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("demo returned %v before printing its commands: %q", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo printed no curl command: %q", out.String())
		}
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for _, body := range []string{
		`{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4}`,
		`{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4,"stream":true}`,
	} {
		res, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, b)
		}
		stream := strings.Contains(body, `"stream":true`)
		if stream && (!strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Count(string(b), "data: ") < 6) {
			t.Errorf("stream answer: %s", b)
		}
		if !stream && !strings.Contains(string(b), `"chat.completion"`) {
			t.Errorf("answer: %s", b)
		}
	}
	// The printed over-long request is rejected at the door with the numbers.
	res, err := c.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":5000}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 400 || !strings.Contains(string(b), `"code":"context_length_exceeded"`) || !strings.Contains(string(b), `"prompt_tokens":10`) {
		t.Errorf("over-long request: %d %s", res.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo exited with %v", err)
	}
}

func TestServeRunsFromConfigFile(t *testing.T) {
	// A config whose only backend is down: the gateway still starts, is not
	// ready, and stops cleanly.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "maitred.yaml")
	os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\ndrain_delay: 0s\nmodels:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:1\n"), 0o600)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var errb bytes.Buffer
	if err := cmdServe(ctx, []string{"--config", cfg, "--log-level", "error"}, &errb); err != nil {
		t.Fatalf("serve: %v (%s)", err, errb.String())
	}
}

func TestTokenizeCommand(t *testing.T) {
	tests := []struct {
		dir, in, want string
	}{
		{"builtin:demo", `{"messages":[{"role":"user","content":"Hello!"}]}`, "10\n"},
		{"builtin:demo", `{"prompt":"Hello!"}`, "2\n"},
		{"../../.fixtures/models/qwen3", `{"messages":[{"role":"user","content":"Hello!"}]}`, "10\n"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if err := cmdTokenize([]string{"--model-dir", tt.dir}, strings.NewReader(tt.in), &out, &errb); err != nil {
			t.Fatalf("%s: %v %s", tt.dir, err, errb.String())
		}
		if out.String() != tt.want {
			t.Errorf("%s %s: printed %q, want %q", tt.dir, tt.in, out.String(), tt.want)
		}
	}
	var out bytes.Buffer
	err := cmdTokenize([]string{"--model-dir", "builtin:demo"}, strings.NewReader(`{"messages":[{"role":"user","content":7}]}`), &out, io.Discard)
	if err == nil {
		t.Errorf("a malformed request printed %q", out.String())
	}
}

// TestServeDrainsOnSIGTERM runs `maitred serve` in process in front of a
// simulator and sends the process a real SIGTERM: /readyz fails at once,
// requests are still served during drain_delay, and the command exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	backend := sim.New(sim.Config{Model: "m", OutputTokens: 2}, nil)
	bsrv := httptest.NewServer(backend.Handler())
	defer bsrv.Close()
	defer backend.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "maitred.yaml")
	os.WriteFile(cfg, []byte("listen: "+addr+"\ndrain_delay: 300ms\ndrain_timeout: 2s\nhealth: {interval: 50ms}\nmodels:\n  - name: m\n    backends:\n      - url: "+bsrv.URL+"\n"), 0o600)
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"serve", "--config", cfg, "--log-level", "error"}, io.Discard, io.Discard)
	}()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	readyz := func() int {
		res, err := c.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	deadline := time.Now().Add(10 * time.Second)
	for readyz() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("gateway never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	for readyz() != 503 {
		if time.Now().After(deadline) {
			t.Fatal("readyz did not fail after SIGTERM")
		}
		time.Sleep(time.Millisecond)
	}
	res, err := c.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("request during drain_delay: %v %v", err, res)
	}
	res.Body.Close()
	if got := <-code; got != 0 {
		t.Fatalf("exit code %d after SIGTERM", got)
	}
}

// TestServeStartsWithUncompilableTemplate: a model whose chat template
// maitred cannot compile (Python's jinja2 renders it, vLLM serves it) is
// not a failed start (issue 26): the gateway serves, forwards the model's
// chat requests uncounted, and /debug/backends says why.
func TestServeStartsWithUncompilableTemplate(t *testing.T) {
	tokDir, _ := filepath.Abs("../../.fixtures/models/qwen3")
	qwen3, err := tokenize.LoadDir(tokDir, tokenize.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The backend counts as vLLM would, with the real tokenizer.
	backend := sim.New(sim.Config{Model: "m", OutputTokens: 2, Tokenizer: sim.ModelTokenizer(qwen3)}, nil)
	bsrv := httptest.NewServer(backend.Handler())
	defer bsrv.Close()
	defer backend.Close()
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "chat.jinja")
	os.WriteFile(tmpl, []byte("{%- for m in messages %}\n{%- with c = m['content'] %}{{ c }}{% endwith %}\n{%- endfor %}"), 0o600)
	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\ndrain_delay: 0s\nmodels:\n  - name: m\n    tokenizer: " + tokDir +
		"\n    chat_template: " + tmpl + "\n    backends:\n      - url: " + bsrv.URL + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), runOptions{started: func(a net.Addr) { addr <- a }})
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("the gateway did not start: %v", err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `"chat.completion"`) {
		t.Fatalf("chat: %d %s", res.StatusCode, b)
	}
	res, err = c.Get(base + "/debug/backends")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `"uncounted":"chat template \"default\" did not compile: line 2: not supported: statement \"with\""`) {
		t.Errorf("/debug/backends: %s", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
