package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// The prompt "hi" costs 4 (user message) + 1 (hi) + 3 (generation prompt)
// = 8 tokens with Approx; the completions prompt "hi" costs 1 + BOS = 2.
const (
	chatHiTokens       = 8
	completionHiTokens = 2
)

func TestApproxCounts(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		chat       bool
		want       int
	}{
		{"chat hi", `{"messages":[{"role":"user","content":"hi"}]}`, true, chatHiTokens},
		{"chat no gen prompt", `{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`, true, 5},
		{"chat special", `{"messages":[{"role":"user","content":"hi"}],"add_special_tokens":true}`, true, 9},
		{"chat parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"hello world"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, true, 4 + 2 + 2 + 3},
		{"completion", `{"prompt":"hi"}`, false, completionHiTokens},
		{"completion no special", `{"prompt":"hi","add_special_tokens":false}`, false, 1},
		{"completion punctuation", `{"prompt":"a, b!"}`, false, 1 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			var err error
			if tc.chat {
				n, err = Approx{}.ChatPromptTokens([]byte(tc.body))
			} else {
				n, err = Approx{}.CompletionPromptTokens([]byte(tc.body))
			}
			if err != nil || n != tc.want {
				t.Fatalf("count = %d, %v; want %d", n, err, tc.want)
			}
		})
	}
	if got := ApproxTextTokens("abcdefghi"); got != 3 {
		t.Errorf("ApproxTextTokens(9 letters) = %d, want 3", got)
	}
}

