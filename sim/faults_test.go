package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

const chatBody = `{"messages":[{"role":"user","content":"hi"}]}`
const chatStreamBody = `{"messages":[{"role":"user","content":"hi"}],"stream":true}`

func TestHangThenClientCancel(t *testing.T) {
	e := newEnv(t, Config{Hang: true})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		resp, err := e.send(ctx, http.MethodPost, "/v1/chat/completions", chatBody)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	eventually(t, "request received", func() bool { return e.sim.Stats().Requests == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client err = %v, want context.Canceled", err)
	}
	eventually(t, "abort counted", func() bool { return e.sim.Stats().Aborted == 1 })
	if v, _ := metricValue(e.scrape(), "sim_aborted_requests_total", map[string]string{"model_name": "demo"}); v != 1 {
		t.Errorf("sim_aborted_requests_total = %v", v)
	}
	st := e.sim.Stats()
	if st.Completed != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestHangToggledAtRuntime(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 1})
	e.sim.Update(func(c *Config) { c.Hang = true })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := e.send(ctx, http.MethodPost, "/v1/chat/completions", chatBody); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "request received", func() bool { return e.sim.Stats().Requests == 1 })
	cancel()
	<-done
	eventually(t, "abort counted", func() bool { return e.sim.Stats().Aborted == 1 })
	e.sim.Update(func(c *Config) { c.Hang = false })
	if code, _, _ := e.post("/v1/chat/completions", chatBody); code != 200 {
		t.Fatalf("after un-hang: %d", code)
	}
}

func TestCutAfterChunks(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 10, CutAfterChunks: 3})
	resp, err := e.send(t.Context(), http.MethodPost, "/v1/chat/completions", chatStreamBody)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	frames, err := readSSE(resp.Body)
	if err == nil {
		t.Fatalf("stream ended cleanly; frames %q", frames)
	}
	// role chunk + 3 content chunks, then the connection drops.
	if len(frames) != 4 {
		t.Fatalf("frames = %q (err %v)", frames, err)
	}
	for _, f := range frames {
		if f == "[DONE]" || strings.Contains(f, `"finish_reason":"`) {
			t.Fatalf("truncated stream has a terminal frame: %q", f)
		}
	}
	eventually(t, "cut counted", func() bool {
		st := e.sim.Stats()
		return st.Cut == 1 && st.Running == 0
	})

	// The openai client sees the truncation as an error, not a clean end.
	c := e.openai("")
	stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    "demo",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	defer stream.Close()
	n := 0
	for stream.Next() {
		n++
	}
	if stream.Err() == nil {
		t.Errorf("openai stream: %d chunks and no error", n)
	}
}

func TestClientDisconnectMidStreamFreesSlot(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{OutputTokens: 10, MaxNumSeqs: 1, TokenGate: gate})
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := e.send(ctx, http.MethodPost, "/v1/chat/completions", chatStreamBody)
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}
	r := &sseReader{br: newBufReader(resp.Body)}
	for range 2 { // role + first token
		if _, err := r.next(); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.sim.Stats(); st.Running != 1 {
		t.Fatalf("running = %d", st.Running)
	}
	cancel()
	resp.Body.Close()
	eventually(t, "abort and slot freed", func() bool {
		st := e.sim.Stats()
		return st.Aborted == 1 && st.Running == 0
	})
	fams := e.scrape()
	if v, _ := metricValue(fams, "vllm:request_success_total", map[string]string{"finished_reason": "abort"}); v != 1 {
		t.Errorf("request_success_total{abort} = %v", v)
	}
	if v, _ := metricValue(fams, "vllm:kv_cache_usage_perc", nil); v != 0 {
		t.Errorf("kv usage after abort = %v", v)
	}
}

