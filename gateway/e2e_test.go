package gateway

// End-to-end tests: the real gateway and the real simulator as HTTP servers
// on loopback, driven by the official OpenAI Go SDK.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/fleet"
	"github.com/maitred-dev/maitred/sim"
)

type e2e struct {
	sim *sim.Server
	gw  *testGateway
	sdk openai.Client
}

func startE2E(t *testing.T, sc sim.Config, mutate func(*config.Config)) *e2e {
	t.Helper()
	sc.Model = "m"
	// The gate holds generation back; it is set only after the warm-up
	// generation the gateway sends before the backend counts as ready.
	gate := sc.TokenGate
	sc.TokenGate = nil
	s := sim.New(sc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	tg := startGateway(t, mutate, srv.URL)
	warmupDone(t, s)
	if gate != nil {
		s.Update(func(c *sim.Config) { c.TokenGate = gate })
	}
	sdk := openai.NewClient(
		option.WithBaseURL(tg.URL+"/v1/"),
		option.WithAPIKey("client-secret"),
		option.WithHTTPClient(tg.client),
		option.WithMaxRetries(0),
	)
	return &e2e{sim: s, gw: tg, sdk: sdk}
}

// eventually waits for cond, failing after a generous deadline. It awaits an
// event; it asserts nothing about how long the event took.
// warmupDone waits until the simulator has finished the gateway's warm-up
// generation: the warm-up reads its stream up to [DONE], which the
// simulator writes before it counts the request finished, and a test that
// waits for "one request running" must not see the warm-up's.
func warmupDone(t *testing.T, s *sim.Server) {
	t.Helper()
	eventually(t, "the warm-up to finish in the simulator", func() bool {
		st := s.Stats()
		return st.Running == 0 && st.Waiting == 0
	})
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func chatParams(maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "m",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello!")},
		MaxTokens: openai.Int(maxTokens),
	}
}

func TestE2EChatCompletion(t *testing.T) {
	e := startE2E(t, sim.Config{OutputTokens: 4}, nil)
	resp, err := e.sdk.Chat.Completions.New(t.Context(), chatParams(16))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if resp.Usage.CompletionTokens != 4 || resp.Usage.PromptTokens == 0 ||
		resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage = %+v", resp.Usage)
	}
	if resp.Model != "m" || !strings.HasPrefix(resp.ID, "chatcmpl-") {
		t.Errorf("id/model = %q/%q", resp.ID, resp.Model)
	}
}

func TestE2ECompletionsStreamAndNot(t *testing.T) {
	e := startE2E(t, sim.Config{OutputTokens: 3}, nil)
	p := openai.CompletionNewParams{
		Model:     "m",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(10),
	}
	resp, err := e.sdk.Completions.New(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Usage.CompletionTokens != 3 {
		t.Fatalf("completion = %+v", resp)
	}
	stream := e.sdk.Completions.NewStreaming(t.Context(), p)
	var text strings.Builder
	n := 0
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Text)
		}
		n++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 3 || text.String() != resp.Choices[0].Text {
		t.Errorf("streamed %d chunks %q, non-streamed %q", n, text.String(), resp.Choices[0].Text)
	}
}

// The simulator generates a token only when the test releases it, so a
// chunk the client holds before releasing the next token cannot have been
// buffered behind later ones.
func TestE2EStreamChunksArriveOneByOne(t *testing.T) {
	gate := make(chan struct{})
	const tokens = 5
	e := startE2E(t, sim.Config{OutputTokens: tokens, TokenGate: gate}, nil)
	p := chatParams(tokens)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	base := e.sim.Stats() // the warm-up generation
	stream := e.sdk.Chat.Completions.NewStreaming(t.Context(), p)
	defer stream.Close()

	next := func() openai.ChatCompletionChunk {
		t.Helper()
		if !stream.Next() {
			t.Fatalf("stream ended early: %v", stream.Err())
		}
		return stream.Current()
	}
	// As in vLLM, the role chunk goes out with the first token, after prefill.
	gate <- struct{}{}
	if c := next(); len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk should carry the role: %+v", c)
	}
	var content []string
	for i := range tokens {
		if i > 0 {
			gate <- struct{}{} // release token i
		}
		c := next()
		if len(c.Choices) != 1 || c.Choices[0].Delta.Content == "" {
			t.Fatalf("chunk %d: %+v", i, c)
		}
		content = append(content, c.Choices[0].Delta.Content)
		if got := e.sim.Stats().Completed; got != base.Completed && i < tokens-1 {
			t.Fatalf("backend finished before the client read chunk %d", i)
		}
	}
	var usage *openai.CompletionUsage
	for stream.Next() {
		if c := stream.Current(); c.Usage.TotalTokens > 0 {
			usage = &c.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if usage == nil || usage.CompletionTokens != tokens {
		t.Errorf("usage chunk = %+v", usage)
	}
	if len(content) != tokens {
		t.Errorf("content chunks = %q", content)
	}
}

func TestE2EClientDisconnectAbortsUpstream(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		name := map[bool]string{false: "non-streaming", true: "streaming"}[streaming]
		t.Run(name, func(t *testing.T) {
			gate := make(chan struct{})
			e := startE2E(t, sim.Config{OutputTokens: 50, TokenGate: gate}, nil)
			// The simulator counts the warm-up generation just after its
			// answer went out: the baseline is taken once it has.
			eventually(t, "the warm-up to be counted", func() bool { s := e.sim.Stats(); return s.Completed >= 1 && s.Running == 0 })
			base := e.sim.Stats()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				if streaming {
					s := e.sdk.Chat.Completions.NewStreaming(ctx, chatParams(50))
					for s.Next() {
					}
					done <- s.Err()
					s.Close()
					return
				}
				_, err := e.sdk.Chat.Completions.New(ctx, chatParams(50))
				done <- err
			}()
			gate <- struct{}{} // the backend is generating this request
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("client error = %v, want context.Canceled", err)
			}
			// The slot is freed just after the abort is counted.
			eventually(t, "the simulator to count an abort and free its slot", func() bool { s := e.sim.Stats(); return s.Aborted == 1 && s.Running == 0 })
			if s := e.sim.Stats(); s.Completed != base.Completed {
				t.Errorf("sim stats after abort: %+v", s)
			}
			eventually(t, "the gateway to release the request", func() bool {
				return e.gw.Fleet.Models()[0].Backends()[0].Status().InFlight == 0
			})
		})
	}
}