func TestOpenAIChat(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        Config
		maxTokens  int64 // 0: absent
		wantTokens int
		wantFinish string
	}{
		{"natural stop", Config{OutputTokens: 5}, 0, 5, "stop"},
		{"max_tokens caps", Config{OutputTokens: 5}, 3, 3, "length"},
		{"max_tokens above natural", Config{OutputTokens: 5}, 10, 5, "stop"},
		{"context caps", Config{OutputTokens: 50, MaxModelLen: chatHiTokens + 4}, 0, 4, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			c := e.openai("")
			p := openai.ChatCompletionNewParams{
				Model:    "demo",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			}
			if tc.maxTokens > 0 {
				p.MaxTokens = openai.Int(tc.maxTokens)
			}
			resp, err := c.Chat.Completions.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != "demo" || resp.Created == 0 {
				t.Errorf("id/model/created = %q %q %d", resp.ID, resp.Model, resp.Created)
			}
			if len(resp.Choices) != 1 {
				t.Fatalf("choices = %d", len(resp.Choices))
			}
			ch := resp.Choices[0]
			if want := GeneratedText(0, tc.wantTokens); ch.Message.Content != want {
				t.Errorf("content = %q, want %q", ch.Message.Content, want)
			}
			if ch.FinishReason != tc.wantFinish || ch.Message.Role != "assistant" {
				t.Errorf("finish/role = %q %q", ch.FinishReason, ch.Message.Role)
			}
			u := resp.Usage
			if u.PromptTokens != chatHiTokens || u.CompletionTokens != int64(tc.wantTokens) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage = %+v", u)
			}
			st := e.sim.Stats()
			if st.Requests != 1 || st.Completed != 1 || st.Running != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestChatRawShape(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	code, hdr, body := e.post("/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`,
		"X-Request-Id", "abc")
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", code, hdr.Get("Content-Type"))
	}
	m := decode[map[string]any](t, string(body))
	if m["id"] != "chatcmpl-abc" || m["object"] != "chat.completion" {
		t.Errorf("id/object = %v %v", m["id"], m["object"])
	}
	for _, k := range []string{"system_fingerprint", "service_tier"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	u := m["usage"].(map[string]any)
	if v, ok := u["prompt_tokens_details"]; !ok || v != nil {
		t.Errorf("usage.prompt_tokens_details = %v, want null", v)
	}
	ch := m["choices"].([]any)[0].(map[string]any)
	if ch["stop_reason"] != nil || ch["logprobs"] != nil {
		t.Errorf("choice = %v", ch)
	}
	if tc, _ := ch["message"].(map[string]any)["tool_calls"].([]any); tc == nil || len(tc) != 0 {
		t.Errorf("tool_calls = %v, want []", ch["message"])
	}
}

func TestOpenAIChatStreamGated(t *testing.T) {
	gate := make(chan struct{})
	e := newEnv(t, Config{OutputTokens: 3, TokenGate: gate})
	c := e.openai("")
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "demo",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	genTokens := func() float64 {
		v, _ := metricValue(e.scrape(), "vllm:generation_tokens_total", nil)
		return v
	}
	next := func() openai.ChatCompletionChunk {
		t.Helper()
		if !stream.Next() {
			t.Fatalf("stream ended early: %v", stream.Err())
		}
		return stream.Current()
	}
	var text strings.Builder
	for step := range 3 {
		gate <- struct{}{} // release exactly one token
		if step == 0 {
			role := next()
			if d := role.Choices[0].Delta; d.Role != "assistant" || d.Content != "" {
				t.Fatalf("first chunk delta = %+v", d)
			}
		}
		ch := next()
		// This chunk reached us while the server waits for the next gate
		// value: it was flushed on its own, not buffered.
		if got := genTokens(); got != float64(step+1) {
			t.Fatalf("step %d: server generated %v tokens", step, got)
		}
		if want := tokenText(0, step); ch.Choices[0].Delta.Content != want {
			t.Fatalf("step %d: content %q, want %q", step, ch.Choices[0].Delta.Content, want)
		}
		if ch.Choices[0].FinishReason != "" {
			t.Fatalf("step %d: finish_reason %q", step, ch.Choices[0].FinishReason)
		}
		text.WriteString(ch.Choices[0].Delta.Content)
	}
	fin := next()
	if fin.Choices[0].FinishReason != "stop" || fin.Choices[0].Delta.Content != "" {
		t.Fatalf("final chunk = %+v", fin.Choices[0])
	}
	usage := next()
	if len(usage.Choices) != 0 || usage.Usage.PromptTokens != chatHiTokens || usage.Usage.CompletionTokens != 3 || usage.Usage.TotalTokens != chatHiTokens+3 {
		t.Fatalf("usage chunk = %+v", usage)
	}
	if stream.Next() {
		t.Fatalf("unexpected chunk after usage: %+v", stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != GeneratedText(0, 3) {
		t.Errorf("text = %q", text.String())
	}
	eventually(t, "completion counted", func() bool { return e.sim.Stats().Completed == 1 })
}

func TestStreamRawFrames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		path      string
		body      string
		wantUsage bool
	}{
		{"chat no stream_options", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":2}`, false},
		{"chat empty stream_options", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":2,"stream_options":{}}`, true},
		{"chat include_usage false", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":2,"stream_options":{"include_usage":false}}`, false},
		{"completion", "/v1/completions",
			`{"prompt":"hi","stream":true,"max_tokens":2,"stream_options":{"include_usage":true}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{OutputTokens: 5})
			resp, err := e.send(context.Background(), http.MethodPost, tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("content-type %q", ct)
			}
			frames, err := readSSE(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if frames[len(frames)-1] != "[DONE]" {
				t.Fatalf("last frame %q", frames[len(frames)-1])
			}
			frames = frames[:len(frames)-1]
			chat := strings.Contains(tc.path, "chat")
			if chat {
				// role, token 0, token 1 (finish length), [usage]
				first := decode[map[string]any](t, frames[0])
				if first["object"] != "chat.completion.chunk" || !strings.HasPrefix(first["id"].(string), "chatcmpl-") {
					t.Errorf("first = %v", first)
				}
				if _, has := first["usage"]; has {
					t.Errorf("usage present on content chunk: %s", frames[0])
				}
				if !strings.Contains(frames[0], `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`) {
					t.Errorf("role chunk = %s", frames[0])
				}
				frames = frames[1:]
			}
			if n := 2; len(frames) != n+map[bool]int{true: 1}[tc.wantUsage] {
				t.Fatalf("frames = %q", frames)
			}
			last := frames[1]
			if !strings.Contains(last, `"finish_reason":"length","stop_reason":null`) {
				t.Errorf("finish chunk = %s", last)
			}
			if tc.wantUsage {
				u := decode[map[string]any](t, frames[2])
				if ch := u["choices"].([]any); len(ch) != 0 {
					t.Errorf("usage chunk choices = %v", ch)
				}
				usage := u["usage"].(map[string]any)
				if usage["completion_tokens"] != 2.0 {
					t.Errorf("usage = %v", usage)
				}
				if _, has := usage["prompt_tokens_details"]; has {
					t.Errorf("stream usage has prompt_tokens_details: %s", frames[2])
				}
			}
		})
	}
}

func TestOpenAICompletions(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 40})
	c := e.openai("")
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "demo",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Completions default max_tokens is 16.
	if !strings.HasPrefix(resp.ID, "cmpl-") || resp.Choices[0].Text != GeneratedText(0, 16) ||
		resp.Choices[0].FinishReason != "length" {
		t.Errorf("resp = %q %q %q", resp.ID, resp.Choices[0].Text, resp.Choices[0].FinishReason)
	}
	if resp.Usage.PromptTokens != completionHiTokens || resp.Usage.CompletionTokens != 16 {
		t.Errorf("usage = %+v", resp.Usage)
	}

	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:     "demo",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")},
		MaxTokens: openai.Int(3),
	})
	defer stream.Close()
	var text strings.Builder
	var finish string
	n := 0
	for stream.Next() {
		ch := stream.Current()
		n++
		text.WriteString(ch.Choices[0].Text)
		if ch.Choices[0].FinishReason != "" {
			finish = string(ch.Choices[0].FinishReason)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 3 || text.String() != GeneratedText(0, 3) || finish != "length" {
		t.Errorf("stream: %d chunks, %q, finish %q", n, text.String(), finish)
	}
}

func TestNChoicesAndBatch(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	code, _, body := e.post("/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	r := decode[chatResponse](t, string(body))
	if len(r.Choices) != 2 || r.Choices[1].Index != 1 || r.Choices[1].Message.Content != GeneratedText(1, 2) ||
		r.Usage.CompletionTokens != 4 || r.Usage.PromptTokens != chatHiTokens {
		t.Errorf("n=2: %s", body)
	}
	code, _, body = e.post("/v1/completions", `{"prompt":["hi","hi there"],"max_tokens":1}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	cr := decode[completionResponse](t, string(body))
	if len(cr.Choices) != 2 || cr.Usage.PromptTokens != 2+4 || cr.Usage.CompletionTokens != 2 {
		t.Errorf("batch: %s", body)
	}
	code, _, body = e.post("/v1/completions", `{"prompt":[1,2,3,4],"max_tokens":1}`)
	if cr := decode[completionResponse](t, string(body)); code != 200 || cr.Usage.PromptTokens != 4 {
		t.Errorf("token ids: %d %s", code, body)
	}
}

func TestOpenAIErrorsParse(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 20})
	c := e.openai("")
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "demo",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxTokens: openai.Int(15),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v", err)
	}
	if apiErr.StatusCode != 400 || apiErr.Type != "BadRequestError" || apiErr.Param != "input_tokens" ||
		!strings.Contains(apiErr.Message, "maximum context length is 20 tokens") {
		t.Errorf("api error = %d %q %q %q", apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Message)
	}
}
