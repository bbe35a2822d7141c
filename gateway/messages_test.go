package gateway

// Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens)
// through the gateway, against the simulator and hand-written backends,
// over real HTTP, with Anthropic's official SDK.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

func isMessagesPath(p string) bool { return strings.HasPrefix(p, "/v1/messages") }

// anthropicSDK is Anthropic's client pointed at base, without retries.
func anthropicSDK(base string, hc *http.Client) anthropic.Client {
	return anthropic.NewClient(option.WithBaseURL(base+"/"), option.WithHTTPClient(hc),
		option.WithMaxRetries(0), option.WithAPIKey("k"))
}

func hiParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     "m",
		MaxTokens: 50,
		System:    []anthropic.TextBlockParam{{Text: "be brief"}, {Text: " and kind"}},
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("hi there")),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("Hello!")),
			anthropic.NewUserMessage(anthropic.NewTextBlock("two"), anthropic.NewTextBlock(" parts")),
		},
	}
}

// TestE2EMessagesSDK: a message, a streamed message and count_tokens
// through maitred with Anthropic's SDK. count_tokens is answered by the
// gateway itself, with the count vLLM (the simulator) reports as the
// message's input tokens; the messages reach the backend as sent.
func TestE2EMessagesSDK(t *testing.T) {
	e := startPooling(t, sim.Config{OutputTokens: 3}, nil)
	c := anthropicSDK(e.gw.URL, e.gw.client)
	p := hiParams()

	msg, err := c.Messages.New(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || len(msg.Content) != 1 || msg.Content[0].Text != sim.GeneratedText(0, 3) ||
		msg.StopReason != anthropic.StopReasonEndTurn || msg.Usage.OutputTokens != 3 || msg.Usage.InputTokens == 0 {
		t.Errorf("message through maitred: %+v", msg)
	}

	stream := c.Messages.NewStreaming(t.Context(), p)
	var acc anthropic.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v (events %v)", err, types)
	}
	stream.Close()
	if len(types) == 0 || types[len(types)-1] != "message_stop" || acc.Content[0].Text != sim.GeneratedText(0, 3) ||
		acc.Usage.InputTokens != msg.Usage.InputTokens {
		t.Errorf("stream through maitred: events %v, %+v", types, acc)
	}

	n, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model: p.Model, Messages: p.Messages, System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != msg.Usage.InputTokens {
		t.Errorf("count_tokens through maitred = %d, the backend's input_tokens = %d", n.InputTokens, msg.Usage.InputTokens)
	}
	got := clientRequests(e.sim, isMessagesPath)
	if len(got) != 2 || got[0].Path != "/v1/messages" || got[1].Path != "/v1/messages" {
		t.Fatalf("the simulator received %d Messages requests (want the 2 messages; count_tokens answered locally)", len(got))
	}
	var sent map[string]any
	if err := json.Unmarshal(got[0].Body, &sent); err != nil || sent["max_tokens"] != float64(50) {
		t.Errorf("the backend received %s", got[0].Body)
	}
	// A count the gateway cannot make exact (an image) goes to a backend,
	// whose answer passes through (the simulator cannot count images
	// either: its own error, in vLLM's class-name type).
	img := `{"type":"image","source":{"type":"url","url":"http://x/y.png"}}`
	res := e.gw.post(t, "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":[`+img+`,{"type":"text","text":"hi"}]}]}`)
	if body := readBodyT(t, res); !strings.Contains(body, `"BadRequestError"`) && !strings.Contains(body, `"input_tokens"`) {
		t.Errorf("uncounted count_tokens: %d %s: not the backend's answer", res.StatusCode, body)
	}
	if got := clientRequests(e.sim, isMessagesPath); len(got) != 3 || got[2].Path != "/v1/messages/count_tokens" {
		t.Errorf("an uncounted count_tokens did not reach the backend")
	}
}

// anthropicEnv is Anthropic's error body.
type anthropicEnv struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestMessagesBadInputsNeverReachBackend: bad Messages and count_tokens
// requests get Anthropic's envelope from the gateway, and the backend
// receives nothing; an over-long prompt is Anthropic's SDK's typed error.
func TestMessagesBadInputsNeverReachBackend(t *testing.T) {
	e := startPooling(t, sim.Config{MaxModelLen: 32}, func(c *config.Config) { c.MaxBodyBytes = 8192 })
	long := strings.TrimSpace(strings.Repeat("word ", 40))
	hi := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, path, ctype, body string
		status                  int
		typ, msg                string
	}{
		{"not json", "/v1/messages", "", `{"model":"m",`, 400, "invalid_request_error", "not valid JSON"},
		{"array body", "/v1/messages", "", `[1]`, 400, "invalid_request_error", ""},
		{"media type", "/v1/messages", "text/plain", `{"model":"m","max_tokens":5,` + hi + `}`, 400, "invalid_request_error", "Content-Type"},
		{"too large", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("y", 9000) + `"}]}`, 413, "request_too_large", ""},
		{"no model", "/v1/messages", "", `{"max_tokens":5,` + hi + `}`, 400, "invalid_request_error", "model"},
		{"model number", "/v1/messages", "", `{"model":5,"max_tokens":5,` + hi + `}`, 400, "invalid_request_error", "model"},
		{"unknown model", "/v1/messages", "", `{"model":"nope","max_tokens":5,` + hi + `}`, 404, "not_found_error", `"nope" does not exist`},
		{"no max_tokens", "/v1/messages", "", `{"model":"m",` + hi + `}`, 400, "invalid_request_error", "max_tokens is required"},
		{"max_tokens string", "/v1/messages", "", `{"model":"m","max_tokens":"5",` + hi + `}`, 400, "invalid_request_error", "max_tokens must be an integer"},
		{"max_tokens zero", "/v1/messages", "", `{"model":"m","max_tokens":0,` + hi + `}`, 400, "invalid_request_error", "at least 1"},
		{"stream string", "/v1/messages", "", `{"model":"m","max_tokens":5,"stream":"yes",` + hi + `}`, 400, "invalid_request_error", "stream"},
		{"no messages", "/v1/messages", "", `{"model":"m","max_tokens":5}`, 400, "invalid_request_error", "messages"},
		{"messages object", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":{}}`, 400, "invalid_request_error", "messages"},
		{"bad role", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"hi"}]}`, 400, "invalid_request_error", "messages[0].role"},
		{"no content", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user"}]}`, 400, "invalid_request_error", "messages[0].content"},
		{"content number", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error", "messages[0].content"},
		{"block type", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"video"}]}]}`, 400, "invalid_request_error", "messages[0].content[0].type"},
		{"block text number", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, 400, "invalid_request_error", "messages[0].content[0].text"},
		{"system number", "/v1/messages", "", `{"model":"m","max_tokens":5,"system":5,` + hi + `}`, 400, "invalid_request_error", "system"},
		{"system block", "/v1/messages", "", `{"model":"m","max_tokens":5,"system":["x"],` + hi + `}`, 400, "invalid_request_error", "system[0]"},
		{"over-long", "/v1/messages", "", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "invalid_request_error", "maximum context length is 32 tokens"},
		{"output over context", "/v1/messages", "", `{"model":"m","max_tokens":40,` + hi + `}`, 400, "invalid_request_error", "maximum context length is 32 tokens"},
		{"count not json", "/v1/messages/count_tokens", "", `{"model":"m",`, 400, "invalid_request_error", "not valid JSON"},
		{"count unknown model", "/v1/messages/count_tokens", "", `{"model":"nope",` + hi + `}`, 404, "not_found_error", ""},
		{"count bad role", "/v1/messages/count_tokens", "", `{"model":"m","messages":[{"role":"tool","content":"hi"}]}`, 400, "invalid_request_error", "messages[0].role"},
		{"count over-long", "/v1/messages/count_tokens", "", `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "invalid_request_error", "maximum context length is 32 tokens"},
	}
	for _, tc := range cases {
		ctype := tc.ctype
		if ctype == "" {
			ctype = "application/json"
		}
		res := e.gw.post(t, tc.path, tc.body, "Content-Type", ctype)
		body := readBodyT(t, res)
		var env anthropicEnv
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Type != "error" || env.Error.Type == "" {
			t.Errorf("%s: %d %s: not Anthropic's envelope", tc.name, res.StatusCode, body)
			continue
		}
		if res.StatusCode != tc.status || env.Error.Type != tc.typ || !strings.Contains(env.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, res.StatusCode, body)
		}
	}
	// The over-long prompt as Anthropic's SDK sees it: its typed error.
	c := anthropicSDK(e.gw.URL, e.gw.client)
	_, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(long))}})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %T %v, want *anthropic.Error", err, err)
	}
	if apiErr.StatusCode != 400 || string(apiErr.Type()) != "invalid_request_error" ||
		!strings.Contains(apiErr.Error(), "maximum context length is 32 tokens") {
		t.Errorf("typed error: %d %q %v", apiErr.StatusCode, apiErr.Type(), apiErr)
	}
	if got := clientRequests(e.sim, isMessagesPath); len(got) != 0 {
		t.Errorf("the simulator received %d Messages requests; the gateway should have refused them all (first: %s %s)", len(got), got[0].Path, got[0].Body)
	}
}

