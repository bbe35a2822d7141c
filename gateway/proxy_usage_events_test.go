package gateway

import (
	"strings"
	"testing"
)

// simResponsesEvents is a Responses stream's events as the simulator (like
// vLLM) writes them, in order: each must take the fast read
// (decodeResponsesEvent), not encoding/json.
var simResponsesEvents = []string{
	`{"response":{"id":"resp_3e1b1e8b3e0ef84d4d007d08be379648","created_at":1796521557,"incomplete_details":null,"instructions":null,"metadata":null,"model":"m","object":"response","output":[],"parallel_tool_calls":true,"temperature":1,"tool_choice":"auto","tools":[],"top_p":1,"background":false,"max_output_tokens":4086,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto","status":"in_progress","text":null,"top_logprobs":null,"truncation":"disabled","usage":null,"user":null,"input_messages":null,"output_messages":null},"sequence_number":0,"type":"response.created"}`,
	`{"response":{"id":"resp_3e1b1e8b3e0ef84d4d007d08be379648","created_at":1796521557,"incomplete_details":null,"instructions":null,"metadata":null,"model":"m","object":"response","output":[],"parallel_tool_calls":true,"temperature":1,"tool_choice":"auto","tools":[],"top_p":1,"background":false,"max_output_tokens":4086,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto","status":"in_progress","text":null,"top_logprobs":null,"truncation":"disabled","usage":null,"user":null,"input_messages":null,"output_messages":null},"sequence_number":1,"type":"response.in_progress"}`,
	`{"item":{"id":"e8f634f5-8114-9667-a782-e86df72f5f49","content":[],"role":"assistant","status":"in_progress","type":"message"},"output_index":0,"sequence_number":2,"type":"response.output_item.added"}`,
	`{"content_index":0,"item_id":"e8f634f5-8114-9667-a782-e86df72f5f49","output_index":0,"part":{"annotations":[],"text":"","type":"output_text","logprobs":[]},"sequence_number":3,"type":"response.content_part.added"}`,
	`{"content_index":1,"delta":"Lorem","item_id":"e8f634f5-8114-9667-a782-e86df72f5f49","logprobs":[],"output_index":0,"sequence_number":4,"type":"response.output_text.delta"}`,
	`{"content_index":2,"delta":" ipsum","item_id":"e8f634f5-8114-9667-a782-e86df72f5f49","logprobs":[],"output_index":0,"sequence_number":5,"type":"response.output_text.delta"}`,
	`{"content_index":5,"item_id":"e8f634f5-8114-9667-a782-e86df72f5f49","logprobs":[],"output_index":0,"sequence_number":8,"text":"Lorem ipsum","type":"response.output_text.done"}`,
	`{"content_index":6,"item_id":"e8f634f5-8114-9667-a782-e86df72f5f49","output_index":0,"part":{"annotations":[],"text":"Lorem ipsum","type":"output_text","logprobs":null},"sequence_number":9,"type":"response.content_part.done"}`,
	`{"item":{"id":"e8f634f5-8114-9667-a782-e86df72f5f49","content":[{"annotations":[],"text":"Lorem ipsum","type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message","summary":[]},"output_index":0,"sequence_number":10,"type":"response.output_item.done"}`,
	`{"response":{"id":"resp_3e1b1e8b3e0ef84d4d007d08be379648","created_at":1796521557,"incomplete_details":null,"instructions":null,"metadata":null,"model":"m","object":"response","output":[{"id":"msg_1babcd3e26b4072a45fbabf8439d8e9e","content":[{"annotations":[],"text":"Lorem ipsum","type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message"}],"parallel_tool_calls":true,"temperature":1,"tool_choice":"auto","tools":[],"top_p":1,"background":false,"max_output_tokens":4086,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto","status":"completed","text":null,"top_logprobs":null,"truncation":"disabled","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":14},"user":null,"input_messages":null,"output_messages":null},"sequence_number":11,"type":"response.completed"}`,
}

