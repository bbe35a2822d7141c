package sim

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// With Approx, "be brief" as instructions costs 4 + 1 + 2 = 7 tokens on top
// of the user message "hi".
const instrTokens = 7

func TestResponsesSDK(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 5})
	other := newEnv(t, Config{OutputTokens: 5})
	c := e.openai("")
	resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:        "demo",
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Instructions: openai.String("be brief"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.ID, "resp_") || resp.Object != "response" || resp.Status != "completed" || resp.Model != "demo" {
		t.Errorf("id/object/status/model = %q %q %q %q", resp.ID, resp.Object, resp.Status, resp.Model)
	}
	if got, want := resp.OutputText(), GeneratedText(0, 5); got != want {
		t.Errorf("output text = %q, want %q", got, want)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "message" || !strings.HasPrefix(resp.Output[0].ID, "msg_") {
		t.Errorf("output = %+v", resp.Output)
	}
	u := resp.Usage
	if u.InputTokens != chatHiTokens+instrTokens || u.OutputTokens != 5 || u.TotalTokens != u.InputTokens+5 {
		t.Errorf("usage = %+v", u)
	}
	if resp.Instructions.OfString != "be brief" {
		t.Errorf("instructions = %+v", resp.Instructions)
	}

	// Stored on this server only.
	got, err := c.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != resp.ID || got.OutputText() != resp.OutputText() || got.Status != "completed" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if !e.sim.HasResponse(resp.ID) || other.sim.HasResponse(resp.ID) {
		t.Errorf("HasResponse: here %v, other %v", e.sim.HasResponse(resp.ID), other.sim.HasResponse(resp.ID))
	}
	if st := e.sim.Stats(); st.StoredResponses != 1 || st.Requests != 1 || st.Completed != 1 {
		t.Errorf("stats = %+v", st)
	}
	oc := other.openai("")
	_, err = oc.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("get on the other server: %v", err)
	}
	if apiErr.Type != "invalid_request_error" || apiErr.Param != "response_id" ||
		apiErr.Message != "Response with id '"+resp.ID+"' not found." {
		t.Errorf("404 = %+v", apiErr)
	}

	// A finished response cannot be cancelled.
	_, err = c.Responses.Cancel(context.Background(), resp.ID)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Message != "Cannot cancel a synchronous response." {
		t.Errorf("cancel of a completed response: %v", err)
	}
}

