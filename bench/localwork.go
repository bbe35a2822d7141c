package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// localWork measures issue 26's figure for the gateway's local work: n
// concurrent POST /tokenize requests, each a whitespace-free prompt of
// size bytes ("aaaa…", one pre-token), against the built maitred binary
// (-maitred; built into a temp dir from this module when empty) serving
// the qwen3 fixture tokenizer with a 32k context, in front of `maitred
// sim` in another process. It reports the gateway process's peak resident
// memory above its idle level (VmRSS from /proc, sampled every 5 ms, and
// VmHWM), its CPU time over the requests (utime + stime from
// /proc/PID/stat) in total and per request, and each answer's status and
// time. The same is then done for POST /detokenize with 3.9 million ids.
func localWork(bin string, n, size int) error {
	tokDir, dir, bin, err := qwen3Workspace("localwork", bin)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	simAddr, gwAddr := freeAddr(), freeAddr()
	cfg := fmt.Sprintf("listen: %s\nmodels:\n  - name: qwen3\n    tokenizer: %s\n    backends:\n      - url: http://%s\n", gwAddr, tokDir, simAddr)
	cfgPath := filepath.Join(dir, "maitred.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	start := func(args ...string) (*exec.Cmd, error) {
		c := exec.Command(bin, args...)
		c.SysProcAttr = childAttr()
		c.Stdout, c.Stderr = io.Discard, io.Discard
		return c, c.Start()
	}
	simCmd, err := start("sim", "--listen", simAddr, "--model", "qwen3", "--max-model-len", "32768", "--tokenizer", tokDir)
	if err != nil {
		return err
	}
	defer func() { simCmd.Process.Kill(); simCmd.Wait() }()
	gwCmd, err := start("serve", "--config", cfgPath)
	if err != nil {
		return err
	}
	defer func() { gwCmd.Process.Kill(); gwCmd.Wait() }()
	if err := awaitStatus200("http://"+gwAddr+"/readyz", time.Minute); err != nil {
		return err
	}
	pid := gwCmd.Process.Pid
	prompt := `{"model":"qwen3","prompt":"` + strings.Repeat("a", size) + `"}`
	ids := `{"model":"qwen3","tokens":[` + strings.TrimSuffix(strings.Repeat("1,", 3_900_000), ",") + `]}`
	fmt.Printf("localwork: maitred serve (pid %d) with the qwen3 tokenizer, max_model_len 32768, in front of maitred sim\n", pid)
	for _, c := range []struct{ path, body string }{{"/tokenize", prompt}, {"/detokenize", ids}} {
		if err := localRound(pid, "http://"+gwAddr+c.path, c.body, n); err != nil {
			return err
		}
	}
	return nil
}

// localRound sends n copies of body to url at once and reports the
// gateway's memory and CPU over them.
func localRound(pid int, url, body string, n int) error {
	base, _ := procStatus(pid, "VmRSS:")
	cpu0, err := procCPU(pid)
	if err != nil {
		return err
	}
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if r, err := procStatus(pid, "VmRSS:"); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	type answer struct {
		status int
		took   time.Duration
		head   string
		err    error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			res, err := http.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			answers[i] = answer{status: res.StatusCode, took: time.Since(t0), head: string(b[:min(len(b), 110)])}
		})
	}
	wg.Wait()
	cpu1, err := procCPU(pid)
	close(stop)
	<-sampled
	if err != nil {
		return err
	}
	hwm, _ := procStatus(pid, "VmHWM:")
	fmt.Printf("\n%s: %d concurrent requests of %.1f MB\n", url[strings.LastIndex(url, "/"):], n, float64(len(body))/1e6)
	for i, a := range answers {
		if a.err != nil {
			fmt.Printf("  #%d: %v\n", i, a.err)
			continue
		}
		fmt.Printf("  #%d: %d in %s: %s\n", i, a.status, a.took.Round(time.Millisecond), a.head)
	}
	cpu := cpu1 - cpu0
	fmt.Printf("  RSS idle %.0f MiB, peak %.0f MiB (VmHWM %.0f MiB): growth %.0f MiB\n", mib(base), mib(peak), mib(hwm), mib(peak-base))
	fmt.Printf("  CPU %s in total, %s per request\n", cpu.Round(time.Millisecond), (cpu / time.Duration(n)).Round(time.Millisecond))
	return nil
}

// procStatus reads one field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte(field)); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// procCPU is the process's user and system CPU time, from /proc/PID/stat
// (clock ticks of 1/100 s, Linux's USER_HZ).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