// responsesFast are more events the fast read must take: nulls where
// the struct reads a value, escapes and unicode in the text, other
// deltas, spacing.
var responsesFast = []string{
	`{"type":"response.output_text.delta","delta":"a \"quoted\"\nline \u00e9 \ud83d\ude00 é"}`,
	`{"type":"response.reasoning_text.delta","delta":"think"}`,
	`{"type":"response.function_call_arguments.delta","delta":"{\"city\": "}`,
	`{"type":"response.output_text.delta","delta":null}`,
	`{"type":"response.output_text.delta","delta":5}`,
	`{"type":"response.output_text.delta","delta":{"text":"not a string"}}`,
	`{"type":"response.output_text.done","delta":"not a delta event"}`,
	`{"type":null,"delta":"x","response":null}`,
	`{"type":"response.created","response":{"id":null,"model":null,"usage":null}}`,
	`{"type":"response.created","response":{"id":42,"model":["m"]}}`,
	`{"type":"response.created","response":{"id":"resp_\u0031","model":"m\u00e9"}}`,
	`{"type":"response.created","response":{"id":"` + strings.Repeat("i", 300) + `","model":"` + strings.Repeat("m", 300) + `"}}`,
	`{"type":"response.in_progress","response":{"id":"resp_2","usage":{}}}`,
	`{"type":"response.incomplete","response":{"usage":{"input_tokens":3,"output_tokens":null,"total_tokens":3}}}`,
	`{"type":"response.failed","response":{"usage":{"input_tokens":-0,"output_tokens":9223372036854775807}}}`,
	` { "type" : "response.output_text.delta" , "delta" : "spaced" } `,
	`{"delta":"x","type":"response.output_text.delta","unknown":{"a":[1,2.5e-3,true,false,null,{"b":"\u0000"}]}}`,
	`null`,
	`{}`,
	`{"type":"error","code":"server_error","message":"The backend stream broke","param":null}`,
}

