package ojson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, in, wantMsg, wantPath string
	}{
		{"empty", ``, "empty body", ""},
		{"duplicate key", `{"model":"a","model":"b"}`, `duplicate key "model"`, "model"},
		{"nested duplicate", `{"messages":[{"role":"user","role":"x"}]}`, `duplicate key "role"`, "messages[0].role"},
		{"invalid utf8", "{\"a\":\"\xff\"}", "invalid UTF-8", "a"},
		{"trailing", `{} {}`, "unexpected data after", ""},
		{"nan", `{"t":NaN}`, "NaN and Infinity", "t"},
		{"neg inf", `{"t":-Infinity}`, "NaN and Infinity", "t"},
		{"lone surrogate", `{"s":"\ud800"}`, "unpaired surrogate", "s"},
		{"control char", "{\"s\":\"a\nb\"}", "control character", "s"},
		{"bad escape", `{"s":"\q"}`, "invalid escape", "s"},
		{"leading zero", `{"n":01}`, "after an object member", "n"},
		{"bare dot", `{"n":1.}`, "decimal point", "n"},
		{"single quote", `{'a':1}`, "object key", ""},
		{"unterminated", `{"a":[1,2`, "unexpected end", "a[1]"},
		{"trailing comma", `[1,]`, "beginning of a value", "[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in), 0)
			se, ok := err.(*SyntaxError)
			if !ok {
				t.Fatalf("Parse(%q) error = %v, want *SyntaxError", tt.in, err)
			}
			if !strings.Contains(se.Msg, tt.wantMsg) || se.Path != tt.wantPath {
				t.Errorf("Parse(%q) = msg %q path %q, want msg containing %q path %q", tt.in, se.Msg, se.Path, tt.wantMsg, tt.wantPath)
			}
		})
	}
}

func TestParseDepth(t *testing.T) {
	ok := strings.Repeat("[", 64) + strings.Repeat("]", 64)
	if _, err := Parse([]byte(ok), 64); err != nil {
		t.Fatalf("depth 64: %v", err)
	}
	bad := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	if _, err := Parse([]byte(bad), 64); err == nil || !strings.Contains(err.Error(), "nesting deeper than 64") {
		t.Fatalf("depth 65: err = %v", err)
	}
}

func TestParseKeepsOrderLiteralsAndSpans(t *testing.T) {
	in := []byte(`{"z":1, "a":1.0,"m":-2e5,"s":"h\u00e9\ud83d\ude00","n":null,"b":true,"arr":[ {} ,[]]}`)
	v, err := Parse(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range v.Members {
		keys = append(keys, m.Key)
	}
	if want := []string{"z", "a", "m", "s", "n", "b", "arr"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	if !v.Get("z").IsInt() || v.Get("a").IsInt() || v.Get("a").Str != "1.0" || v.Get("m").Float() != -200000 {
		t.Errorf("number literals not kept: z=%+v a=%+v m=%+v", v.Get("z"), v.Get("a"), v.Get("m"))
	}
	if got := v.Get("s").Str; got != "hé😀" {
		t.Errorf("string = %q", got)
	}
	if got := string(v.Get("arr").Raw(in)); got != `[ {} ,[]]` {
		t.Errorf("span of arr = %q", got)
	}
	if got := string(v.Get("a").Raw(in)); got != `1.0` {
		t.Errorf("span of a = %q", got)
	}
	if !v.Get("n").IsNull() || !v.Get("b").Bool || v.Get("missing") != nil || !v.Get("missing").IsNull() {
		t.Error("null/bool/missing handling")
	}
}

// FuzzParse checks Parse against encoding/json: whatever Parse accepts,
// encoding/json accepts with the same meaning; whatever encoding/json rejects,
// Parse rejects too.
// strictOnPurpose reports whether err is one of the rules by which this
// parser refuses what encoding/json accepts.
func strictOnPurpose(err error) bool {
	for _, why := range []string{"duplicate key", "nesting deeper", "invalid UTF-8", "unpaired surrogate"} {
		if strings.Contains(err.Error(), why) {
			return true
		}
	}
	return false
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"a":[1,2.5,-3e2,true,false,null,"x\n\u00e9"]}`,
		`[]`, `""`, `0`, `{"a":{"b":{"c":[]}}}`, `{"a":1,"A":2}`,
		"\"\xff\"", `{"a":1,"a":2}`, `[1,]`, `"\ud83d\ude00"`,
		`"plain ascii runs of more than eight bytes \" with a quote"`, `"12345678\\12345678é12345678\u0041"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data, 0)
		var ref any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber() // big integers are valid JSON (Python reads them too)
		refErr := dec.Decode(&ref)
		if refErr == nil && len(bytes.Trim(data[dec.InputOffset():], " \t\r\n")) > 0 {
			refErr = errTrailing
		}
		if err != nil {
			// Stricter than encoding/json by design, and only there.
			if refErr == nil && !strictOnPurpose(err) {
				t.Fatalf("Parse rejected %q, which encoding/json accepts: %v", data, err)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("Parse accepted %q, encoding/json rejects it: %v", data, refErr)
		}
		if got := toAny(v); !reflect.DeepEqual(got, ref) {
			t.Fatalf("Parse(%q) = %#v, encoding/json = %#v", data, got, ref)
		}
		if !bytes.Equal(bytes.TrimSpace(data), v.Raw(data)) {
			t.Fatalf("top-level span %q != input %q", v.Raw(data), data)
		}
	})
}

