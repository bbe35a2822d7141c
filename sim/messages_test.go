package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

func (e *testEnv) anthropic() anthropic.Client {
	return anthropic.NewClient(
		option.WithBaseURL(e.srv.URL+"/"),
		option.WithHTTPClient(e.http),
		option.WithMaxRetries(0),
		option.WithAPIKey("unused"),
	)
}

func hiMessage() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "demo",
		MaxTokens: 100,
		System:    []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	}
}

func TestMessagesSDK(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxTokens  int64
		wantTokens int
		wantStop   anthropic.StopReason
	}{
		{"natural stop", 100, 4, anthropic.StopReasonEndTurn},
		{"max_tokens caps", 2, 2, anthropic.StopReasonMaxTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{OutputTokens: 4})
			c := e.anthropic()
			p := hiMessage()
			p.MaxTokens = tc.maxTokens
			msg, err := c.Messages.New(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Type != "message" || msg.Role != "assistant" || msg.Model != "demo" || msg.ID == "" {
				t.Errorf("type/role/model/id = %q %q %q %q", msg.Type, msg.Role, msg.Model, msg.ID)
			}
			if len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != GeneratedText(0, tc.wantTokens) {
				t.Errorf("content = %+v", msg.Content)
			}
			if msg.StopReason != tc.wantStop {
				t.Errorf("stop_reason = %q", msg.StopReason)
			}
			if msg.Usage.InputTokens != chatHiTokens+instrTokens || msg.Usage.OutputTokens != int64(tc.wantTokens) {
				t.Errorf("usage = %+v", msg.Usage)
			}
			if st := e.sim.Stats(); st.Requests != 1 || st.Completed != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestMessagesStreamSDK(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 3})
	c := e.anthropic()
	stream := c.Messages.NewStreaming(context.Background(), hiMessage())
	defer stream.Close()
	var msg anthropic.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := "message_start,content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if got := strings.Join(types, ","); got != want {
		t.Errorf("events = %s\nwant     %s", got, want)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != GeneratedText(0, 3) || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Errorf("accumulated = %+v %q", msg.Content, msg.StopReason)
	}
	if msg.Usage.InputTokens != chatHiTokens+instrTokens || msg.Usage.OutputTokens != 3 {
		t.Errorf("usage = %+v", msg.Usage)
	}
}

