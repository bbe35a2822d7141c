package sim

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
)

// The newer endpoints share chat's engine: a client that leaves frees the
// slot and counts as aborted, shutdown answers the endpoint's own error
// shape, and CutAfterChunks cuts their streams.
func TestEngineFaultsOnNewEndpoints(t *testing.T) {
	bodies := map[string]string{
		"/v1/responses": `{"input":"hi","stream":true}`,
		"/v1/messages":  `{"model":"demo","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	}
	for path, body := range bodies {
		t.Run("client leaves "+path, func(t *testing.T) {
			gate := make(chan struct{})
			e := newEnv(t, Config{OutputTokens: 5, TokenGate: gate})
			ctx, cancel := context.WithCancel(t.Context())
			resp, err := e.send(ctx, http.MethodPost, path, body)
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "running", func() bool { return e.sim.Stats().Running == 1 })
			gate <- struct{}{} // one token out
			br := bufio.NewReader(resp.Body)
			for { // read up to the first token's frame
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(line, "Lorem") {
					break
				}
			}
			cancel()
			resp.Body.Close()
			eventually(t, "abort counted", func() bool { st := e.sim.Stats(); return st.Aborted == 1 && st.Running == 0 })
			if st := e.sim.Stats(); st.Completed != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
		t.Run("cut "+path, func(t *testing.T) {
			e := newEnv(t, Config{OutputTokens: 5, CutAfterChunks: 2})
			resp, err := e.send(t.Context(), http.MethodPost, path, body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := readSSE(resp.Body); err == nil {
				t.Error("stream ended cleanly")
			}
			eventually(t, "cut counted", func() bool { st := e.sim.Stats(); return st.Cut == 1 && st.Running == 0 })
		})
	}

	t.Run("shutdown mid-stream", func(t *testing.T) {
		gate := make(chan struct{})
		e := newEnv(t, Config{OutputTokens: 5, TokenGate: gate})
		resp, err := e.send(t.Context(), http.MethodPost, "/v1/responses", bodies["/v1/responses"])
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		eventually(t, "running", func() bool { return e.sim.Stats().Running == 1 })
		e.sim.Close()
		raw := readAll(t, resp)
		if !strings.HasSuffix(raw, "event: error\ndata: {\"code\":\"InternalServerError\",\"message\":\"Internal server error\",\"param\":null,\"sequence_number\":2,\"type\":\"error\"}\n\n") {
			t.Errorf("stream = %s", raw)
		}
		if st := e.sim.Stats(); st.Failed != 1 || st.Running != 0 {
			t.Errorf("stats = %+v", st)
		}
	})
	t.Run("shutdown before the answer", func(t *testing.T) {
		gate := make(chan struct{})
		e := newEnv(t, Config{OutputTokens: 5, TokenGate: gate})
		type result struct {
			code int
			body string
		}
		done := make(chan result, 1)
		go func() {
			resp, err := e.send(t.Context(), http.MethodPost, "/v1/messages", `{"model":"demo","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
			if err != nil {
				done <- result{}
				return
			}
			done <- result{resp.StatusCode, readAll(t, resp)}
		}()
		eventually(t, "running", func() bool { return e.sim.Stats().Running == 1 })
		e.sim.Close()
		r := <-done
		if r.code != 500 || r.body != `{"type":"error","error":{"type":"InternalServerError","message":"Internal server error"}}` {
			t.Errorf("%d %s", r.code, r.body)
		}
	})
}
