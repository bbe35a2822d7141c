package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/fleet"
)

// TestRequestIDsUpstream: two clients sending the same X-Request-Id at once
// reach the backend under two different ids (vLLM before 0.11.1 made the
// header its engine request id: "already running", or one client's
// disconnect aborting the other's request); each client gets its own id
// back exactly once, although the backend echoes its own.
func TestRequestIDsUpstream(t *testing.T) {
	var mu sync.Mutex
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	seen := map[string]int{}
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		mu.Lock()
		seen[id]++
		mu.Unlock()
		arrived <- struct{}{}
		<-release                          // both are in flight together
		w.Header().Set("X-Request-Id", id) // vLLM --enable-request-id-headers
		io.WriteString(w, `{"choices":[]}`)
	})
	tg := startGateway(t, nil, fb.URL)
	var wg sync.WaitGroup
	ids := make(chan []string, 2)
	for range 2 {
		wg.Go(func() {
			res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`, "X-Request-Id", "same-id")
			readBodyT(t, res)
			ids <- res.Header.Values("X-Request-Id")
		})
	}
	<-arrived
	<-arrived
	close(release)
	wg.Wait()
	close(ids)
	for v := range ids {
		if len(v) != 1 || v[0] != "same-id" {
			t.Errorf("the client got X-Request-Id %q, want [same-id]", v)
		}
	}
	if len(seen) != 2 || seen["same-id"] != 0 {
		t.Errorf("the backend saw ids %v, want two distinct ids of the gateway's own", seen)
	}
}

// TestClientOnlyHeadersStayAtTheDoor: API-key headers, a client's claimed
// address and the gateway's own headers never reach a backend.
func TestClientOnlyHeadersStayAtTheDoor(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	tg := startGateway(t, nil, fb.URL)
	hdrs := []string{"X-Real-IP", "6.6.6.6", "X-Api-Key", "k1", "api-key", "k2", "X-Maitred-Priority", "default", "X-Maitred-Anything", "x"}
	readBodyT(t, tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`, hdrs...))
	// The probe mark would make a test backend answer as to a probe:
	// sent alone, it must not change what the backend receives either.
	readBodyT(t, tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`, fleet.ProbeHeader, "warmup"))
	reqs, _ := fb.requests()
	if len(reqs) != 2 {
		t.Fatalf("the backend received %d requests, want 2 (a forwarded probe mark is answered as a probe)", len(reqs))
	}
	for _, r := range reqs {
		for i := 0; i < len(hdrs); i += 2 {
			if v := r.Header.Get(hdrs[i]); v != "" {
				t.Errorf("%s reached the backend: %q", hdrs[i], v)
			}
		}
	}
}

// TestExpectContinueOnce: a client sending Expect: 100-continue gets one
// 100 Continue (the gateway's, when it reads the body), not a second one
// relayed from the backend.
func TestExpectContinueOnce(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	tg := startGateway(t, nil, fb.URL)
	addr := rawGateway(t, tg)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","prompt":"x","max_tokens":1}`
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("first line %q err %v, want 100 Continue", line, err)
	}
	io.WriteString(c, body)
	rest, _ := io.ReadAll(br)
	if n := strings.Count(string(rest), "HTTP/1.1 100"); n != 0 {
		t.Errorf("%d more 100 Continue after the first:\n%s", n, rest)
	}
	if !strings.Contains(string(rest), "HTTP/1.1 200") {
		t.Errorf("no 200 after the 100:\n%s", rest)
	}
}

// TestMethodsAndProbes: a 405 names the allowed methods (RFC 9110); the
// probes answer HEAD; /health answers as vLLM's does (200 or 503, no
// body), following readiness.
func TestMethodsAndProbes(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"choices":[]}`) })
	tg := startGateway(t, nil, fb.URL)
	do := func(method, path string) (*http.Response, string) {
		req, _ := http.NewRequest(method, tg.URL+path, nil)
		res, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res, readBodyT(t, res)
	}
	for _, tt := range []struct{ method, path, allow string }{
		{"POST", "/livez", "GET, HEAD"},
		{"DELETE", "/readyz", "GET, HEAD"},
		{"GET", "/v1/completions", "POST"},
		{"PUT", "/metrics", "GET"},
	} {
		res, body := do(tt.method, tt.path)
		if res.StatusCode != 405 || res.Header.Get("Allow") != tt.allow || !strings.Contains(body, "method_not_allowed") {
			t.Errorf("%s %s: %d Allow %q %s, want 405 Allow %q", tt.method, tt.path, res.StatusCode, res.Header.Get("Allow"), body, tt.allow)
		}
	}
	for _, p := range []string{"/livez", "/readyz", "/health"} {
		if res, body := do("HEAD", p); res.StatusCode != 200 || body != "" {
			t.Errorf("HEAD %s: %d %q", p, res.StatusCode, body)
		}
	}
	if res, body := do("GET", "/health"); res.StatusCode != 200 || body != "" {
		t.Errorf("GET /health while ready: %d %q", res.StatusCode, body)
	}
	tg.SetPhase(Draining)
	if res, body := do("GET", "/health"); res.StatusCode != 503 || body != "" {
		t.Errorf("GET /health while draining: %d %q", res.StatusCode, body)
	}
}