// TestMessagesStreamEndsAtMessageStop: an Anthropic stream ends with
// event: message_stop, not [DONE]. A complete stream passes through byte
// for byte with nothing added; a stream the backend cuts before
// message_stop ends with one error event in Anthropic's shape, no [DONE]
// and no message_stop, and an abortive end; Anthropic's SDK raises it.
func TestMessagesStreamEndsAtMessageStop(t *testing.T) {
	const head = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"x","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":0}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"Lorem"},"index":0}` + "\n\n"
	const tail = "event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":8,"output_tokens":1}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	cut := make(chan bool, 4)
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		io.WriteString(w, head)
		w.(http.Flusher).Flush()
		if <-cut {
			panic(http.ErrAbortHandler) // the backend goes away mid-stream
		}
		io.WriteString(w, tail)
	})
	tg := startGateway(t, nil, fb.URL)
	req := `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

	cut <- false
	res := tg.post(t, "/v1/messages", req)
	if body := readBodyT(t, res); res.StatusCode != 200 || body != head+tail {
		t.Errorf("complete stream: %d\n%s\nwant\n%s", res.StatusCode, body, head+tail)
	}

	cut <- true
	res = tg.post(t, "/v1/messages", req)
	body := readCutBody(t, res)
	rest, ok := strings.CutPrefix(body, head)
	if !ok || strings.Contains(body, "[DONE]") || !strings.HasPrefix(rest, "event: error\ndata: ") || !strings.HasSuffix(rest, "\n\n") ||
		strings.Count(rest, "\n\n") != 1 {
		t.Fatalf("broken stream ends with:\n%q", rest)
	}
	var env anthropicEnv
	if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(rest, "event: error\ndata: "), "\n\n")), &env); err != nil ||
		env.Type != "error" || env.Error.Type != "api_error" || !strings.Contains(env.Error.Message, "truncated") {
		t.Errorf("error event: %q (%v)", rest, err)
	}

	cut <- true
	c := anthropicSDK(tg.URL, tg.client)
	stream := c.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 5,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("the SDK's stream error = %v, want the gateway's error event", err)
	}
	stream.Close()
}

