package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// The scanner finds the top-level usage of a JSON answer fed in pieces of
// any size, and nothing else.
func TestUsageScanner(t *testing.T) {
	big := strings.Repeat(`{"logprob":-0.5,"usage":1},`, 2000)
	for _, tc := range []struct {
		name  string
		body  string
		want  int64
		known bool
	}{
		{"chat", `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":null}}`, 20, true},
		{"before large fields", `{"usage":{"prompt_tokens":3,"completion_tokens":4},"prompt_logprobs":[` + big + `{}]}`, 7, true},
		{"nested and quoted usage ignored", `{"choices":[{"usage":{"prompt_tokens":99}}],"note":"\"usage\": {\"prompt_tokens\": 98}","usage":{"prompt_tokens":1,"completion_tokens":2}}`, 3, true},
		{"a value named usage", `{"object":"usage","usage":{"input_tokens":5,"output_tokens":6}}`, 11, true},
		{"embeddings", `{"data":[{"embedding":[0.1,0.2]}],"usage":{"prompt_tokens":9,"total_tokens":9,"completion_tokens":0}}`, 9, true},
		{"total only", `{"results":[],"usage":{"total_tokens":14}}`, 14, true},
		{"last member", `{"a":1,"usage":{"prompt_tokens":2,"completion_tokens":2}}`, 4, true},
		{"null", `{"usage":null}`, 0, false},
		{"none", `{"text":"hello"}`, 0, false},
		{"audio duration", `{"text":"hi","usage":{"type":"duration","seconds":3}}`, 0, false},
		{"oversized", `{"usage":{"prompt_tokens":1,"x":"` + strings.Repeat("a", maxUsageValue) + `"}}`, 0, false},
		{"not JSON", `hello usage`, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{1, 3, 7, len(tc.body)} {
				var s usageScanner
				for b := []byte(tc.body); len(b) > 0; {
					n := min(step, len(b))
					s.feed(b[:n])
					b = b[n:]
				}
				if got, known := s.used(); got != tc.want || known != tc.known {
					t.Fatalf("fed %d bytes at a time: %d %v, want %d %v", step, got, known, tc.want, tc.known)
				}
				if len(s.val) > maxUsageValue {
					t.Fatalf("held %d bytes", len(s.val))
				}
			}
		})
	}
}

// usageRig is the simulator counting prompts with qwen3 behind a gateway
// that knows the same tokenizer, its access log readable.
type usageRig struct {
	sim  *sim.Server
	gw   *testGateway
	logs *observer.ObservedLogs
}

func startUsageRig(t *testing.T, sc sim.Config) *usageRig {
	t.Helper()
	tok := loadTok(t, "qwen3")
	sc.Model, sc.Tokenizer, sc.MaxModelLen = "m", sim.ModelTokenizer(tok), 4096
	s := sim.New(sc, nil)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { s.Close(); srv.Close() })
	core, logs := observer.New(zap.InfoLevel)
	return &usageRig{sim: s, gw: startGatewayFull(t, tok, extras{log: zap.New(core)}, nil, srv.URL), logs: logs}
}

// post sends a request with a request id of its own.
func (r *usageRig) post(t *testing.T, path, body string) (*http.Response, string) {
	t.Helper()
	id := newID()
	return r.gw.post(t, path, body, "X-Request-Id", id), id
}

// line awaits the access-log line of request id (written as its handler
// returns, which can be just after the client read the end).
func (r *usageRig) line(t *testing.T, id string) map[string]any {
	t.Helper()
	var line map[string]any
	eventually(t, "the access line of "+id, func() bool {
		for _, e := range r.logs.FilterMessage("request").All() {
			if f := e.ContextMap(); f["request_id"] == id {
				line = f
				return true
			}
		}
		return false
	})
	return line
}

// sseData is the data of every event of a stream, in order.
func sseData(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, v)
		}
	}
	return out
}

// usageOf reads a usage object's prompt + completion (or input + output).
func usageOf(t *testing.T, raw json.RawMessage) int64 {
	t.Helper()
	var u struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		InputTokens      int64 `json:"input_tokens"`
		OutputTokens     int64 `json:"output_tokens"`
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("usage %s: %v", raw, err)
	}
	return u.PromptTokens + u.CompletionTokens + u.InputTokens + u.OutputTokens
}

