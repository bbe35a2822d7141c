package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/internal/dnstest"
	"github.com/maitred-dev/maitred/sim"
)

// simBackend is a simulated vLLM server with the test's own accounting of
// what it saw, in one sequence: when its warm-up generation completed and
// when each client request arrived.
type simBackend struct {
	sim  *sim.Server
	addr string // host:port

	mu sync.Mutex
	// warmedAt is the sequence number at which the first warm-up
	// generation completed (0: not yet); clientSeq are the client
	// requests' arrivals.
	warmedAt  int64
	clientSeq []int64
}

var seq atomic.Int64 // one clock for every simBackend of a test binary

func (s *simBackend) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probe := r.Header.Get(fleet.ProbeHeader)
		if probe == "" && r.Method == http.MethodPost {
			s.mu.Lock()
			s.clientSeq = append(s.clientSeq, seq.Add(1))
			s.mu.Unlock()
		}
		next.ServeHTTP(w, r)
		if probe == "v1/completions" {
			s.mu.Lock()
			if s.warmedAt == 0 {
				s.warmedAt = seq.Add(1)
			}
			s.mu.Unlock()
		}
	})
}

// clients is how many client requests s has received.
func (s *simBackend) clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clientSeq)
}

// beforeWarm counts client requests that arrived before s's warm-up
// generation had completed.
func (s *simBackend) beforeWarm() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.clientSeq {
		if s.warmedAt == 0 || c < s.warmedAt {
			n++
		}
	}
	return n
}

// simsOnOnePort serves n simulators on 127.0.0.2, .3, ... at one port, as
// the pods behind a headless Service listen: the DNS answer carries the
// addresses, the config the port.
func simsOnOnePort(t *testing.T, n int, cfg sim.Config) (string, []*simBackend) {
	t.Helper()
	port, lns := dnstest.ListenOnOnePort(t, n)
	var out []*simBackend
	for _, ln := range lns {
		sb := &simBackend{sim: sim.New(cfg, nil), addr: ln.Addr().String()}
		srv := &http.Server{Handler: sb.handler(sb.sim.Handler())}
		go srv.Serve(ln)
		t.Cleanup(func() { sb.sim.Close(); srv.Close() })
		out = append(out, sb)
	}
	return port, out
}

// debugBackend is one record of GET /debug/backends.
type debugBackend struct {
	Model    string      `json:"model"`
	URL      string      `json:"url"`
	Source   string      `json:"source"`
	Draining bool        `json:"draining"`
	State    fleet.State `json:"state"`
	// MaxInFlight is the backend's config entry's max_in_flight.
	MaxInFlight int `json:"max_in_flight"`
}

func debugBackends(c *http.Client, base string) ([]debugBackend, error) {
	res, err := c.Get(base + "/debug/backends")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out []debugBackend
	return out, json.NewDecoder(res.Body).Decode(&out)
}

// awaitDebug polls /debug/backends until ok holds (a generous deadline
// ends a failing test) and returns what it read then.
func awaitDebug(t *testing.T, c *http.Client, base string, what string, ok func([]debugBackend) bool) []debugBackend {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		bs, err := debugBackends(c, base)
		if err == nil && ok(bs) {
			return bs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /debug/backends %+v (%v)", what, bs, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyOnly reports whether bs is exactly the ready, not draining,
// backends at addrs (host:port).
func readyOnly(bs []debugBackend, addrs ...string) bool {
	if len(bs) != len(addrs) {
		return false
	}
	for _, b := range bs {
		found := false
		for _, a := range addrs {
			found = found || b.URL == "http://"+a
		}
		if !found || b.State != fleet.Ready || b.Draining {
			return false
		}
	}
	return true
}

// streamLoad keeps n streams open through the gateway at base until
// stopped, and counts how each ended.
type streamLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failures   []string
	stop       context.CancelFunc
	wg         sync.WaitGroup
}

func startStreams(base string, c *http.Client, n int, body string, hdr ...string) *streamLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &streamLoad{stop: cancel}
	for range n {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				if err := oneStream(c, base, body, hdr...); err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.failures) < 10 {
						l.failures = append(l.failures, err.Error())
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		})
	}
	return l
}

// end stops the load after the streams open now have ended.
func (l *streamLoad) end() {
	l.stop()
	l.wg.Wait()
}

func (l *streamLoad) errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}

// oneStream sends one streaming completion and reads it to its end: an
// error unless it is a 200 whose stream ends with data: [DONE] and holds
// no error event.
func oneStream(c *http.Client, base, body string, hdr ...string) error {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	sc := bufio.NewScanner(res.Body)
	last := ""
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"error"`) {
			return fmt.Errorf("error event: %s", line)
		}
		if line != "" {
			last = line
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if last != "data: [DONE]" {
		return errors.New("stream cut: last line " + last)
	}
	return nil
}
