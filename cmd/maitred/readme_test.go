package main

// The README's "Run it" commands, run as pasted: a newcomer's first hour
// must not start with a command that fails.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeRunIt returns the command lines of the sh code blocks of the
// README's "Run it" section, comments removed.
func readmeRunIt(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, "\n## Run it\n"), strings.Index(s, "\n## What it does\n")
	if i < 0 || j < i {
		t.Fatal("README.md lacks its Run it section")
	}
	var lines []string
	in := false
	for line := range strings.SplitSeq(s[i:j], "\n") {
		switch {
		case line == "```sh":
			in = true
		case line == "```":
			in = false
		case in:
			if line = stripComment(line); line != "" {
				lines = append(lines, line)
			}
		}
	}
	return lines
}

// stripComment removes a shell comment: a # after a space, outside quotes.
func stripComment(line string) string {
	quoted := false
	for i, c := range line {
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '#' && !quoted && (i == 0 || line[i-1] == ' '):
			return strings.TrimSpace(line[:i])
		}
	}
	return strings.TrimSpace(line)
}

// shellWords splits a line as sh does for what the README uses: words
// separated by spaces, single quotes kept together without the quotes.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	quoted, inWord := false, false
	for _, c := range line {
		switch {
		case c == '\'':
			quoted, inWord = !quoted, true
		case c == ' ' && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// TestREADMECommands runs every command of the README's "Run it" section
// as a fresh clone's shell would, in order: the maitred commands in this
// process with the exact arguments (from the repository root, on the
// README's own ports), curl as the HTTP request it names, `kill %1 %2` as
// stopping the background jobs, make as a dry run of the target (the
// targets run the whole suite and download fixtures), and `go run ./bench`
// as the built benchmark's -h, checking every flag and scenario the line
// names exists (a run takes minutes). `go run ./cmd/maitred demo` is
// TestDemoServesPrintedCommands (it would take the gateway's port 8080).
func TestREADMECommands(t *testing.T) {
	t.Chdir("../..")
	lines := readmeRunIt(t)
	if len(lines) < 10 {
		t.Fatalf("the README's Run it section has %d commands: %q", len(lines), lines)
	}
	for _, addr := range []string{"127.0.0.1:8000", "127.0.0.1:8080"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the README's commands use %s, which is taken on this machine: %v", addr, err)
		}
		ln.Close()
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	type job struct {
		line   string
		cancel context.CancelFunc
		done   chan int
		stderr *syncBuffer
	}
	var jobs []*job
	stopJobs := func() {
		for _, j := range jobs {
			j.cancel()
			if code := <-j.done; code != 0 {
				t.Errorf("%s: exit %d after it was stopped: %s", j.line, code, j.stderr.String())
			}
		}
		jobs = nil
		tr.CloseIdleConnections()
	}
	defer stopJobs()
	var benchHelp string
	for _, line := range lines {
		t.Logf("$ %s", line)
		stdin := ""
		if pre, post, ok := strings.Cut(line, " | "); ok {
			w := shellWords(pre)
			if len(w) != 2 || w[0] != "echo" {
				t.Errorf("%s: only echo 'TEXT' | command is understood", line)
				continue
			}
			stdin, line = w[1]+"\n", post
		}
		background := strings.HasSuffix(line, " &")
		words := shellWords(strings.TrimSuffix(line, " &"))
		switch {
		case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/maitred":
			args := words[3:]
			if len(args) > 0 && args[0] == "demo" {
				continue // TestDemoServesPrintedCommands
			}
			if background {
				ctx, cancel := context.WithCancel(context.Background())
				j := &job{line: line, cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
				go func() { j.done <- runIn(ctx, args, strings.NewReader(stdin), io.Discard, j.stderr) }()
				jobs = append(jobs, j)
				// As a shell's next line would, the README waits for
				// the server itself (curl --retry); here a job that
				// ends at once is a failure.
				select {
				case code := <-j.done:
					jobs = jobs[:len(jobs)-1]
					t.Fatalf("%s: exited %d at once: %s", line, code, j.stderr.String())
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			code := runIn(ctx, args, strings.NewReader(stdin), &out, &errb)
			cancel()
			if code != 0 || out.Len() == 0 {
				t.Errorf("%s: exit %d, printed %q; stderr %s", line, code, out.String(), errb.String())
			}
		case words[0] == "curl":
			readmeCurl(t, client, line, words[1:])
		case len(words) == 3 && words[0] == "kill" && words[1] == "%1" && words[2] == "%2":
			if len(jobs) != 2 {
				t.Errorf("%s: %d background jobs, want 2", line, len(jobs))
			}
			stopJobs()
		case words[0] == "make" && len(words) == 2:
			if out, err := exec.Command("make", "-n", words[1]).CombinedOutput(); err != nil {
				t.Errorf("%s: make -n %s: %v %s", line, words[1], err, out)
			}
		case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./bench":
			if testing.Short() {
				continue
			}
			if benchHelp == "" {
				benchHelp = buildBenchHelp(t)
			}
			checkBenchLine(t, line, words[3:], benchHelp)
		default:
			t.Errorf("README command %q: this test does not know how to run it; teach it, or the README drifts", line)
		}
	}
	if len(jobs) != 0 {
		t.Errorf("background jobs left running at the end of the README's commands: %d", len(jobs))
	}
}

// readmeCurl does what the README's curl line does: with --retry, GET
// the URL until it answers 200 (curl retries 503 and refused connections);
// with -d, POST the body and expect 200.
func readmeCurl(t *testing.T, c *http.Client, line string, args []string) {
	t.Helper()
	var url, body string
	retry := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-d":
			i++
			body = args[i]
		case a == "-H", a == "--retry", a == "--retry-delay":
			i++
			retry = retry || a == "--retry"
		case strings.HasPrefix(a, "http://"):
			url = a
		}
	}
	if url == "" {
		t.Errorf("%s: no URL", line)
		return
	}
	if retry {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			res, err := c.Get(url)
			if err == nil {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: still %d %s", line, res.StatusCode, b)
				}
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: %v", line, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var res *http.Response
	var err error
	if body != "" {
		res, err = c.Post(url, "application/json", strings.NewReader(body))
	} else {
		res, err = c.Get(url)
	}
	if err != nil {
		t.Errorf("%s: %v", line, err)
		return
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("%s: %d %s", line, res.StatusCode, b)
	}
}

// buildBenchHelp builds ./bench and returns what -h prints.
func buildBenchHelp(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bench")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench").CombinedOutput(); err != nil {
		t.Fatalf("go build ./bench: %v %s", err, out)
	}
	out, err := exec.Command(bin, "-h").CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("bench -h: %v", err)
	}
	return string(out)
}

// checkBenchLine checks that every flag a README bench line passes is one
// bench defines, and that a -scenario value is one its help names.
func checkBenchLine(t *testing.T, line string, args []string, help string) {
	t.Helper()
	flags := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(help, -1)
	var names []string
	for _, f := range flags {
		names = append(names, f[1])
	}
	for i := 0; i < len(args); i++ {
		name := strings.TrimLeft(args[i], "-")
		if !slices.Contains(names, name) {
			t.Errorf("%s: bench has no flag -%s (it has %v)", line, name, names)
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++ // the flag's value
			if name == "scenario" && !regexp.MustCompile(`\b`+regexp.QuoteMeta(args[i])+`:`).MatchString(help) {
				t.Errorf("%s: bench's -scenario help names no %q", line, args[i])
			}
		}
	}
}
