package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
)

// The separate-process harness: maitred as the built binary (go build
// ./cmd/maitred) in its own process, its JSON log written to a file as in
// production; the simulator as `maitred sim` in another; the bare
// httputil.ReverseProxy as this program re-run with -scenario bare-proxy;
// the load generator in this process.

// pprofOverlay is a file added to cmd/maitred by `go build -overlay` when
// -pprof is set: with MAITRED_BENCH_PPROF=ADDR the built binary serves
// net/http/pprof on ADDR. Nothing in the repository's own build has it.
const pprofOverlay = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if a := os.Getenv("MAITRED_BENCH_PPROF"); a != "" {
		go http.ListenAndServe(a, nil)
	}
}
`

// qwen3Workspace is what a scenario on the qwen3 fixture starts from:
// the fixture's folder, a temporary dir (the caller removes it) and the
// maitred binary: bin, or one built into dir when bin is "".
func qwen3Workspace(scenario, bin string) (tokDir, dir, maitred string, err error) {
	root := fixtures.Root()
	if root == "" {
		return "", "", "", fmt.Errorf("%s: run from the repository (the qwen3 fixture is read from .fixtures)", scenario)
	}
	tokDir = filepath.Join(root, ".fixtures", "models", "qwen3")
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		return "", "", "", fmt.Errorf("%s: the qwen3 fixture is missing (make fixtures): %w", scenario, err)
	}
	if dir, err = os.MkdirTemp("", "maitred-"+scenario+"-"); err != nil {
		return "", "", "", err
	}
	if maitred = bin; maitred == "" {
		if maitred, err = buildMaitred(dir, false); err != nil {
			os.RemoveAll(dir)
			return "", "", "", fmt.Errorf("%s: %w", scenario, err)
		}
	}
	return tokDir, dir, maitred, nil
}

// buildMaitred builds ./cmd/maitred into dir and returns the binary's path.
// withPprof adds pprofOverlay.
func buildMaitred(dir string, withPprof bool) (string, error) {
	root := fixtures.Root()
	if root == "" {
		return "", fmt.Errorf("run from the repository: the maitred binary is built from ./cmd/maitred")
	}
	return buildMaitredFrom(root, dir, withPprof)
}

// buildMaitredFrom is buildMaitred from the source tree at root.
func buildMaitredFrom(root, dir string, withPprof bool) (string, error) {
	bin := filepath.Join(dir, "maitred")
	args := []string{"build", "-o", bin}
	if withPprof {
		src := filepath.Join(dir, "zz_benchpprof.go")
		if err := os.WriteFile(src, []byte(pprofOverlay), 0o644); err != nil {
			return "", err
		}
		ov, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, "cmd", "maitred", "zz_benchpprof.go"): src}})
		ovPath := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
			return "", err
		}
		args = append(args, "-overlay", ovPath)
	}
	build := exec.Command("go", append(args, "./cmd/maitred")...)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/maitred: %w", err)
	}
	return bin, nil
}

// proc is a child process this program started; stop kills it.
type proc struct {
	cmd  *exec.Cmd
	url  string
	log  string // the file its stderr goes to ("" for none)
	pid  int
	done chan struct{}
}

// startProc runs bin with args, its stdout and stderr appended to logPath
// ("" discards them), in its own process group, killed if this one dies.
func startProc(logPath string, env []string, bin string, args ...string) (*proc, error) {
	c := exec.Command(bin, args...)
	c.SysProcAttr = childAttr()
	c.Env = append(os.Environ(), env...)
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child holds its own descriptor
		c.Stdout, c.Stderr = f, f
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: c, log: logPath, pid: c.Process.Pid, done: make(chan struct{})}
	go func() { c.Wait(); close(p.done) }()
	return p, nil
}

// stop ends the process (SIGTERM, then SIGKILL after 5 s) and waits.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// awaitHTTP polls url until it answers 200, the process ends, or a minute
// passes.
func (p *proc) awaitHTTP(url string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (log: %s)", filepath.Base(p.cmd.Path), p.tail())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute (%s)", filepath.Base(p.cmd.Path), url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitStatus200 polls url every 5 ms until it answers 200, for at most
// limit: the readiness wait of a process started without proc (its start
// time measured to the poll).
func awaitStatus200(url string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200 within %s", url, limit)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// tail is the last lines of the process's log.
func (p *proc) tail() string {
	if p.log == "" {
		return "(discarded)"
	}
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// problems is the last warnings and errors of a maitred's JSON log
// (its access lines are at info), or "(none)".
func (p *proc) problems() string {
	if p.log == "" {
		return "(discarded)"
	}
	b, _ := os.ReadFile(p.log)
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out[max(0, len(out)-5):], "\n")
}

// simArgs are `maitred sim`'s flags for a backend that answers at once:
// no time to first token or between tokens, out tokens each, counting
// with the tokenizer folder tokDir ("": its approximate counter).
func simArgs(addr, model, tokDir string, maxModelLen, out int) []string {
	a := []string{"sim", "--listen", addr, "--model", model, "--max-model-len", strconv.Itoa(maxModelLen),
		"--ttft", "0s", "--itl", "0s", "--output-tokens", strconv.Itoa(out), "--max-num-seqs", "1000000",
		"--kv-tokens", "1073741824", "--log-level", "warn"}
	if tokDir != "" {
		a = append(a, "--tokenizer", tokDir)
	}
	return a
}

// startMaitred writes cfg (YAML; its listen is set here) into dir and
// runs `maitred serve` on it, its JSON log (info, as in production) to
// dir/maitred.log, until it is ready. pprofAddr, when not "", is where a
// binary built with -pprof serves net/http/pprof.
func startMaitred(bin, dir, cfg, pprofAddr string) (*proc, error) {
	addr := freeAddr()
	path := filepath.Join(dir, "maitred.yaml")
	if err := os.WriteFile(path, []byte("listen: "+addr+"\n"+cfg), 0o644); err != nil {
		return nil, err
	}
	var env []string
	if pprofAddr != "" {
		env = append(env, "MAITRED_BENCH_PPROF="+pprofAddr)
	}
	return startServing(filepath.Join(dir, "maitred.log"), env, addr, "/readyz", bin, "serve", "--config", path)
}

// startServing runs bin with args (startProc) and awaits its answer 200 to
// probe on addr; it stops the process when that fails. The proc's url is
// http://addr.
func startServing(logPath string, env []string, addr, probe, bin string, args ...string) (*proc, error) {
	p, err := startProc(logPath, env, bin, args...)
	if err != nil {
		return nil, err
	}
	p.url = "http://" + addr
	if err := p.awaitHTTP(p.url + probe); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startSim runs `maitred sim` with args (simArgs) until it answers /health.
func startSim(bin, addr string, args []string) (*proc, error) {
	return startServing("", nil, addr, "/health", bin, args...)
}

// startBareProxy runs this program again as the bare proxy (-scenario
// bare-proxy) in front of target, in its own process; with h2c it
// serves HTTP/2 cleartext beside HTTP/1.1.
func startBareProxy(target string, h2c bool) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := freeAddr()
	// The proxy forwards /health to the simulator: ready once both are.
	return startServing("", nil, addr, "/health", self, "-scenario", "bare-proxy", "-bare-listen", addr, "-bare-target", target, "-bare-h2c="+strconv.FormatBool(h2c))
}

// bareProxy serves a plain httputil.ReverseProxy to target on listen
// until the process is stopped: the bare proxy of the separate-process
// harness.
func bareProxy(listen, target string) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-bare-target: want a URL, got %q", target)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     poolTransport(),
		FlushInterval: -1,
	}
	srv := &http.Server{Addr: listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	if *bareH2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	if *bareStats != "" {
		go serveMemStats(*bareStats) // the waiting dimension's floor (scale_waiting.go)
	}
	return srv.ListenAndServe()
}

// procRSS is the process's resident memory now, in bytes.
func procRSS(pid int) int64 {
	v, _ := procStatus(pid, "VmRSS:")
	return v
}

// childPID is the first child of process pid (nginx's worker under its
// master), or 0.
func childPID(pid int) int {
	p := strconv.Itoa(pid)
	b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

// scrapeMetric sums the samples of the metric name (any labels) in a
// Prometheus text exposition at url.
func scrapeMetric(url, name string) (float64, error) {
	v := []float64{0}
	err := scrapeMetrics(url, []string{name}, v)
	return v[0], err
}

// scrapeMetrics is scrapeMetric for each of names, into vals (one each),
// from one scrape: the figures of one moment, and one render of the
// exposition, not one a figure. The error is the first (a metric
// absent, or the scrape failed); the metrics found are set all the same.
func scrapeMetrics(url string, names []string, vals []float64) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	var first error
	for i, name := range names {
		v, err := sumMetric(bytes.NewReader(b), name)
		if err != nil && first == nil {
			first = fmt.Errorf("%s: %w", url, err)
		}
		vals[i] = v
	}
	return first
}

// sumMetric sums the samples of the metric name in a Prometheus text
// exposition.
func sumMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("no %s", name)
	}
	return sum, sc.Err()
}