// responsesSeeds are Responses events of every other shape:
// encoding/json's answer stands for each.
var responsesSeeds = []string{
	`{"Type":"response.output_text.delta","delta":"folded"}`,
	`{"type":"response.output_text.delta","Delta":"folded"}`,
	`{"type":"response.created","Response":{"id":"r","model":"m"}}`,
	`{"type":"response.created","response":{"ID":"r","MODEL":"m"}}`,
	`{"type":"response.output_text.delta","type":"response.created","delta":"dup"}`,
	`{"type":"response.output_text.delta","delta":"one","delta":"two"}`,
	`{"type":"response.created","response":{"id":"a"},"response":{"id":"b"}}`,
	`{"type":"response.output_text.delt\u0061","delta":"escaped type"}`,
	`{"type":"respons\u0065.created","response":{"id":"escaped type","model":"m"}}`,
	`{"type":5,"delta":"x","response":{"model":"m"}}`,
	`{"type":"response.created","response":5}`,
	`{"type":"response.created","response":[{"model":"m"}]}`,
	`{"type":"response.completed","response":{"model":"m","usage":5}}`,
	`{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":"10"}}}`,
	`{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":1.5}}}`,
	`{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":1e3}}}`,
	`{"type":"response.completed","response":{"model":"m","usage":{"input_tokens":9223372036854775808}}}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":1,"input_tokens":2,"output_tokens":3}}}`,
	`{"type":"response.completed","response":{"usage":{"Input_Tokens":1,"output_tokens":3}}}`,
	`{"type":"response.completed","response":{"usage":{"input\u005ftokens":1,"output_tokens":3}}}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":01}}}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2},"model":"m"},"delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"\ud83d"}`,
	`{"type":"response.output_text.delta","delta":"\ud83d\u0041"}`,
	"{\"type\":\"response.output_text.delta\",\"delta\":\"bad \xff utf8 \xe2\x82\"}",
	"{\"type\":\"response.output_text.delta\",\"delta\":\"ctl \x01\"}",
	"{\"type\":\"response.output_text.delta\xff\",\"delta\":\"bad type\"}",
	`{"type":"response.output_text.delta","delta":"bad \x escape"}`,
	`{"type":"response.output_text.delta","delta":"x"} trailing`,
	`{"type":"response.output_text.delta","delta":"x"`,
	`{"type":"response.output_text.delta","delta":"x",}`,
	`{"type":"response.output_text.delta","delta":"x","deep":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	`{"type":"response.output_text.delta","delta":"x","deep":` + strings.Repeat(`{"a":`, 60) + `1` + strings.Repeat("}", 60) + `}`,
	`{"type":"response.output_text.delta","dеlta":"cyrillic e"}`,
	`[{"type":"response.output_text.delta","delta":"x"}]`,
	`"response.output_text.delta"`,
	``,
	`   `,
}

// simAnthropicEvents is a Messages stream's events as the simulator (like
// vLLM) writes them, in order: each must take the fast read.
var simAnthropicEvents = []string{
	`{"type":"message_start","message":{"id":"chatcmpl-8bc3d6fca28d7f0d41230d6cfedd59b1","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":0}}}`,
	`{"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":"Lorem"},"index":0}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":" ipsum"},"index":0}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":8,"output_tokens":4}}`,
	`{"type":"message_stop"}`,
}

// anthropicFast are more Messages events the fast read must take.
var anthropicFast = []string{
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Par"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm \u00e9 \ud83d\ude00"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
	`{"type":"content_block_delta","delta":{"text":"a","partial_json":"b","thinking":"c"}}`,
	`{"type":"content_block_delta","delta":{"text":null,"partial_json":null,"thinking":null}}`,
	`{"type":"content_block_delta","delta":null}`,
	`{"type":"content_block_start","delta":{"text":"not a delta event"}}`,
	`{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":12,"output_tokens":1,"cache_creation_input_tokens":null,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0}}}}`,
	`{"type":"message_start","message":null}`,
	`{"type":"message_start","message":{"usage":null,"model":5}}`,
	`{"type":"message_start","usage":{"input_tokens":3,"output_tokens":3}}`,
	`{"type":"message_delta","usage":{"output_tokens":9}}`,
	`{"type":"message_delta","message":{"usage":{"input_tokens":1}},"usage":{"output_tokens":9}}`,
	`{"type":"message_delta","usage":null}`,
	`{"type":null,"usage":{"output_tokens":9}}`,
	`{"type":"ping"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	` { "type" : "content_block_delta" , "delta" : { "text" : "spaced" } } `,
	`null`,
	`{}`,
}

// anthropicSeeds are Messages events of every other shape.
var anthropicSeeds = []string{
	`{"Type":"content_block_delta","delta":{"text":"folded"}}`,
	`{"type":"content_block_delta","delta":{"Text":"folded"}}`,
	`{"type":"message_start","Message":{"model":"m","usage":{"input_tokens":1}}}`,
	`{"type":"message_delta","USAGE":{"output_tokens":9}}`,
	`{"type":"content_block_delta","delta":{"text":"one","text":"two"}}`,
	`{"type":"content_block_delta","delta":{"text":"one"},"delta":{"text":"two"}}`,
	`{"type":"message_start","type":"message_delta","usage":{"output_tokens":1}}`,
	`{"type":"message_delt\u0061","usage":{"output_tokens":9}}`,
	`{"type":1,"message":{"model":"m"}}`,
	`{"type":"content_block_delta","delta":"text"}`,
	`{"type":"content_block_delta","delta":{"text":5}}`,
	`{"type":"content_block_delta","delta":[{"text":"x"}]}`,
	`{"type":"message_start","message":5}`,
	`{"type":"message_start","message":{"model":"m","usage":{"input_tokens":"12"}}}`,
	`{"type":"message_delta","message":{"model":"m","usage":{"input_tokens":true}},"usage":{"output_tokens":9}}`,
	`{"type":"message_delta","message":{"model":"m"},"usage":{"output_tokens":9.0}}`,
	`{"type":"message_delta","usage":{"output_tokens":1,"output_tokens":2}}`,
	`{"type":"message_delta","usage":[9]}`,
	`{"type":"content_block_delta","delta":{"text":"\udc00\ud83d"}}`,
	"{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"bad \xff utf8\"}}",
	"{\"type\":\"content_block_delta\",\"delta\":{\"text\":\"ctl \x1f\"}}",
	`{"type":"content_block_delta","delta":{"text":"\u12"}}`,
	`{"type":"content_block_delta","delta":{"te\u0078t":"escaped name"}}`,
	`{"type":"content_block_delta","delta":{"text":"x"}} {}`,
	`{"type":"content_block_delta","delta":{"text":"x"}`,
	`{"type":"content_block_delta","delta":{"text":"x"},"deep":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	`[{"type":"message_stop"}]`,
	`true`,
	``,
}

// eventTable is one family's events: its stream in order, the events
// that must read fast, and the others.
type eventTable struct {
	name                     string
	fast, ref                func(*usageMeter, []byte)
	decode                   func([]byte, *meteredEvent) bool
	stream, alsoFast, others []string
}

var eventTables = []eventTable{
	{"responses", meterResponsesEvent, meterResponsesEventJSON, decodeResponsesEvent, simResponsesEvents, responsesFast, responsesSeeds},
	{"anthropic", meterAnthropicEvent, meterAnthropicEventJSON, decodeAnthropicEvent, simAnthropicEvents, anthropicFast, anthropicSeeds},
}

func (tb eventTable) all() []string {
	return append(append(append([]string{}, tb.stream...), tb.alsoFast...), tb.others...)
}

// TestStreamEventsMatchEncodingJSON: the meter's fast read of a
// Responses or Messages event leaves the meter as encoding/json's does
// (text, usage, model, Responses id), for each event alone, for every
// prefix of each (truncated JSON) and for the simulator's stream in order;
// the simulator's events and the other vLLM shapes take the fast read.
func TestStreamEventsMatchEncodingJSON(t *testing.T) {
	for _, tb := range eventTables {
		t.Run(tb.name, func(t *testing.T) {
			for _, s := range tb.all() {
				if d := meterDiff(tb.fast, tb.ref, []byte(s)); d != "" {
					t.Errorf("%s: %s", s, d)
				}
				for n := range len(s) {
					if d := meterDiff(tb.fast, tb.ref, []byte(s[:n])); d != "" {
						t.Errorf("%q: %s", s[:n], d)
					}
				}
			}
			var stream [][]byte
			for _, s := range tb.stream {
				stream = append(stream, []byte(s))
			}
			if d := meterDiff(tb.fast, tb.ref, stream...); d != "" {
				t.Errorf("the stream: %s", d)
			}
			var e meteredEvent
			for _, s := range append(append([]string{}, tb.stream...), tb.alsoFast...) {
				if !tb.decode([]byte(s), &e) {
					t.Errorf("%s: left to encoding/json", s)
				}
			}
			for _, s := range tb.others {
				if tb.decode([]byte(s), &e) && strings.Contains(s, "Type") {
					t.Errorf("%s: read fast, though encoding/json folds its member names", s)
				}
			}
		})
	}
	got := meterEvents(meterResponsesEvent, []byte(simResponsesEvents[0]), []byte(simResponsesEvents[4]), []byte(simResponsesEvents[5]), []byte(simResponsesEvents[9]))
	want := meterEffects{text: "Lorem ipsum", reported: usageReport{10, 4}, reportedP: true, reportedC: true, model: "m", id: "resp_3e1b1e8b3e0ef84d4d007d08be379648", idSent: true}
	if got != want {
		t.Errorf("responses stream metered %+v, want %+v", got, want)
	}
	var anth [][]byte
	for _, s := range simAnthropicEvents {
		anth = append(anth, []byte(s))
	}
	got = meterEvents(meterAnthropicEvent, anth...)
	want = meterEffects{text: "Lorem ipsum", reported: usageReport{8, 4}, reportedP: true, reportedC: true, model: "m"}
	if got != want {
		t.Errorf("messages stream metered %+v, want %+v", got, want)
	}
}

// TestStreamEventsAllocateNothing: a typical event of each family (a
// text delta; an event that carries usage, as every OpenAI chunk does
// with continuous_usage_stats) is metered without allocating.
func TestStreamEventsAllocateNothing(t *testing.T) {
	for _, c := range meterBenchEvents {
		m := &usageMeter{status: 200, model: "m", text: make([]byte, 0, 1024)}
		data := []byte(c.data)
		if n := testing.AllocsPerRun(100, func() { m.text = m.text[:0]; c.read(m, data) }); n != 0 {
			t.Errorf("%s: metering allocates %.0f times", c.name, n)
		}
	}
}

// meterBenchEvents are the events the meter's benchmarks read, each with
// its fast read and its encoding/json read.
var meterBenchEvents = []struct {
	name       string
	data       string
	read, json func(*usageMeter, []byte)
}{
	{"chat-usage", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" ipsum"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":8,"total_tokens":10,"completion_tokens":2}}`, meterOpenAIEvent, meterOpenAIEventJSON},
	{"responses-delta", simResponsesEvents[4], meterResponsesEvent, meterResponsesEventJSON},
	{"responses-completed", simResponsesEvents[9], meterResponsesEvent, meterResponsesEventJSON},
	{"anthropic-delta", simAnthropicEvents[2], meterAnthropicEvent, meterAnthropicEventJSON},
	{"anthropic-message_delta", simAnthropicEvents[5], meterAnthropicEvent, meterAnthropicEventJSON},
}

// BenchmarkMeterEvent: one stream event through the meter, the fast read
// beside encoding/json (its reference and fallback), per family.
func BenchmarkMeterEvent(b *testing.B) {
	for _, c := range meterBenchEvents {
		data := []byte(c.data)
		for _, way := range []struct {
			name string
			read func(*usageMeter, []byte)
		}{{"fast", c.read}, {"encoding-json", c.json}} {
			b.Run(c.name+"/"+way.name, func(b *testing.B) {
				b.ReportAllocs()
				m := &usageMeter{status: 200, model: "m", text: make([]byte, 0, 1024)}
				for b.Loop() {
					m.text = m.text[:0]
					way.read(m, data)
				}
			})
		}
	}
}

func fuzzEvents(f *testing.F, tb eventTable) {
	for _, s := range tb.all() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := meterDiff(tb.fast, tb.ref, b); d != "" {
			t.Fatalf("%q: %s", b, d)
		}
	})
}

func FuzzResponsesEvent(f *testing.F) { fuzzEvents(f, eventTables[0]) }

func FuzzAnthropicEvent(f *testing.F) { fuzzEvents(f, eventTables[1]) }