var errTrailing = errors.New("trailing data")

func toAny(v *Value) any {
	switch v.Kind {
	case Null:
		return nil
	case Bool:
		return v.Bool
	case Number:
		return json.Number(v.Str)
	case String:
		return v.Str
	case Array:
		out := make([]any, len(v.Items))
		for i, it := range v.Items {
			out[i] = toAny(it)
		}
		return out
	case Object:
		out := make(map[string]any, len(v.Members))
		for _, m := range v.Members {
			out[m.Key] = toAny(m.Value)
		}
		return out
	}
	return nil
}

// manyKeys is an object of n distinct keys, then extra members verbatim.
func manyKeys(n int, extra string) []byte {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"k%d":%d`, i, i)
	}
	sb.WriteString(extra)
	sb.WriteByte('}')
	return []byte(sb.String())
}

// TestParseDuplicateAmongManyKeys: past smallObject members the duplicate
// check switches from a scan to a set; both must find the same duplicates,
// wherever they sit.
func TestParseDuplicateAmongManyKeys(t *testing.T) {
	for _, n := range []int{smallObject - 1, smallObject, smallObject + 1, 5000} {
		v, err := Parse(manyKeys(n, ""), 0)
		if err != nil || len(v.Members) != n {
			t.Fatalf("%d distinct keys: %v", n, err)
		}
		for _, dup := range []int{0, n / 2, n - 1} {
			_, err := Parse(manyKeys(n, fmt.Sprintf(`,"k%d":true`, dup)), 0)
			se, ok := err.(*SyntaxError)
			if !ok || se.Msg != fmt.Sprintf("duplicate key %q", fmt.Sprintf("k%d", dup)) {
				t.Errorf("%d keys, k%d again: %v", n, dup, err)
			}
		}
	}
}

// BenchmarkParseManyKeys: an object of 200,000 keys (2.3 MB) must parse
// in linear time; a pairwise duplicate scan took a minute here.
func BenchmarkParseManyKeys(b *testing.B) {
	data := manyKeys(200_000, "")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseChat(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"qwen3","stream":true,"max_tokens":256,"messages":[`)
	for i := 0; i < 20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"user","content":"Explain how a reverse proxy streams server-sent events without buffering, in a few sentences."}`)
	}
	sb.WriteString(`]}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseChatEscaped: a chat whose contents are lines (escaped
// newlines between plain runs) with some non-ASCII text, as code, logs and
// prose are.
func BenchmarkParseChatEscaped(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"qwen3","max_tokens":256,"messages":[`)
	for i := 0; i < 20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"role":"user","content":"`)
		for range 40 {
			sb.WriteString(`func (p *parser) str() (string, error) { return \"quoted\", nil }\n\tnaïve café — done\n`)
		}
		sb.WriteString(`"}`)
	}
	sb.WriteString(`]}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseLimited: a document within the limit parses as Parse parses
// it; one value more is a TooManyValuesError naming the limit; 0 is no
// limit.
func TestParseLimited(t *testing.T) {
	doc := []byte(`{"model":"m","tokens":[1,2,3]}`) // 6 values: the object, "m", the array, 3 numbers
	for _, c := range []struct {
		limit int
		ok    bool
	}{{0, true}, {6, true}, {5, false}, {1, false}} {
		v, err := ParseLimited(doc, 0, c.limit)
		var tm *TooManyValuesError
		switch {
		case c.ok && (err != nil || len(v.Get("tokens").Items) != 3):
			t.Errorf("limit %d: %v, %v", c.limit, v, err)
		case !c.ok && (!errors.As(err, &tm) || tm.Limit != c.limit):
			t.Errorf("limit %d: err %v, want TooManyValuesError", c.limit, err)
		case c.limit == 5 && tm.Path != "tokens[2]":
			t.Errorf("limit 5: stopped at %q, want tokens[2]", tm.Path)
		case c.limit == 1 && tm.Path != "model":
			t.Errorf("limit 1: stopped at %q, want model", tm.Path)
		}
	}
}