func TestMessagesRawStream(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 1})
	resp, err := e.send(context.Background(), http.MethodPost, "/v1/messages",
		`{"model":"demo","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "X-Request-Id", "abc")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	want := "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"chatcmpl-abc","content":[],"model":"demo","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":0}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Lorem"},"index":0}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":8,"output_tokens":1}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	if got := readAll(t, resp); got != want {
		t.Errorf("stream:\n%s\nwant:\n%s", got, want)
	}
	// The full answer, serialised with exclude_none: no stop_sequence.
	code, _, body := e.post("/v1/messages", `{"model":"demo","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "X-Request-Id", "def")
	if code != http.StatusOK || string(body) != `{"id":"chatcmpl-def","type":"message","role":"assistant","content":[{"type":"text","text":"Lorem"}],"model":"demo","stop_reason":"end_turn","usage":{"input_tokens":8,"output_tokens":1}}` {
		t.Errorf("%d %s", code, body)
	}
}

func TestMessagesCountTokensSDK(t *testing.T) {
	e := newEnv(t, Config{})
	c := e.anthropic()
	p := hiMessage()
	n, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model: p.Model, Messages: p.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != chatHiTokens+instrTokens {
		t.Errorf("input_tokens = %d, want %d", n.InputTokens, chatHiTokens+instrTokens)
	}
	// The same count as the chat route's prompt.
	msg, err := c.Messages.New(context.Background(), p)
	if err != nil || msg.Usage.InputTokens != n.InputTokens {
		t.Errorf("messages usage %v, %v", msg, err)
	}
	if st := e.sim.Stats(); st.Requests != 1 {
		t.Errorf("count_tokens counted as a generation: %+v", st)
	}
	code, _, body := e.post("/v1/messages/count_tokens", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`)
	if code != http.StatusOK || string(body) != `{"input_tokens":8,"context_management":{"original_input_tokens":8}}` {
		t.Errorf("%d %s", code, body)
	}
}

func TestMessagesTypedErrorOnLongPrompt(t *testing.T) {
	e := newEnv(t, Config{MaxModelLen: 20})
	c := e.anthropic()
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "demo", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(strings.Repeat("word ", 50)))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %T %v, want *anthropic.Error", err, err)
	}
	if apiErr.StatusCode != http.StatusBadRequest || string(apiErr.Type()) != "BadRequestError" ||
		!strings.HasPrefix(apiErr.Message, "This model's maximum context length is 20 tokens. However, you requested 10 output tokens") {
		t.Errorf("error = %d %q %q", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
	}
	if st := e.sim.Stats(); st.Rejected != 1 || st.Completed != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestMessagesErrors(t *testing.T) {
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name   string
		cfg    Config
		path   string
		body   string
		status int
		// anthropic: the handler's envelope; else the OpenAI one (pydantic).
		anthropic bool
		typ       string
		param     any
		message   string
	}{
		{"missing max_tokens", Config{}, "/v1/messages", `{"model":"demo",` + hi + `}`, 400, false, "Bad Request", "body.max_tokens", ""},
		{"zero max_tokens", Config{}, "/v1/messages", `{"model":"demo","max_tokens":0,` + hi + `}`, 400, false, "Bad Request", "body.max_tokens", ""},
		{"missing model", Config{}, "/v1/messages", `{"max_tokens":5,` + hi + `}`, 400, false, "Bad Request", "body.model", ""},
		{"messages not a list", Config{}, "/v1/messages", `{"model":"demo","max_tokens":5,"messages":"hi"}`, 400, false, "Bad Request", "body.messages", ""},
		{"bad role", Config{}, "/v1/messages", `{"model":"demo","max_tokens":5,"messages":[{"role":"tool","content":"hi"}]}`, 400, false, "Bad Request", "body.messages.0.role", ""},
		{"bad block type", Config{}, "/v1/messages", `{"model":"demo","max_tokens":5,"messages":[{"role":"user","content":[{"type":"video"}]}]}`,
			400, false, "Bad Request", "body.messages.0.content.0.type", ""},
		{"system a number", Config{}, "/v1/messages", `{"model":"demo","max_tokens":5,"system":1,` + hi + `}`, 400, false, "Bad Request", "body.system", ""},
		{"unknown model", Config{}, "/v1/messages", `{"model":"x","max_tokens":5,` + hi + `}`, 404, true, "NotFoundError", nil, "The model `x` does not exist."},
		{"max_tokens above max_model_len", Config{MaxModelLen: 100}, "/v1/messages", `{"model":"demo","max_tokens":101,` + hi + `}`, 400, true, "BadRequestError", nil,
			"max_completion_tokens=101 cannot be greater than max_model_len=max_total_tokens=100. Please request fewer output tokens. (parameter=max_completion_tokens, value=101)"},
		{"fail status", Config{FailStatus: 503}, "/v1/messages", `{"model":"demo","max_tokens":5,` + hi + `}`, 503, true, "ServiceUnavailableError", nil, "Service Unavailable"},
		{"count: missing messages", Config{}, "/v1/messages/count_tokens", `{"model":"demo"}`, 400, false, "Bad Request", "body.messages", ""},
		{"count: unknown model", Config{}, "/v1/messages/count_tokens", `{"model":"x",` + hi + `}`, 404, true, "NotFoundError", nil, "The model `x` does not exist."},
		{"count: longer than the context", Config{MaxModelLen: 5}, "/v1/messages/count_tokens", `{"model":"demo",` + hi + `}`, 400, true, "BadRequestError", nil,
			"This model's maximum context length is 5 tokens. However, you requested 0 output tokens and your prompt contains at least 6 input tokens, " +
				"for a total of at least 6 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=6)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			code, _, body := e.post(tc.path, tc.body)
			if !tc.anthropic {
				checkOpenAIError(t, code, body, tc.status, tc.typ, tc.param, tc.message)
				return
			}
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, body)
			}
			m := decode[map[string]any](t, string(body))
			inner, _ := m["error"].(map[string]any)
			if m["type"] != "error" || inner == nil || inner["type"] != tc.typ || len(inner) != 2 || len(m) != 2 {
				t.Errorf("envelope = %s", body)
			}
			if tc.message != "" && inner["message"] != tc.message {
				t.Errorf("message = %q\nwant      %q", inner["message"], tc.message)
			}
		})
	}
	e := newEnv(t, Config{})
	code, _, body := e.do(context.Background(), http.MethodPost, "/v1/messages", `{}`, "Content-Type", "text/plain")
	checkOpenAIError(t, code, body, 400, "Bad Request", nil, "Unsupported Media Type: Only 'application/json' is allowed")
}

func TestMessagesConversion(t *testing.T) {
	// System blocks and system-role messages merge into one system message;
	// a lone text block becomes a string; tool results become tool messages.
	body := []byte(`{"model":"demo","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
		"messages":[{"role":"system","content":"c"},{"role":"user","content":[{"type":"text","text":"hi"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"x":1,"y":["é"]}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`)
	req, e := parseAnthropic(body, false)
	if e != nil {
		t.Fatal(e)
	}
	got := string(marshal(req.msgs))
	want := `[{"content":"abc","role":"system"},{"content":"hi","role":"user"},` +
		`{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"x\": 1, \"y\": [\"\\u00e9\"]}","name":"f"},"id":"t1","type":"function"}]},` +
		`{"content":"ok","role":"tool","tool_call_id":"t1"}]`
	if got != want {
		t.Errorf("converted:\n%s\nwant\n%s", got, want)
	}
}