func TestMaxNumSeqsQueue(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{OutputTokens: 1, MaxNumSeqs: 1, KVTokens: 1000, TokenGate: gate})
	type result struct {
		code int
		body string
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			resp, err := e.send(t.Context(), http.MethodPost, "/v1/chat/completions", chatBody)
			if err != nil {
				results <- result{code: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, string(b)}
		}()
	}
	eventually(t, "one running, one waiting", func() bool {
		st := e.sim.Stats()
		return st.Running == 1 && st.Waiting == 1
	})
	fams := e.scrape()
	labels := map[string]string{"model_name": "demo", "engine": "0"}
	if v, ok := metricValue(fams, "vllm:num_requests_waiting", labels); !ok || v != 1 {
		t.Errorf("num_requests_waiting = %v (%v)", v, ok)
	}
	if v, ok := metricValue(fams, "vllm:num_requests_running", labels); !ok || v != 1 {
		t.Errorf("num_requests_running = %v (%v)", v, ok)
	}
	if v, _ := metricValue(fams, "vllm:kv_cache_usage_perc", labels); v != float64(chatHiTokens)/1000 {
		t.Errorf("kv_cache_usage_perc = %v, want %v", v, float64(chatHiTokens)/1000)
	}
	gate <- struct{}{} // first request's only token; it finishes and frees the slot
	eventually(t, "second admitted", func() bool {
		st := e.sim.Stats()
		return st.Completed == 1 && st.Running == 1 && st.Waiting == 0
	})
	gate <- struct{}{}
	for range 2 {
		if r := <-results; r.code != 200 {
			t.Errorf("result = %+v", r)
		}
	}
	fams = e.scrape()
	if v, _ := metricValue(fams, "vllm:request_queue_time_seconds", nil); v != 2 {
		t.Errorf("queue time observations = %v", v)
	}
}

func TestWaitingRequestCancelled(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{OutputTokens: 1, MaxNumSeqs: 1, TokenGate: gate})
	first := make(chan int, 1)
	go func() {
		resp, err := e.send(t.Context(), http.MethodPost, "/v1/chat/completions", chatBody)
		if err != nil {
			first <- -1
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	eventually(t, "first running", func() bool { return e.sim.Stats().Running == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := e.send(ctx, http.MethodPost, "/v1/chat/completions", chatBody); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, "second waiting", func() bool { return e.sim.Stats().Waiting == 1 })
	cancel()
	<-done
	eventually(t, "waiting abort", func() bool {
		st := e.sim.Stats()
		return st.Aborted == 1 && st.Waiting == 0
	})
	gate <- struct{}{}
	if c := <-first; c != 200 {
		t.Fatalf("first = %d", c)
	}
}

func TestCloseAbortsInFlight(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{OutputTokens: 5, TokenGate: gate})
	// Non-streaming: 500 GenerationError.
	res := make(chan string, 1)
	go func() {
		resp, err := e.send(t.Context(), http.MethodPost, "/v1/chat/completions", chatBody)
		if err != nil {
			res <- err.Error()
			return
		}
		res <- resp.Status + " " + readAll(t, resp)
	}()
	// Streaming: in-band error event then [DONE].
	resp, err := e.send(t.Context(), http.MethodPost, "/v1/chat/completions", chatStreamBody)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	eventually(t, "both running", func() bool { return e.sim.Stats().Running == 2 })
	e.sim.Close()
	want := `{"error":{"message":"Internal server error","type":"InternalServerError","param":null,"code":500}}`
	if got := <-res; got != "500 Internal Server Error "+want {
		t.Errorf("non-stream = %s", got)
	}
	frames, err := readSSE(resp.Body)
	if err != nil || len(frames) != 2 || frames[0] != want || frames[1] != "[DONE]" {
		t.Errorf("stream frames = %q, %v", frames, err)
	}
	if st := e.sim.Stats(); st.Failed != 2 || st.Running != 0 {
		t.Errorf("stats = %+v", st)
	}
	if code, _, _ := e.get("/health"); code != 503 {
		t.Errorf("health after Close = %d", code)
	}
}