// The meter reports each family's real usage through the gateway and the
// simulator: the answer's own usage when it has one (checked against the
// answer the client got), and for a stream without one the door's prompt
// count plus the streamed text counted with the model's tokenizer.
func TestUsageMeterFamilies(t *testing.T) {
	const n = 6 // tokens generated: max_tokens below the simulator's natural 16
	r := startUsageRig(t, sim.Config{})
	tok := loadTok(t, "qwen3")
	counted := func(text string) int64 {
		c, _ := tok.Encoder().Count(text, false, 0)
		return int64(c)
	}
	chat := func(extra string) string {
		return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Say something"}],"max_tokens":%d%s}`, n, extra)
	}
	completion := func(extra string) string {
		return fmt.Sprintf(`{"model":"m","prompt":"Once upon a time","max_tokens":%d%s}`, n, extra)
	}
	// answerUsage reads the usage the client was sent in a JSON answer.
	answerUsage := func(t *testing.T, body string, line map[string]any) int64 {
		var v struct{ Usage json.RawMessage }
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.Usage == nil {
			t.Fatalf("answer without usage: %s", body)
		}
		return usageOf(t, v.Usage)
	}
	// lastStreamUsage reads the last usage a stream's events carried.
	lastStreamUsage := func(t *testing.T, body string, line map[string]any) int64 {
		var last json.RawMessage
		for _, d := range sseData(t, body) {
			var v struct {
				Usage    json.RawMessage
				Response struct{ Usage json.RawMessage }
			}
			if json.Unmarshal([]byte(d), &v) != nil {
				continue
			}
			if len(v.Usage) > 0 && string(v.Usage) != "null" {
				last = v.Usage
			}
			if len(v.Response.Usage) > 0 && string(v.Response.Usage) != "null" {
				last = v.Response.Usage
			}
		}
		if last == nil {
			t.Fatalf("stream without usage: %s", body)
		}
		return usageOf(t, last)
	}
	// doorPlusText is the door's prompt count plus the generated text,
	// counted with the tokenizer.
	doorPlusText := func(t *testing.T, body string, line map[string]any) int64 {
		p, ok := line["prompt_tokens"].(int64)
		if !ok || p == 0 {
			t.Fatalf("the door did not count the prompt: %v", line)
		}
		if !strings.Contains(body, `"finish_reason":"length"`) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
			t.Fatalf("the stream did not carry the whole answer (max_tokens reached): %s", body)
		}
		return p + counted(sim.GeneratedText(0, n))
	}
	// anthropicUsage: message_start's input tokens, message_delta's output.
	anthropicUsage := func(t *testing.T, body string, line map[string]any) int64 {
		var in, out int64
		for _, d := range sseData(t, body) {
			var v struct {
				Type    string
				Message struct {
					Usage struct {
						InputTokens int64 `json:"input_tokens"`
					}
				}
				Usage struct {
					OutputTokens int64 `json:"output_tokens"`
				}
			}
			if json.Unmarshal([]byte(d), &v) != nil {
				continue
			}
			switch v.Type {
			case "message_start":
				in = v.Message.Usage.InputTokens
			case "message_delta":
				out = v.Usage.OutputTokens
			}
		}
		if in == 0 || out != n {
			t.Fatalf("stream usage in %d out %d: %s", in, out, body)
		}
		return in + out
	}
	for _, tc := range []struct {
		name, path, body string
		from             string
		want             func(t *testing.T, body string, line map[string]any) int64
	}{
		{"chat", "/v1/chat/completions", chat(""), "usage", answerUsage},
		{"chat stream include_usage", "/v1/chat/completions", chat(`,"stream":true,"stream_options":{"include_usage":true}`), "usage", lastStreamUsage},
		{"chat stream continuous usage", "/v1/chat/completions", chat(`,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`), "usage", lastStreamUsage},
		{"chat stream without usage", "/v1/chat/completions", chat(`,"stream":true`), "counted", doorPlusText},
		{"completions", "/v1/completions", completion(""), "usage", answerUsage},
		{"completions stream include_usage", "/v1/completions", completion(`,"stream":true,"stream_options":{"include_usage":true}`), "usage", lastStreamUsage},
		{"completions stream without usage", "/v1/completions", completion(`,"stream":true`), "counted", doorPlusText},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":["one two three","four"]}`, "usage", answerUsage},
		{"responses", "/v1/responses", fmt.Sprintf(`{"model":"m","input":"Say something","max_output_tokens":%d}`, n), "usage", answerUsage},
		{"responses stream", "/v1/responses", fmt.Sprintf(`{"model":"m","input":"Say something","max_output_tokens":%d,"stream":true}`, n), "usage", lastStreamUsage},
		{"messages", "/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":"Say something"}]}`, n), "usage", answerUsage},
		{"messages stream", "/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":"Say something"}]}`, n), "usage", anthropicUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, id := r.post(t, tc.path, tc.body)
			body := readBodyT(t, res)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			line := r.line(t, id)
			want := tc.want(t, body, line)
			if got := line["used_tokens"]; got != want || line["used_from"] != tc.from {
				t.Fatalf("used_tokens %v from %v, want %d from %s (line %v)", got, line["used_from"], want, tc.from, line)
			}
		})
	}
}

