package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// keysJSONCorpus is keys_files the JSON decoder must read as yaml.v3
// does: fast names those it must read itself (the rest it may leave to
// yaml.v3, which accepts or refuses them).
func keysJSONCorpus() []struct {
	name string
	fast bool
	data string
} {
	digest := func(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }
	var keys []map[string]any
	for i := range 50 {
		k := map[string]any{"name": fmt.Sprintf("team-%d", i), "sha256": digest(fmt.Sprint(i)), "models": []string{"*"}}
		switch i % 5 {
		case 1:
			k["models"] = []string{"qwen3", "llama-3.1-8b"}
			k["limits"] = map[string]int64{"requests_per_minute": 120, "tokens_per_minute": 200000, "max_concurrent": 8, "tokens_per_day": 1 << 40}
		case 2:
			delete(k, "sha256")
			k["env"], k["priority"] = "MAITRED_KEY_"+fmt.Sprint(i), "batch"
		case 3:
			k["weight"] = 2.5
			k["sha256"] = strings.ToUpper(k["sha256"].(string))
		}
		keys = append(keys, k)
	}
	compact, _ := json.Marshal(map[string]any{"keys": keys})
	indented, _ := json.MarshalIndent(map[string]any{"keys": keys}, "", "  ")
	d := digest("x")
	one := func(fields string) string { return `{"keys": [{"name": "a", "sha256": "` + d + `", ` + fields + `}]}` }
	return []struct {
		name string
		fast bool
		data string
	}{
		{"compact", true, string(compact)},
		{"indented", true, string(indented)},
		{"CRLF and tabs", true, strings.NewReplacer(",", ",\r\n\t", "{", "{ ", ":", " :\t").Replace(string(compact))},
		{"empty object", true, "{}"},
		{"empty list", true, `{"keys": []}`},
		{"surrounding whitespace", true, "\n  {\"keys\" : [ ] }\n\n"},
		{"models shared", true, `{"keys":[{"name":"a","env":"A","models":["m","n"]},{"name":"b","env":"B","models":["m","n"]},{"name":"c","env":"C","models":[]}]}`},
		{"limits", true, one(`"models": ["*"], "limits": {"tokens_per_day": 9223372036854775807, "max_concurrent": -3, "requests_per_minute": -0}`)},
		{"weights", true, `{"keys":[{"name":"a","weight":1},{"name":"b","weight":0.25},{"name":"c","weight":1e3},{"name":"d","weight":-1.5E-2},{"name":"e","weight":0}]}`},
		{"every field", true, one(`"env": "E", "models": ["*"], "priority": "interactive", "weight": 2, "limits": {}`)},
		{"not JSON", false, "keys:\n  - name: a\n    sha256: " + d + "\n    models: ['*']\n"},
		{"YAML flow, unquoted", false, "{keys: [{name: a, models: ['*']}]}"},
		{"unknown key", false, one(`"modles": ["*"]`)},
		{"unknown top key", false, `{"keys": [], "more": 1}`},
		{"key given twice", false, one(`"models": ["*"], "models": ["x"]`)},
		{"limit given twice", false, one(`"limits": {"max_concurrent": 1, "max_concurrent": 2}`)},
		{"top key twice", false, `{"keys": [], "keys": []}`},
		{"case differs", false, one(`"Models": ["*"]`)},
		{"null", false, one(`"priority": null`)},
		{"null weight", false, one(`"weight": null`)},
		{"null keys", false, `{"keys": null}`},
		{"bool for string", false, one(`"priority": true`)},
		{"number for string", false, one(`"models": [1]`)},
		{"string for number", false, one(`"limits": {"max_concurrent": "1"}`)},
		{"fraction for integer", false, one(`"limits": {"max_concurrent": 1.5}`)},
		{"exponent for integer", false, one(`"limits": {"max_concurrent": 1e3}`)},
		{"integer too large", false, one(`"limits": {"max_concurrent": 9223372036854775808}`)},
		{"leading zero", false, one(`"limits": {"max_concurrent": 010}`)},
		{"plus sign", false, one(`"limits": {"max_concurrent": +1}`)},
		{"weight out of range", false, one(`"weight": 1e400`)},
		{"weight not JSON", false, one(`"weight": .5`)},
		{"escape", false, `{"keys": [{"name": "a\/b"}]}`},
		{"escaped quote", false, `{"keys": [{"name": "a\"b"}]}`},
		{"surrogate pair", false, `{"keys": [{"name": "\ud83d\ude00"}]}`},
		{"non-ASCII", false, `{"keys": [{"name": "équipe"}]}`},
		{"control byte", false, "{\"keys\": [{\"name\": \"a\tb\"}]}"},
		{"newline in string", false, "{\"keys\": [{\"name\": \"a\nb\"}]}"},
		{"trailing comma", false, `{"keys": [{"name": "a"},]}`},
		{"missing comma", false, `{"keys": [{"name": "a"} {"name": "b"}]}`},
		{"unclosed", false, `{"keys": [{"name": "a"}]`},
		{"trailing bytes", false, `{"keys": []} x`},
		{"comment", false, "{\"keys\": []} # none yet\n"},
		{"second document", false, "{\"keys\": []}\n---\n{\"keys\": []}\n"},
		{"keys not a list", false, `{"keys": {}}`},
		{"key not an object", false, `{"keys": ["a"]}`},
		{"limits not an object", false, one(`"limits": 5`)},
		{"models not a list", false, one(`"models": "*"`)},
		{"empty", false, ""},
		{"a list", false, "[]"},
	}
}

