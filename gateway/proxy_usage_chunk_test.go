package gateway

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// fastChunks are stream chunks as vLLM writes them, and with nulls
// where the meter's struct reads a value: each must take the fast read
// (decodeOpenAIChunk), not encoding/json.
var fastChunks = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"content":"a \"quoted\"\nline \u00e9 \ud83d\ude00 é"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"reasoning_content":"think","reasoning":"think"},"logprobs":{"content":[{"token":"x","logprob":-0.5,"bytes":[120],"top_logprobs":[{"token":"y","logprob":-1.25e-3,"bytes":null}]}]},"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_1","type":"function","index":0,"function":{"name":"get_weather","arguments":"{\"city\": "}}]},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":null}}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"demo","choices":[],"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8}}`,
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"demo","choices":[{"index":0,"text":" once","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"demo","choices":[{"index":0,"text":"a","logprobs":null},{"index":1,"text":"b","logprobs":null}]}`,
	` { "model" : "m" , "choices" : [ { "delta" : { "content" : "spaced" } } ] } `,
	`null`,
	`{}`,
	`{"error":{"message":"The backend stream broke","type":"server_error","code":"backend_disconnected"}}`,
	`{"model":null,"usage":null,"choices":[null,{"text":null,"delta":null},{"delta":{"content":null,"reasoning_content":null,"reasoning":null,"tool_calls":null}},{"delta":{"tool_calls":[null,{"function":null},{"function":{"name":null,"arguments":"x"}}]}}]}`,
}

// chunkSeeds are chunks of every other shape: encoding/json's answer
// stands for each (the fast read agrees or leaves it to encoding/json).
var chunkSeeds = []string{
	`{"choices":[{"delta":{"Content":"folded"}}]}`,
	`{"Choices":[{"delta":{"content":"folded"}}]}`,
	`{"choices":[{"delta":{"content":"one","content":"two"}}]}`,
	`{"choices":[{"delta":{"content":"a"}}],"choices":[{"text":"b"}]}`,
	`{"model":"a","model":"b","choices":[]}`,
	`{"model":5,"choices":[{"delta":{"content":5}}]}`,
	`{"model":"m","choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":"1"}}`,
	`{"model":"m","choices":[{"delta":{"content":"x"}}],"usage":[1]}`,
	`{"model":"m","choices":{"delta":{}}}`,
	`{"choices":[{"delta":{"content":"\ud83d"}}]}`,
	`{"choices":[{"delta":{"content":"\ud83d\u0041"}}]}`,
	`{"choices":[{"delta":{"content":"\udc00\ud83d"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8 \xe2\x82\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"ctl \x01\"}}]}",
	`{"choices":[{"delta":{"content":"bad \x escape"}}]}`,
	`{"choices":[{"delta":{"content":"\u12"}}]}`,
	`{"choices":[{"delta":{"con\u0074ent":"escaped name"}}]}`,
	`{"choices":[{"delta":{"contént":"non-ascii name"}}]}`,
	`{"choices":[{"delta":{"content":"x"}}]} trailing`,
	`{"choices":[{"delta":{"content":"x"}}]`,
	`{"choices":[{"delta":{"content":"x"},}]}`,
	`{"choices":[{"delta":{"content":"x"}}],"n":01}`,
	`{"choices":[{"delta":{"content":"x"}}],"n":1.}`,
	`{"choices":[{"delta":{"content":"x"}}],"n":-1.5e+3,"t":true,"f":false}`,
	`{"choices":[{"delta":{"content":"x"}}],"deep":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`[{"choices":[]}]`,
	`"text"`,
	`{"choices":[` + strings.Repeat(`{"text":"t","delta":{"content":"c"}},`, 5) + `{"text":"last"}]}`,
	`{"choices":[{"delta":{"tool_calls":[` + strings.Repeat(`{"function":{"name":"n","arguments":"a"}},`, 8) + `{}]}}]}`,
	`{"choices":[{"delta":{"content":"a"},"text":"text after delta"}]}`,
	`{"model":{"nested":"object"},"choices":[]}`,
	`{"model":" spaced ","choices":[]}`,
	`{"model":"esc\"aped","choices":[]}`,
	``,
	`   `,
}

// meterEffects is what metering events did to a fresh meter: the text
// it holds to count, the usage reported, the model and the Responses id
// it heard.
type meterEffects struct {
	text                 string
	reported             usageReport
	reportedP, reportedC bool
	model                string
	id                   string
	idSent               bool
}

// meterEvents meters the events in order with read, on a fresh meter.
func meterEvents(read func(*usageMeter, []byte), events ...[]byte) meterEffects {
	var id string
	m := &usageMeter{status: 200, onID: func(s string) { id = s }}
	for _, data := range events {
		read(m, data)
	}
	return meterEffects{string(m.text), m.reported, m.reportedP, m.reportedC, m.model, id, m.idSent}
}

// meterDiff says how the meter after fast differs from the meter after
// ref (the encoding/json read), for the same events; "" when alike.
func meterDiff(fast, ref func(*usageMeter, []byte), events ...[]byte) string {
	got := meterEvents(fast, events...)
	want := meterEvents(ref, events...)
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("metered %+v, encoding/json %+v", got, want)
	}
	return ""
}

func meterChunk(read func(*usageMeter, []byte), data []byte) meterEffects {
	return meterEvents(read, data)
}

func chunkDiff(data []byte) string {
	return meterDiff(meterOpenAIEvent, meterOpenAIEventJSON, data)
}

// TestOpenAIChunkMatchesEncodingJSON: the meter's fast read of a stream
// chunk takes what encoding/json takes (its text, usage and model) from
// every chunk, and vLLM's chunks take the fast read, allocating nothing.
func TestOpenAIChunkMatchesEncodingJSON(t *testing.T) {
	for _, s := range append(append([]string{}, fastChunks...), chunkSeeds...) {
		if d := chunkDiff([]byte(s)); d != "" {
			t.Errorf("%s: %s", s, d)
		}
	}
	var c meteredEvent
	for _, s := range fastChunks {
		if !decodeOpenAIChunk([]byte(s), &c) {
			t.Errorf("%s: left to encoding/json", s)
		}
	}
	if got := meterChunk(meterOpenAIEvent, []byte(fastChunks[2])).text; got != "a \"quoted\"\nline é 😀 é" {
		t.Errorf("text %q", got)
	}
	m := &usageMeter{status: 200, text: make([]byte, 0, 1024)}
	data := []byte(fastChunks[1])
	if n := testing.AllocsPerRun(100, func() { m.text = m.text[:0]; meterOpenAIEvent(m, data) }); n != 0 {
		t.Errorf("metering vLLM's chunk allocates %.0f times", n)
	}
}

func FuzzOpenAIChunk(f *testing.F) {
	for _, s := range append(append([]string{}, fastChunks...), chunkSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := chunkDiff(b); d != "" {
			t.Fatalf("%q: %s", b, d)
		}
	})
}