// A stream the backend cuts is charged for what was streamed before the
// cut (the usage chunk it asked for never came); a backend's refusal
// (4xx) for nothing.
func TestUsageMeterCutAndRefused(t *testing.T) {
	tok := loadTok(t, "qwen3")
	t.Run("cut", func(t *testing.T) {
		// Cut after the warm-up, which streams too: a backend that cuts
		// every stream never becomes ready.
		r := startUsageRig(t, sim.Config{})
		r.sim.Update(func(c *sim.Config) { c.CutAfterChunks = 3 })
		res, id := r.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Say something"}],"max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`)
		body := readCutBody(t, res)
		var text strings.Builder
		for _, d := range sseData(t, body) {
			var v struct {
				Choices []struct{ Delta struct{ Content string } }
			}
			if json.Unmarshal([]byte(d), &v) == nil && len(v.Choices) > 0 {
				text.WriteString(v.Choices[0].Delta.Content)
			}
		}
		line := r.line(t, id)
		if line["stream_error"] != codeDisconnected {
			t.Fatalf("the stream was not cut: %v\n%s", line, body)
		}
		c, _ := tok.Encoder().Count(text.String(), false, 0)
		want := line["prompt_tokens"].(int64) + int64(c)
		if text.Len() == 0 || line["used_tokens"] != want || line["used_from"] != "counted" {
			t.Fatalf("used_tokens %v from %v, want %d (prompt + %q)", line["used_tokens"], line["used_from"], want, text.String())
		}
	})
	t.Run("refused", func(t *testing.T) {
		r := startUsageRig(t, sim.Config{})
		r.sim.Update(func(c *sim.Config) { c.FailStatus = 400 }) // after the warm-up
		res, id := r.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Say something"}],"max_tokens":10}`)
		if body := readBodyT(t, res); res.StatusCode != 400 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		if line := r.line(t, id); line["used_tokens"] != int64(0) {
			t.Fatalf("a refused request used %v", line["used_tokens"])
		}
	})
}

// A client that leaves a stream is charged for what it was sent: the
// prompt and at least the text it read, never more than the whole answer.
func TestUsageMeterClientLeaves(t *testing.T) {
	r := startUsageRig(t, sim.Config{OutputTokens: 400, ITL: time.Millisecond})
	tok := loadTok(t, "qwen3")
	res, id := r.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"Say something"}],"max_tokens":400,"stream":true}`)
	br := bufio.NewReader(res.Body)
	var text strings.Builder
	for events := 0; events < 5; {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(l), "data: "); ok {
			var v struct {
				Choices []struct{ Delta struct{ Content string } }
			}
			if json.Unmarshal([]byte(d), &v) == nil && len(v.Choices) > 0 {
				text.WriteString(v.Choices[0].Delta.Content)
				events++
			}
		}
	}
	res.Body.Close()
	line := r.line(t, id)
	p := line["prompt_tokens"].(int64)
	read, _ := tok.Encoder().Count(text.String(), false, 0)
	all, _ := tok.Encoder().Count(sim.GeneratedText(0, 400), false, 0)
	used, ok := line["used_tokens"].(int64)
	if !ok || used < p+int64(read) || used > p+int64(all) || line["used_from"] != "counted" {
		t.Fatalf("used_tokens %v, want between %d and %d (line %v)", line["used_tokens"], p+int64(read), p+int64(all), line)
	}
}

// BenchmarkUsageMeterStream meters a 256-token chat stream without a
// usage chunk (the costliest case: every delta read, the text counted at
// the end); ns/op is per stream.
func BenchmarkUsageMeterStream(b *testing.B) {
	tok, err := fixtureLoader.LoadDir(fixtures.ModelDir(b, "qwen3"), tokenize.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for i := range 256 {
		fmt.Fprintf(&sb, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`+"\n\n", sim.GeneratedText(0, i+1)[len(sim.GeneratedText(0, i)):])
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		m := usageMeter{status: 200, events: meterOpenAIEvent, tok: tok.Encoder(), prompt: 10, promptKnown: true}
		for p := stream; len(p) > 0; {
			n := min(512, len(p))
			m.observeStream(p[:n])
			p = p[n:]
		}
		if n, ok := m.Used(); !ok || n <= 10 {
			b.Fatal(n, ok)
		}
	}
}

// The scanner also finds a Responses answer's top-level "id" (the stored
// response's, recorded with its owner), never an item's, in pieces of any
// size, and keeps none longer than maxModelValue.
func TestUsageScannerResponseID(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"first", `{"id":"resp_1","output":[{"id":"msg_2"}],"usage":{"input_tokens":1}}`, "resp_1"},
		{"after items", `{"output":[{"id":"msg_2","content":[{"id":"x"}]}],"note":"\"id\":\"no\"","id":"resp_3"}`, "resp_3"},
		{"escaped", `{"id":"resp_\"4\u0041"}`, `resp_"4A`},
		{"not a string", `{"id":5,"model":"m"}`, ""},
		{"too long", `{"id":"` + strings.Repeat("r", maxModelValue) + `","usage":null}`, ""},
		{"none", `{"ids":"resp_5","i":"x","usage":null}`, ""},
	} {
		for _, step := range []int{1, 2, 5, len(tc.body)} {
			var s usageScanner
			s.modelDone = true
			for b := []byte(tc.body); len(b) > 0; {
				n := min(step, len(b))
				s.feed(b[:n])
				b = b[n:]
			}
			got := ""
			if s.idDone {
				got = modelValue(s.id)
			}
			if got != tc.want || len(s.id) > maxModelValue {
				t.Errorf("%s, fed %d bytes at a time: id %q (held %d bytes), want %q", tc.name, step, got, len(s.id), tc.want)
			}
		}
	}
}
