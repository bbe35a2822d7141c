package gateway

// Misbehaving backends and clients around an answer whose headers have
// already gone out: slow readers, trickling and stalling backends, a
// [DONE] inside a token, short bodies, abandoned streams. Each backend is a
// real HTTP server on loopback writing exactly the bytes under test.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/config"
)

const streamBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`

// idle200ms gives the model a short stream_idle_timeout.
func idle200ms(c *config.Config) {
	c.Models[0].StreamIdleTimeout = config.Duration(200 * time.Millisecond)
}

// startLoggedGateway starts a gateway in front of url whose access log the
// test can read.
func startLoggedGateway(t *testing.T, mutate func(*config.Config), url string) (*testGateway, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	return startGatewayFull(t, nil, extras{log: zap.New(core)}, mutate, url), logs
}

// requestLines returns the access-log lines of completion requests, each as
// its fields.
func requestLines(logs *observer.ObservedLogs) []map[string]any {
	var out []map[string]any
	for _, e := range logs.FilterMessage("request").All() {
		if f := e.ContextMap(); f["endpoint"] == "/v1/chat/completions" || f["endpoint"] == "/v1/completions" {
			out = append(out, f)
		}
	}
	return out
}

// checkLine asserts the one completion request's access-log line.
func checkLine(t *testing.T, logs *observer.ObservedLogs, status int, outcome, layer string) {
	t.Helper()
	lines := requestLines(logs)
	if len(lines) != 1 {
		t.Fatalf("%d request lines, want 1: %v", len(lines), lines)
	}
	l := lines[0]
	for _, k := range []string{"outcome", "layer"} {
		if l[k] == nil {
			l[k] = "" // absent from the line
		}
	}
	if l["status"] != int64(status) || l["outcome"] != outcome || l["layer"] != layer {
		t.Errorf("logged status=%v outcome=%v layer=%v, want %d %q %q (line %v)", l["status"], l["outcome"], l["layer"], status, outcome, layer, l)
	}
}

// sseEvents splits an SSE body into its events.
func sseEvents(body string) []string {
	return strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
}

// checkBrokenStream asserts that a stream ended with one error event with
// code, and no [DONE] (issue 26: the stream did not end, and says so).
func checkBrokenStream(t *testing.T, body, code string) {
	t.Helper()
	evs := sseEvents(body)
	n := len(evs)
	if n < 1 || !strings.HasPrefix(evs[n-1], `data: {"error"`) || !strings.Contains(evs[n-1], `"code":"`+code+`"`) ||
		!strings.HasSuffix(body, "\n\n") || hasDoneEvent([]byte(body)) || strings.Count(body, `{"error"`) != 1 {
		t.Fatalf("stream does not end with one %s error event and nothing after it: ...%q", code, body[max(0, len(body)-300):])
	}
}

// readCutBody reads the body of an answer the gateway ended as broken: its
// end must be abortive (net/http's client reports the missing terminating
// chunk as io.ErrUnexpectedEOF), so that a client reading only the text
// sees a failure. It returns what came before the abort.
func readCutBody(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading a broken stream: err = %v, want io.ErrUnexpectedEOF (an abortive end); body ...%q", err, b[max(0, len(b)-300):])
	}
	return string(b)
}

// rawRequest sends a streaming chat request on a new connection and returns
// the connection, unread.
func rawRequest(t *testing.T, gatewayURL, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(gatewayURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return c
}

// TestSlowReaderIsTheClientsFault: clients that stop reading a stream
// while the backend keeps sending must be ended as the client's doing
// (499 client_stalled, layer client), the backend cancelled, and never
// counted against the backend: eject_after of them must not eject it.
func TestSlowReaderIsTheClientsFault(t *testing.T) {
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("a", 16<<10) + "\"}}]}\n\n")
	cancelled := make(chan struct{}, 16)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for r.Context().Err() == nil {
			if _, err := w.Write(event); err != nil {
				break
			}
			if rc.Flush() != nil {
				break
			}
		}
		cancelled <- struct{}{}
	})
	// The backend never pauses, so only a starved scheduler could make the
	// gateway wait on it; 500 ms did not keep that out of reach under the
	// race detector at load 16 (one run ended as a backend stall), 2 s does.
	tg, logs := startLoggedGateway(t, func(c *config.Config) {
		c.Models[0].StreamIdleTimeout = config.Duration(2 * time.Second)
	}, fb.URL)
	const clients = 5 // eject_after
	conns := make([]net.Conn, clients)
	for i := range conns {
		conns[i] = rawRequest(t, tg.URL, streamBody)
	}
	for range clients {
		<-cancelled // the clients read nothing until the backend requests were cancelled
	}
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		got, _ := io.ReadAll(c) // then each reads whatever is left
		if strings.Contains(string(got), "backend_stalled") {
			t.Errorf("client %d: the stream was ended as a backend stall", i)
		}
		c.Close()
	}
	tg.quiesce()
	lines := requestLines(logs)
	if len(lines) != clients {
		t.Fatalf("%d request lines, want %d", len(lines), clients)
	}
	for _, l := range lines {
		if l["status"] != int64(499) || l["outcome"] != outcomeClientStalled || l["layer"] != "client" {
			t.Errorf("logged status=%v outcome=%v layer=%v stream_error=%v, want 499 client_stalled client", l["status"], l["outcome"], l["layer"], l["stream_error"])
		}
	}
	m := tg.gathered(t)
	for _, bad := range []string{"maitred_backend_errors_total{", "maitred_stream_errors_total{"} {
		if strings.Contains(m, bad) {
			t.Errorf("slow readers counted against the backend: %s", bad)
		}
	}
	if st := tg.live().byName["m"].pool.Stats().Slots[0]; st.Ejected || st.Ejections != 0 {
		t.Errorf("a healthy backend was ejected for its clients' slowness: %+v", st)
	}
}

// TestTricklingBackendIsStalled: a backend that keeps sending bytes but
// never completes an event is stalled: idleness is judged on events.
func TestTricklingBackendIsStalled(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"")
		rc.Flush()
		// One byte every 10 ms, for at most 3 s: far more often than the
		// idle timeout, but never a whole event.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range 300 {
			select {
			case <-r.Context().Done():
				cancelled <- struct{}{}
				return
			case <-tick.C:
			}
			io.WriteString(w, "a")
			rc.Flush()
		}
	})
	tg, logs := startLoggedGateway(t, idle200ms, fb.URL)
	body := readCutBody(t, tg.post(t, "/v1/chat/completions", streamBody))
	checkBrokenStream(t, body, codeStalled)
	<-cancelled
	tg.quiesce()
	checkLine(t, logs, 200, "", "decode")
	if m := tg.gathered(t); !strings.Contains(m, `kind="stream_stalled"`) {
		t.Errorf("no stream_stalled backend error")
	}
}

// TestDoneInsideATokenIsNotTheEnd: a completion whose text contains
// "data: [DONE]", followed by a cut or a stall, still ends the client's
// stream with an error event and an abortive end.
func TestDoneInsideATokenIsNotTheEnd(t *testing.T) {
	const first = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"data: [DONE]\"}}]}\n\n"
	for _, tc := range []struct {
		name  string
		stall bool
		code  string
	}{
		{"cut", false, codeDisconnected},
		{"stall", true, codeStalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mutate func(*config.Config) // the cut: the default idle timeout, far from it
			if tc.stall {
				mutate = idle200ms
			}
			fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, first)
				http.NewResponseController(w).Flush()
				if tc.stall {
					<-r.Context().Done()
				}
				// Returning without [DONE] ends the body cleanly: a cut.
			})
			tg, logs := startLoggedGateway(t, mutate, fb.URL)
			body := readCutBody(t, tg.post(t, "/v1/chat/completions", streamBody))
			if !strings.HasPrefix(body, first) {
				t.Fatalf("the events before the break were altered: %q", body)
			}
			checkBrokenStream(t, body, tc.code)
			tg.quiesce()
			checkLine(t, logs, 200, "", "decode")
		})
	}
}

// hijackBackend answers completions with raw bytes: a 200 promising a
// 10000-byte JSON body, 256 bytes of it, then either holds the connection
// open until the gateway closes it (hold) or closes it (a short body). It
// reports on the returned channel when the gateway closed its side.
func hijackBackend(t *testing.T, hold bool) (*fakeBackend, chan struct{}) {
	closed := make(chan struct{}, 1)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n")
		buf.WriteString(`{"choices":[{"text":"` + strings.Repeat("a", 256-21))
		buf.Flush()
		if hold {
			io.Copy(io.Discard, c) // until the gateway closes the connection
			closed <- struct{}{}
		}
	})
	return fb, closed
}

// TestNonStreamingBodyStallIsBounded: a backend that sends a non-streaming
// answer's headers and part of its body, then holds the socket, is cut off
// after the idle timeout: the upstream connection is closed, the client's
// aborted, and it is logged and counted as a backend stall.
func TestNonStreamingBodyStallIsBounded(t *testing.T) {
	fb, closed := hijackBackend(t, true)
	tg, logs := startLoggedGateway(t, idle200ms, fb.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tg.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("reading the body: err=%v, context=%v; want the gateway to abort the body", err, ctx.Err())
	}
	<-closed
	tg.quiesce()
	checkLine(t, logs, 200, codeStalled, "decode")
	if m := tg.gathered(t); !strings.Contains(m, `kind="body_stalled"`) {
		t.Errorf("no body_stalled backend error")
	}
}

// TestShortBackendBodyIsTheBackends: a body shorter than its
// Content-Length is the backend's failure, not the client's.
func TestShortBackendBodyIsTheBackends(t *testing.T) {
	fb, _ := hijackBackend(t, false)
	tg, logs := startLoggedGateway(t, nil, fb.URL)
	res := tg.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`)
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Fatalf("a short body reached the client as complete")
	}
	res.Body.Close()
	tg.quiesce()
	checkLine(t, logs, 200, codeDisconnected, "decode")
	if m := tg.gathered(t); !strings.Contains(m, `kind="body_disconnected"`) {
		t.Errorf("no body_disconnected backend error")
	}
}

// leaveStream runs a streamed request through a gateway to a backend that
// sends events and then holds its connection until the upstream request
// is cancelled; the client reads up to the first line starting with
// prefix, then closes. It returns the gateway's request log once the
// request has ended.
func leaveStream(t *testing.T, events, prefix string) (*testGateway, *observer.ObservedLogs) {
	t.Helper()
	cancelled := make(chan struct{}, 1)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		cancelled <- struct{}{}
	})
	tg, logs := startLoggedGateway(t, nil, fb.URL)
	c := rawRequest(t, tg.URL, streamBody)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	rd := bufio.NewReader(c)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("no line starting %q: %v", prefix, err)
		}
		if strings.HasPrefix(line, prefix) {
			break
		}
	}
	c.Close()
	<-cancelled
	tg.quiesce()
	return tg, logs
}

// TestAbandonedStreamIsLogged499: a client that leaves mid-stream is
// logged as 499 client_closed, as docs/proxying.md says, and the backend
// request is cancelled.
func TestAbandonedStreamIsLogged499(t *testing.T) {
	tg, logs := leaveStream(t, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", "data: ")
	checkLine(t, logs, 499, outcomeClientClosed, "client")
	if m := tg.gathered(t); strings.Contains(m, "maitred_backend_errors_total{") {
		t.Errorf("a client leaving was counted against the backend")
	}
}

// TestBreakAfterOversizedPartialEventStartsAFreshEvent: after more than
// maxPartialEvent of one unfinished event went out, a break must end that
// event before the error event, which must stand on its own lines.
func TestBreakAfterOversizedPartialEventStartsAFreshEvent(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\""+strings.Repeat("a", maxPartialEvent+(256<<10)))
		// then a cut, mid-event
	})
	tg, _ := startLoggedGateway(t, nil, fb.URL)
	body := readCutBody(t, tg.post(t, "/v1/chat/completions", streamBody))
	checkBrokenStream(t, body, codeDisconnected)
}

// TestClientLeavingAfterDoneIsASuccess: an SDK closes its stream once it
// has read [DONE], possibly before the backend's connection has ended
// (openai-go does). The answer was complete: the request is a success
// (200, no outcome), not a 499 client_closed.
func TestClientLeavingAfterDoneIsASuccess(t *testing.T) {
	_, logs := leaveStream(t, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", "data: [DONE]")
	checkLine(t, logs, 200, "", "")
}