func TestE2EBackendCutMidStreamEndsWithErrorEvent(t *testing.T) {
	e := startE2E(t, sim.Config{OutputTokens: 10}, nil)
	// After the warm-up, which streams too: a backend that cuts every
	// stream never becomes ready.
	e.sim.Update(func(c *sim.Config) { c.CutAfterChunks = 3 })
	// The SDK surfaces the gateway's error event as an error, not a quiet end.
	p := chatParams(10)
	stream := e.sdk.Chat.Completions.NewStreaming(t.Context(), p)
	chunks := 0
	for stream.Next() {
		chunks++
	}
	err := stream.Err()
	stream.Close()
	if err == nil || !strings.Contains(err.Error(), "stream broke") {
		t.Fatalf("after %d chunks the SDK reported %v, want the gateway's stream error", chunks, err)
	}
	// On the wire: whole events, then exactly one error event, no [DONE],
	// and an abortive end.
	res := e.gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	body := readCutBody(t, res)
	if events := sseEvents(body); len(events) < 2 {
		t.Fatalf("too few events: %q", body)
	}
	checkBrokenStream(t, body, codeDisconnected)
	if e.sim.Stats().Cut != 2 {
		t.Errorf("sim cut %d streams, want 2", e.sim.Stats().Cut)
	}
}

func TestE2ENonJSONBodyIs400InEnvelope(t *testing.T) {
	e := startE2E(t, sim.Config{}, nil)
	res := e.gw.post(t, "/v1/chat/completions", `model=m&messages=hi`)
	body := readBodyT(t, res)
	env := decodeEnvelope(t, body)
	if res.StatusCode != 400 || env.Error.Type != "invalid_request_error" || str(env.Error.Code) != "invalid_json" {
		t.Fatalf("got %d %s", res.StatusCode, body)
	}
	if n := len(completionRequests(e.sim)); n != 0 {
		t.Errorf("backend received %d requests", n)
	}
}

func TestE2EClientAuthorizationNeverReachesBackend(t *testing.T) {
	t.Setenv("E2E_BACKEND_KEY", "backend-key")
	e := startE2E(t, sim.Config{APIKey: "backend-key", OutputTokens: 2},
		func(c *config.Config) { c.Models[0].Backends[0].APIKeyEnv = "E2E_BACKEND_KEY" })
	if _, err := e.sdk.Chat.Completions.New(t.Context(), chatParams(2)); err != nil {
		t.Fatal(err) // the simulator demands its own key: the gateway sent it
	}
	s := e.sdk.Chat.Completions.NewStreaming(t.Context(), chatParams(2))
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	recv := completionRequests(e.sim)
	if len(recv) != 2 {
		t.Fatalf("sim received %d requests", len(recv))
	}
	for _, r := range recv {
		auth := r.Header.Values("Authorization")
		if len(auth) != 1 || auth[0] != "Bearer backend-key" {
			t.Errorf("backend saw Authorization %q", auth)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "client-secret") {
					t.Errorf("client key reached the backend in %s", k)
				}
			}
		}
	}
}

func TestE2EErrorsAreTypedSDKErrors(t *testing.T) {
	e := startE2E(t, sim.Config{MaxModelLen: 64}, nil)
	// The gateway's own error.
	p := chatParams(4)
	p.Model = "no-such-model"
	_, err := e.sdk.Chat.Completions.New(t.Context(), p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %T %v, want *openai.Error", err, err)
	}
	if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" || apiErr.Type != "invalid_request_error" {
		t.Errorf("gateway error = %d code=%q param=%q type=%q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Type)
	}
	// vLLM's own error (context length) passes through and is typed too.
	_, err = e.sdk.Chat.Completions.New(t.Context(), chatParams(60))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.RawJSON(), "context length") {
		t.Fatalf("backend error = %v: %s", err, apiErr.RawJSON())
	}
}

// completionRequests returns what the simulator received from clients on
// its generation routes (the gateway's probes and warm-up excluded).
func completionRequests(s *sim.Server) []sim.Received {
	return clientRequests(s, func(path string) bool { return strings.HasSuffix(path, "completions") })
}

// clientRequests are the requests s received on the paths match accepts,
// without the gateway's own probes.
func clientRequests(s *sim.Server, match func(path string) bool) []sim.Received {
	var out []sim.Received
	for _, r := range s.Received() {
		if match(r.Path) && r.Header.Get(fleet.ProbeHeader) == "" {
			out = append(out, r)
		}
	}
	return out
}
