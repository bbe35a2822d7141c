// Package redistest runs a test's own redis-server (Debian's package, Redis
// 7; Valkey's valkey-server is taken when redis-server is absent) on a free
// port, never a shared instance. A test that needs one calls Start: without
// the binary the test is skipped with a message saying how to install it,
// unless MAITRED_REQUIRE_REDIS=1 (as .ci/run sets) makes that a failure.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test. It is stopped when
// the test ends.
type Server struct {
	// Addr is host:port.
	Addr string
	bin  string
	dir  string
	t    testing.TB

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Binary returns the path of redis-server (or valkey-server), or a message
// saying it is missing and how to install it.
func Binary() (string, error) {
	for _, name := range []string{"redis-server", "valkey-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("redis-server is not installed: apt-get install redis-server (Debian's package, Redis 7) to run the tests of the shared store")
}

// Require skips t when redis-server is missing, or fails it when
// MAITRED_REQUIRE_REDIS=1; it returns the binary's path.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("MAITRED_REQUIRE_REDIS") == "1" {
			t.Fatalf("MAITRED_REQUIRE_REDIS=1: %v", err)
		}
		t.Skip(err.Error())
	}
	return bin
}

// Start runs a redis-server on a free port, with no persistence, and
// returns once it accepts connections.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Require(t)
	s := &Server{bin: bin, dir: t.TempDir(), t: t}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the store URL for maitred's config: redis://host:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(s.bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", "", "--daemonize", "no", "--protected-mode", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
	// redis-server logs this line once it accepts connections: wait for
	// it rather than polling the port.
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		var log strings.Builder
		said := false
		for sc.Scan() {
			line := sc.Text()
			if !said {
				log.WriteString(line + "\n")
				if strings.Contains(line, "Ready to accept connections") {
					said = true
					ready <- nil
				}
			}
		}
		io.Copy(io.Discard, out)
		if !said {
			ready <- fmt.Errorf("redis-server exited before it was ready:\n%s", log.String())
		}
		cmd.Wait()
		close(done)
	}()
	select {
	case err := <-ready:
		if err != nil {
			<-done
			s.t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		s.t.Fatal("redis-server did not say it was ready within 30s")
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
}

// Stop kills the server (as a crash would: SIGKILL) and waits for it to
// exit. Its data is gone: nothing is persisted.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// Freeze stops the server as SIGSTOP does: connections stay open and are
// accepted, nothing is answered, until Thaw (SIGCONT).
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT); what was sent meanwhile is
// answered then.
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redis-server %v: %v", sig, err)
	}
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Do sends one command (inline protocol) and returns the raw first line of
// the answer, for tests that inspect the server without a client library.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