func TestResponsesStreamSDK(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 3})
	c := e.openai("")
	stream := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "demo",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	defer stream.Close()
	var types []string
	var deltas strings.Builder
	var completed responses.Response
	for i := 0; stream.Next(); i++ {
		ev := stream.Current()
		if ev.SequenceNumber != int64(i) {
			t.Errorf("event %d %s: sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Errorf("events = %v\nwant     %v", types, want)
	}
	if deltas.String() != GeneratedText(0, 3) || completed.OutputText() != GeneratedText(0, 3) {
		t.Errorf("deltas %q, completed %q", deltas.String(), completed.OutputText())
	}
	if completed.Status != "completed" || completed.Usage.InputTokens != chatHiTokens || completed.Usage.OutputTokens != 3 {
		t.Errorf("completed = %s %+v", completed.Status, completed.Usage)
	}
	// Stored once complete: retrievable by id.
	got, err := c.Responses.Get(context.Background(), completed.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != GeneratedText(0, 3) {
		t.Fatalf("get = %v, %v", got, err)
	}
}

func TestResponsesRawShapes(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	code, hdr, body := e.post("/v1/responses", `{"model":"demo","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":1,"request_id":"resp_fixed"}`)
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", code, body)
	}
	m := decode[map[string]any](t, string(body))
	if m["id"] != "resp_fixed" || m["status"] != "incomplete" || m["max_output_tokens"] != float64(1) {
		t.Errorf("id/status/max_output_tokens = %v %v %v", m["id"], m["status"], m["max_output_tokens"])
	}
	if d, _ := m["incomplete_details"].(map[string]any); d["reason"] != "max_output_tokens" {
		t.Errorf("incomplete_details = %v", m["incomplete_details"])
	}
	for _, k := range []string{"previous_response_id", "metadata", "text", "reasoning", "user", "prompt", "top_logprobs"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	if m["tool_choice"] != "auto" || m["truncation"] != "disabled" || m["service_tier"] != "auto" || m["background"] != false {
		t.Errorf("defaults: %v %v %v %v", m["tool_choice"], m["truncation"], m["service_tier"], m["background"])
	}
	u := m["usage"].(map[string]any)
	if _, ok := u["input_tokens_details"].(map[string]any)["cached_tokens"]; !ok {
		t.Errorf("usage = %v", u)
	}

	// The raw stream: event: + data: pairs, no [DONE].
	resp, err := e.send(context.Background(), http.MethodPost, "/v1/responses", `{"model":"demo","input":"hi","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw := readAll(t, resp)
	if !strings.HasPrefix(raw, "event: response.created\ndata: {\"response\":") || strings.Contains(raw, "[DONE]") ||
		!strings.HasSuffix(raw, "\"type\":\"response.completed\"}\n\n") {
		t.Errorf("stream = %s", raw)
	}
	// vLLM's simple stream advances content_index after every event.
	for _, want := range []string{`"content_index":0,"item_id"`, `{"content_index":1,"delta":"Lorem"`, `{"content_index":2,"delta":" ipsum"`,
		`{"content_index":3,"item_id"`, `"text":"Lorem ipsum","type":"response.output_text.done"`} {
		if !strings.Contains(raw, want) {
			t.Errorf("stream lacks %s", want)
		}
	}
}

func TestResponsesPreviousResponse(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	c := e.openai("")
	first, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		PreviousResponseID: openai.String(first.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The conversation grows by the first turn: user "hi" (4 + 1) and
	// assistant "Lorem ipsum" (4 + 2 + 2).
	if got := second.Usage.InputTokens; got != chatHiTokens+13 {
		t.Errorf("input tokens = %d, want %d", got, chatHiTokens+13)
	}
	if second.PreviousResponseID != first.ID {
		t.Errorf("previous_response_id = %q", second.PreviousResponseID)
	}
	// store=false keeps nothing.
	code, _, body := e.post("/v1/responses", `{"input":"hi","store":false,"request_id":"resp_nostore"}`)
	if code != http.StatusOK || e.sim.HasResponse("resp_nostore") {
		t.Errorf("store=false: %d %s, stored %v", code, body, e.sim.HasResponse("resp_nostore"))
	}
}

func TestResponsesBackgroundCancel(t *testing.T) {
	gate := make(chan struct{}) // never fed: the job stays in its first step
	e := newEnv(t, Config{OutputTokens: 3, TokenGate: gate})
	c := e.openai("")
	resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "demo", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Background: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "queued" || len(resp.Output) != 0 || !resp.Background {
		t.Fatalf("background answer = %s %v %v", resp.Status, resp.Output, resp.Background)
	}
	eventually(t, "the background job running", func() bool { return e.sim.Stats().Running == 1 })
	got, err := c.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "queued" {
		t.Fatalf("get while running = %v, %v", got, err)
	}
	cancelled, err := c.Responses.Cancel(context.Background(), resp.ID)
	if err != nil || cancelled.Status != "cancelled" || cancelled.ID != resp.ID {
		t.Fatalf("cancel = %v, %v", cancelled, err)
	}
	st := e.sim.Stats()
	if st.Cancelled != 1 || st.Running != 0 || st.Completed != 0 || st.Aborted != 0 {
		t.Errorf("stats after cancel = %+v", st)
	}
	got, err = c.Responses.Get(context.Background(), resp.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "cancelled" {
		t.Fatalf("get after cancel = %v, %v", got, err)
	}
	// Unknown ids: 404 for cancel as for get.
	code, _, body := e.post("/v1/responses/resp_nope/cancel", "")
	if code != http.StatusNotFound || string(body) != `{"error":{"message":"Response with id 'resp_nope' not found.","type":"invalid_request_error","param":"response_id","code":404}}` {
		t.Errorf("cancel unknown: %d %s", code, body)
	}
}

func TestResponsesBackgroundCompletesWithoutClient(t *testing.T) {
	e := newEnv(t, Config{OutputTokens: 2})
	code, _, body := e.post("/v1/responses", `{"input":"hi","background":true,"request_id":"resp_bg"}`)
	if code != http.StatusOK || !strings.Contains(string(body), `"status":"queued"`) {
		t.Fatalf("%d %s", code, body)
	}
	eventually(t, "the background response completing", func() bool {
		_, _, b := e.get("/v1/responses/resp_bg")
		return strings.Contains(string(b), `"status":"completed"`)
	})
	// A background stream is replayed from its event log.
	code, _, body = e.post("/v1/responses", `{"input":"hi","background":true,"stream":true,"request_id":"resp_bgs"}`)
	if code != http.StatusOK || !strings.HasSuffix(string(body), "\"type\":\"response.completed\"}\n\n") {
		t.Fatalf("background stream: %d %s", code, body)
	}
	// Events 0..9: created, in_progress, item added, part added, two
	// deltas, text done, part done, item done, completed.
	code, _, replay := e.get("/v1/responses/resp_bgs?stream=true&starting_after=8")
	if code != http.StatusOK || !strings.HasPrefix(string(replay), "event: response.completed\n") {
		t.Errorf("replay after 8: %d %s", code, replay)
	}
}

func TestResponsesErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		body    string
		status  int
		typ     string
		param   any
		message string // exact when set
	}{
		{"unknown model", Config{}, `{"model":"x","input":"hi"}`, 404, "NotFoundError", "model", "The model `x` does not exist."},
		{"missing input", Config{}, `{"model":"demo"}`, 400, "Bad Request", "body.input", ""},
		{"input a number", Config{}, `{"input":3}`, 400, "Bad Request", "body.input", ""},
		{"item without role", Config{}, `{"input":[{"content":"hi"}]}`, 400, "Bad Request", "body.input.0.role", ""},
		{"bad item type", Config{}, `{"input":[{"type":"weird"}]}`, 400, "Bad Request", "body.input.0", ""},
		{"max_output_tokens a string", Config{}, `{"input":"hi","max_output_tokens":"x"}`, 400, "Bad Request", "body.max_output_tokens", ""},
		{"background without store", Config{}, `{"input":"hi","background":true,"store":false}`, 400, "Bad Request", "body", ""},
		{"background without a store", Config{NoResponsesStore: true}, `{"input":"hi","background":true}`, 400, "invalid_request_error", "background", ""},
		{"unknown previous response", Config{}, `{"input":"hi","previous_response_id":"resp_x"}`, 404, "invalid_request_error", "response_id",
			"Response with id 'resp_x' not found."},
		{"max_output_tokens above max_model_len", Config{MaxModelLen: 100}, `{"input":"hi","max_output_tokens":101}`, 400, "BadRequestError", "max_output_tokens",
			"max_output_tokens=101 cannot be greater than max_model_len=max_total_tokens=100. Please request fewer output tokens. (parameter=max_output_tokens, value=101)"},
		{"prompt plus output too long", Config{MaxModelLen: 10}, `{"input":"hi","max_output_tokens":5}`, 400, "BadRequestError", "input_tokens",
			"This model's maximum context length is 10 tokens. However, you requested 5 output tokens and your prompt contains at least 6 input tokens, " +
				"for a total of at least 11 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=6)"},
		{"prompt fills the context", Config{MaxModelLen: chatHiTokens}, `{"input":"hi"}`, 400, "invalid_request_error", "input",
			"The engine prompt length 8 exceeds the max_model_len 8. Please reduce prompt."},
		{"zero max_output_tokens", Config{}, `{"input":"hi","max_output_tokens":0}`, 400, "BadRequestError", "max_tokens",
			"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"},
		{"fail status", Config{FailStatus: 500}, `{"input":"hi"}`, 500, "InternalServerError", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			code, _, body := e.post("/v1/responses", tc.body)
			checkOpenAIError(t, code, body, tc.status, tc.typ, tc.param, tc.message)
			if st := e.sim.Stats(); st.Running != 0 || st.Completed != 0 || st.Rejected+st.Failed != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
	e := newEnv(t, Config{})
	code, _, body := e.do(context.Background(), http.MethodPost, "/v1/responses", `{"input":"hi"}`, "Content-Type", "text/plain")
	checkOpenAIError(t, code, body, 400, "Bad Request", nil, "Unsupported Media Type: Only 'application/json' is allowed")
	code, _, body = e.do(context.Background(), http.MethodDelete, "/v1/responses/resp_x", "")
	checkOpenAIError(t, code, body, 405, "Method Not Allowed", nil, "Method Not Allowed")
	code, _, body = e.get("/v1/responses/resp_x?stream=maybe")
	checkOpenAIError(t, code, body, 400, "Bad Request", "query.stream", "")
}

// checkOpenAIError checks vLLM's OpenAI error envelope.
func checkOpenAIError(t *testing.T, code int, body []byte, status int, typ string, param any, message string) {
	t.Helper()
	if code != status {
		t.Fatalf("status %d, want %d: %s", code, status, body)
	}
	m := decode[map[string]any](t, string(body))
	info, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object: %s", body)
	}
	if info["type"] != typ || info["param"] != param || info["code"] != float64(status) {
		t.Errorf("type/param/code = %v %v %v, want %v %v %d", info["type"], info["param"], info["code"], typ, param, status)
	}
	if message != "" && info["message"] != message {
		t.Errorf("message = %q\nwant      %q", info["message"], message)
	}
}
