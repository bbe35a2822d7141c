package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
)

var usageDecodeSeeds = []string{
	`{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27}`,
	`{"prompt_tokens":20,"total_tokens":27,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":16}}`,
	`{"input_tokens":12,"output_tokens":3}`,
	`{"total_tokens":5}`,
	`{}`,
	`{"prompt_tokens":null,"completion_tokens":1}`,
	`{"prompt_tokens":1,"prompt_tokens":2}`,
	`{"prompt_tokens":1,"prompt_tokens":null}`,
	`{"PROMPT_TOKENS":3,"Completion_Tokens":4}`,
	`{"prompt_tokens":3,"PROMPT_TOKENS":4}`,
	`{"promſt_tokens":3}`,
	`{"prompt\u005ftokens":9}`,
	`{"prompt_tokens":1.5}`,
	`{"prompt_tokens":1e3}`,
	`{"prompt_tokens":-0}`,
	`{"prompt_tokens":9223372036854775808}`,
	`{"prompt_tokens":-9223372036854775808}`,
	`{"prompt_tokens":"12"}`,
	`{"prompt_tokens":true}`,
	`{"prompt_tokens":[1]}`,
	`{"other":[1,{"a":[[[[[1]]]]]}],"completion_tokens":2}`,
	"{\"x\":\"\xff\",\"prompt_tokens\":4}",
	` {"prompt_tokens":4} `,
	`[1]`,
	`null`,
	`{"prompt_tokens":4`,
	`{"prompt_tokens":01}`,
}

// TestDecodeUsageMatchesEncodingJSON: decodeUsage agrees with
// json.Unmarshal on whether a usage object decodes and on every field.
func TestDecodeUsageMatchesEncodingJSON(t *testing.T) {
	for _, s := range usageDecodeSeeds {
		if d := usageDecodeDiff([]byte(s)); d != "" {
			t.Errorf("%s: %s", s, d)
		}
	}
	var u usageNumbers
	var v usageValues
	if !decodeUsage([]byte(usageDecodeSeeds[0]), &u, &v) || *u.PromptTokens != 20 || *u.CompletionTokens != 7 || *u.TotalTokens != 27 || u.InputTokens != nil {
		t.Fatalf("decoded %+v", u)
	}
}

func FuzzDecodeUsage(f *testing.F) {
	for _, s := range usageDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := usageDecodeDiff(b); d != "" {
			t.Fatalf("%q: %s", b, d)
		}
	})
}

func usageDecodeDiff(b []byte) string {
	var got, want usageNumbers
	var v usageValues
	ok := decodeUsage(b, &got, &v)
	wantOK := json.Unmarshal(b, &want) == nil
	switch {
	case ok != wantOK:
		return "decodeUsage ok=" + boolStr(ok) + ", encoding/json ok=" + boolStr(wantOK)
	case ok && !reflect.DeepEqual(got, want):
		return "fields differ from encoding/json's"
	}
	return ""
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// BenchmarkDecodeUsage: decodeUsage beside encoding/json (its baseline and
// fallback) on the usage object vLLM sends.
func BenchmarkDecodeUsage(b *testing.B) {
	src := []byte(`{"prompt_tokens":20,"total_tokens":27,"completion_tokens":7,"prompt_tokens_details":null}`)
	b.Run("decodeUsage", func(b *testing.B) {
		b.ReportAllocs()
		var s usageScanner // the numbers' home, as in a meter
		for b.Loop() {
			s.u = usageNumbers{}
			if !decodeUsage(src, &s.u, &s.vals) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var u usageNumbers
			if json.Unmarshal(src, &u) != nil {
				b.Fatal("not decoded")
			}
		}
	})
}
