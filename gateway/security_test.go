package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/config"
)

// rawGateway serves tg's handler through the gateway's own http.Server
// (its header timeout and size limits), for tests that write raw bytes.
func rawGateway(t *testing.T, tg *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := tg.Server()
	go hs.Serve(tg.Listener(ln))
	// Shutdown, not Close: it waits for each connection's goroutine, some of
	// which linger to let a client read an answer before its unread body
	// is reset.
	t.Cleanup(func() { hs.Shutdown(context.Background()) })
	return ln.Addr().String()
}

// exchangeRaw writes raw to addr and reads every response the connection
// answers, until the server closes it or goes quiet.
func exchangeRaw(t *testing.T, addr, raw string) (statuses []int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		// The deadline bounds the wait on a connection the server keeps
		// open (reported as not closed); no timing is asserted.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				return statuses, false
			}
			return statuses, true
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses = append(statuses, res.StatusCode)
		if res.Close {
			return statuses, true
		}
	}
}

// TestFramingAndHeaders replays the request-smuggling, hop-by-hop and
// limit cases trusted proxies test, as raw bytes, against the gateway's
// real server: every ambiguous framing is refused before the backend, a
// well-framed request reaches it with one framing and exactly the bytes
// the gateway parsed, and no client credential or hop-by-hop header goes
// upstream.
func TestFramingAndHeaders(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"choices":[]}`)
	})
	tg := startGateway(t, func(c *config.Config) {
		c.MaxBodyBytes = 4096
		c.MaxHeaderBytes = 4096
	}, fb.URL)
	addr := rawGateway(t, tg)
	body := func(prompt string) string { return `{"model":"m","prompt":"` + prompt + `","max_tokens":1}` }
	chunked := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n0\r\n\r\n" }
	const ssrf = `{"model":"http://169.254.169.254/latest","prompt":"x"}`
	head := "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"

	tests := []struct {
		name     string
		raw      string
		statuses []int
		closed   bool
		bodies   []string // what the backend must receive, in order
	}{
		// Framed two ways: refused and closed, so the request in its
		// tail is never served either (Go's server alone serves both).
		{"TE and CL, then a second request in the body's tail",
			head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body("one")) +
				head + "Content-Length: " + strconv.Itoa(len(body("two"))) + "\r\nConnection: close\r\n\r\n" + body("two"),
			[]int{400}, true, nil},
		{"CL and TE (other order, other case)",
			head + "transfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n" + chunked(body("one")),
			[]int{400}, true, nil},
		{"a well-framed request, then one framed two ways",
			head + "Content-Length: " + strconv.Itoa(len(body("one"))) + "\r\n\r\n" + body("one") +
				head + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body("two")),
			[]int{200, 400}, true, []string{body("one")}},
		{"chunked alone, twice on one connection",
			head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body("one")) +
				head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked(body("two")),
			[]int{200, 200}, true, []string{body("one"), body("two")}},
		{"TE gzip, chunked", head + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked(body("x")), []int{501}, true, nil},
		{"two TE lines", head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body("x")), []int{501}, true, nil},
		{"two different CL", head + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + body("x"), []int{400}, true, nil},
		{"CL +n", head + "Content-Length: +3\r\n\r\n" + body("x"), []int{400}, true, nil},
		{"space before colon", head + "Content-Length : 3\r\n\r\nabc", []int{400}, true, nil},
		{"no Host", "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\nabc", []int{400}, true, nil},
		{"header block over the limit", head + "X-Pad: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", []int{431}, true, nil},
		{"body one byte over the limit", head + "Content-Length: 4097\r\n\r\n" + body(strings.Repeat("a", 4097-len(body("")))), []int{413}, true, nil},
		{"model as a URL", head + "Content-Length: " + strconv.Itoa(len(ssrf)) + "\r\nConnection: close\r\n\r\n" + ssrf, []int{404}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := fb.requests()
			statuses, closed := exchangeRaw(t, addr, tt.raw)
			if !slices.Equal(statuses, tt.statuses) || closed != tt.closed {
				t.Errorf("statuses %v closed %v, want %v closed %v", statuses, closed, tt.statuses, tt.closed)
			}
			reqs, bodies := fb.requests()
			reqs, bodies = reqs[len(before):], bodies[len(before):]
			if len(bodies) != len(tt.bodies) {
				t.Fatalf("the backend received %d requests, want %d", len(bodies), len(tt.bodies))
			}
			for i, b := range bodies {
				if string(b) != tt.bodies[i] || reqs[i].ContentLength != int64(len(b)) || len(reqs[i].TransferEncoding) != 0 {
					t.Errorf("backend request %d: CL %d TE %v body %q, want %q with its length", i, reqs[i].ContentLength, reqs[i].TransferEncoding, b, tt.bodies[i])
				}
			}
		})
	}

	t.Run("hop-by-hop headers and client credentials", func(t *testing.T) {
		before, _ := fb.requests()
		const secret = "s3cr3t"
		raw := head + "Content-Length: " + strconv.Itoa(len(body("h"))) + "\r\n" +
			"Connection: close, X-Api-Key\r\nX-Api-Key: " + secret + "\r\nProxy-Authorization: Basic " + secret +
			"\r\nAuthorization: Bearer " + secret + "\r\nCookie: k=" + secret + "\r\nKeep-Alive: timeout=" + secret +
			"\r\nUpgrade: " + secret + "\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: " + secret + "\r\n\r\n" + body("h")
		if statuses, _ := exchangeRaw(t, addr, raw); !slices.Equal(statuses, []int{200}) {
			t.Fatalf("statuses %v", statuses)
		}
		reqs, _ := fb.requests()
		if len(reqs) != len(before)+1 {
			t.Fatalf("the backend received %d requests", len(reqs)-len(before))
		}
		r := reqs[len(reqs)-1]
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, secret) {
					t.Errorf("the backend received %s: %s", k, v)
				}
			}
		}
		if xff := r.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
			t.Errorf("X-Forwarded-For %q: the gateway alone sets it", xff)
		}
	})
}

// TestSlowHeadersAreCut: a client trickling its header block (slowloris)
// is answered and disconnected at read_header_timeout, while a normal
// request on another connection is served meanwhile.
func TestSlowHeadersAreCut(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"choices":[]}`)
	})
	tg := startGateway(t, func(c *config.Config) { c.ReadHeaderTimeout = config.Duration(300 * time.Millisecond) }, fb.URL)
	addr := rawGateway(t, tg)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nX-Slow: a")
	cut := make(chan error, 1)
	go func() {
		// Keep trickling until the server gives up on us (or, failing,
		// for 100 rounds: ~30 times read_header_timeout).
		for range 100 {
			if _, err := io.WriteString(c, "a"); err != nil {
				cut <- err
				return
			}
			one := make([]byte, 1)
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(one); err != nil {
				if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
					continue // still open: trickle on
				}
				cut <- err
				return
			}
			// Bytes from the server: its 408/400 answer; the close follows.
		}
		cut <- nil
	}()
	res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`)
	if readBodyT(t, res); res.StatusCode != 200 {
		t.Errorf("a normal request during the slow one: %d", res.StatusCode)
	}
	if err := <-cut; err == nil {
		t.Fatal("the slow connection was not cut")
	}
}