// TestKeysJSONMatchesYAML: what the JSON decoder reads, yaml.v3 (with
// decodeStrict) reads the same; and the files it must read fast, it does.
func TestKeysJSONMatchesYAML(t *testing.T) {
	for _, tt := range keysJSONCorpus() {
		t.Run(tt.name, func(t *testing.T) {
			fast := checkKeysJSON(t, []byte(tt.data))
			if tt.fast && !fast {
				t.Errorf("the JSON decoder left it to yaml.v3; want it read by the JSON decoder")
			}
		})
	}
}

// FuzzKeysJSONMatchesYAML holds the JSON decoder to yaml.v3's reading on
// any input: whatever it accepts, yaml.v3 accepts with the same keys.
func FuzzKeysJSONMatchesYAML(f *testing.F) {
	for _, tt := range keysJSONCorpus() {
		f.Add([]byte(tt.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkKeysJSON(t, data) })
}

// checkKeysJSON compares the two decoders on data, and ParseKeys with
// yaml.v3 alone (same keys, or the same error); it reports whether the
// JSON decoder read it.
func checkKeysJSON(t *testing.T, data []byte) bool {
	t.Helper()
	fromJSON, fast := decodeKeysJSON(data)
	fromYAML, yamlErr := decodeKeysYAML(data)
	if fast {
		if yamlErr != nil {
			t.Fatalf("the JSON decoder accepts what yaml.v3 refuses (%v): %q", yamlErr, data)
		}
		if !reflect.DeepEqual(fromJSON, fromYAML) {
			t.Fatalf("the JSON decoder reads\n%+v\nyaml.v3 reads\n%+v\nfrom %q", fromJSON, fromYAML, data)
		}
	}
	cfg := Config{PriorityClasses: []string{"interactive", "batch"}}
	keys, err := ParseKeys(data, &cfg)
	want, wantErr := fromYAML, yamlErr
	if wantErr == nil {
		want, wantErr = validateFileKeys(fromYAML, &cfg)
	}
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(keys, want) {
		t.Fatalf("ParseKeys = %+v, %v; with yaml.v3 alone %+v, %v", keys, err, want, wantErr)
	}
	return fast
}

// TestKeysJSONExample: configs/keys.json, configs/keys.yaml written as
// JSON, holds the same keys, and the JSON decoder reads it.
func TestKeysJSONExample(t *testing.T) {
	t.Setenv("MAITRED_BATCH_KEY", "sk-batch")
	cfg, err := Load("../configs/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, err := LoadKeys("../configs/keys.yaml", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := LoadKeys("../configs/keys.json", &cfg)
	if err != nil || !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Fatalf("keys.json reads %+v, %v; want keys.yaml's %+v", fromJSON, err, fromYAML)
	}
	data, err := os.ReadFile("../configs/keys.json")
	if err != nil {
		t.Fatal(err)
	}
	if !checkKeysJSON(t, data) {
		t.Error("the JSON decoder left configs/keys.json to yaml.v3")
	}
}

// generatedKeysJSON is a keys_file of n keys as the bench writes it: each
// allowing every model, with limits.
func generatedKeysJSON(n int) []byte {
	var b strings.Builder
	b.WriteString("{\"keys\": [\n")
	for i := range n {
		d := sha256.Sum256(fmt.Appendf(nil, "sk-%d", i))
		sep := ","
		if i == n-1 {
			sep = ""
		}
		fmt.Fprintf(&b, `  {"name": "k%d", "sha256": "%s", "models": ["*"], "limits": {"requests_per_minute": 100, "max_concurrent": 10}}%s`+"\n", i, hex.EncodeToString(d[:]), sep)
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// TestKeysJSONAllocationsPerKey: reading a keys_file allocates per key its
// name and its digest's text and nothing else (a model list read before is
// shared without being made again): the garbage of a 100k-key reload is
// what makes collections run beside requests.
func TestKeysJSONAllocationsPerKey(t *testing.T) {
	allocs := func(n int) float64 {
		data := generatedKeysJSON(n)
		return testing.AllocsPerRun(2, func() {
			if _, ok := decodeKeysJSONYielding(data, func() {}); !ok {
				t.Fatal("the JSON decoder refused the generated file")
			}
		})
	}
	small, large := allocs(1000), allocs(10000)
	if perKey := (large - small) / 9000; perKey > 2 {
		t.Errorf("%.2f allocations per key (%.0f at 1k keys, %.0f at 10k), want at most 2 (its name and digest)", perKey, small, large)
	}
}

// TestKeysReadingYields: the JSON decoder yields to the scheduler at
// least every 256 keys (about half a millisecond of reading), so that a
// large reload beside requests holds a core only briefly at a time.
func TestKeysReadingYields(t *testing.T) {
	const most, n = 256, 2560
	yields := 0
	keys, ok := decodeKeysJSONYielding(generatedKeysJSON(n), func() { yields++ })
	if !ok || len(keys) != n {
		t.Fatalf("decoded %d keys (ok %v), want %d", len(keys), ok, n)
	}
	if yields < n/most {
		t.Errorf("%d yields for %d keys, want one every %d keys at least", yields, n, most)
	}
}