// TestMessagesUnreadyIsOverloaded: the gateway's own 5xx and queue answers
// in Anthropic's envelope: a model with no ready backend is
// overloaded_error (503, with Retry-After), not OpenAI's envelope.
func TestMessagesUnreadyIsOverloaded(t *testing.T) {
	fb := newFakeBackend(t, "m", func(w http.ResponseWriter, r *http.Request) {})
	fb.setHealth(http.StatusServiceUnavailable)
	tg := startGateway(t, nil, fb.URL)
	res := tg.post(t, "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	body := readBodyT(t, res)
	var env anthropicEnv
	if err := json.Unmarshal([]byte(body), &env); err != nil || res.StatusCode != 503 || env.Type != "error" || env.Error.Type != "overloaded_error" ||
		res.Header.Get("Retry-After") == "" {
		t.Errorf("%d (Retry-After %q) %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if reqs, _ := fb.requests(); len(reqs) != 0 {
		t.Errorf("the unready backend received %d requests", len(reqs))
	}
}

// TestMessagesQueueAnswers: a Messages request waits in its model's queue
// like chat; the queue's answers (full, timed out) come in Anthropic's
// envelope as overloaded_error, with their status and Retry-After; the
// request that held the slot completes once it is freed.
func TestMessagesQueueAnswers(t *testing.T) {
	gate := make(chan struct{})
	e := startPooling(t, sim.Config{OutputTokens: 1, TokenGate: gate}, func(c *config.Config) {
		c.Models[0].Backends[0].MaxInFlight = 1
		c.Models[0].QueueSize = 1
		// Long enough that the waiting request is still queued when the
		// third arrives, even on a loaded machine.
		c.Models[0].QueueTimeout = config.Duration(3 * time.Second)
	})
	pool := e.gw.live().byName["m"].pool
	type answer struct {
		code int
		body string
		hdr  http.Header
	}
	send := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+"/v1/messages",
				strings.NewReader(`{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Content-Type", "application/json")
			res, err := e.gw.client.Do(req)
			if err != nil {
				ch <- answer{}
				return
			}
			ch <- answer{res.StatusCode, readBodyT(t, res), res.Header}
		}()
		return ch
	}
	first := send()
	eventually(t, "the first request to run", func() bool { return e.sim.Stats().Running == 1 })
	waiting := send()
	eventually(t, "one waiting", func() bool { return pool.Advice().Depth == 1 })
	check := func(name string, a answer, status int) {
		t.Helper()
		var env anthropicEnv
		if err := json.Unmarshal([]byte(a.body), &env); err != nil || a.code != status || env.Type != "error" ||
			env.Error.Type != "overloaded_error" || a.hdr.Get("Retry-After") == "" {
			t.Errorf("%s: %d Retry-After=%q %s", name, a.code, a.hdr.Get("Retry-After"), a.body)
		}
	}
	check("queue full", <-send(), 429)
	check("queue timeout", <-waiting, 503)
	gate <- struct{}{}
	if a := <-first; a.code != 200 || !strings.HasSuffix(a.body, "event: message_stop\n"+`data: {"type":"message_stop"}`+"\n\n") {
		t.Fatalf("first: %d %s", a.code, a.body)
	}
	if n := len(clientRequests(e.sim, isMessagesPath)); n != 1 {
		t.Errorf("the simulator received %d Messages requests; only the first may run", n)
	}
}

// TestMessagesPrefixAffinity: with prefix affinity on, the turns of a
// Messages conversation are routed by the prefix of the chat conversation
// it converts to, so they stay on one backend, as chat's do.
func TestMessagesPrefixAffinity(t *testing.T) {
	tok := loadTok(t, "demo")
	sims, urls := startSims(t, 3, tok)
	tg := startGatewayToks(t, tok, func(c *config.Config) { c.Models[0].PrefixAffinityTokens = 32 }, urls...)
	system := "You are the support assistant of a large bank. Answer politely, cite the policy section, never reveal account data, and keep answers under five sentences."
	same, total := 0, 0
	for conv := range 8 {
		counts := map[int]int{}
		msgs := ""
		for turn := range 5 {
			if turn > 0 {
				msgs += ","
			}
			msgs += fmt.Sprintf(`{"role":"user","content":"Question %d?"}`, turn)
			before := make([]int, len(sims))
			for i, s := range sims {
				before[i] = len(clientRequests(s, isMessagesPath))
			}
			res := tg.post(t, "/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":4,"system":"%s Conversation %d.","messages":[%s]}`, system, conv, msgs))
			if body := readBodyT(t, res); res.StatusCode != 200 {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			for i, s := range sims {
				if len(clientRequests(s, isMessagesPath)) > before[i] {
					counts[i]++
				}
			}
			msgs += fmt.Sprintf(`,{"role":"assistant","content":"Answer %d."}`, turn)
		}
		best := 0
		for _, n := range counts {
			total += n
			best = max(best, n)
		}
		same += best
	}
	if frac := float64(same) / float64(total); frac < 0.9 {
		t.Errorf("affinity kept only %.0f%% of Messages turns on their conversation's backend", frac*100)
	}
}
