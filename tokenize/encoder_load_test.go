package tokenize

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// byteLevelJSON builds a tiny byte-level tokenizer.json: the 256 bytes
// (ids 0-255 in byte order), then the given merges, each creating the next
// id unless ids overrides it.
func byteLevelJSON(t *testing.T, merges [][2]string, ids map[string]int, added []tjAdded, mutate func(map[string]any)) []byte {
	t.Helper()
	enc := map[byte]rune{}
	for r, b := range byteDecoder {
		enc[b] = r
	}
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(enc[byte(b)])] = b
	}
	var ms []string
	next := 256
	for _, m := range merges {
		k := m[0] + m[1]
		if id, ok := ids[k]; ok {
			vocab[k] = id
		} else if _, ok := vocab[k]; !ok {
			vocab[k] = next
			next++
		}
		ms = append(ms, m[0]+" "+m[1])
	}
	doc := map[string]any{
		"added_tokens": added,
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patCL100K}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": nil,
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": ms},
	}
	if mutate != nil {
		mutate(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadRefusesMergeOrder(t *testing.T) {
	// "ab" gets a higher id than "bc" although its merge comes first: rank
	// BPE would merge in id order, HF in list order.
	data := byteLevelJSON(t, [][2]string{{"a", "b"}, {"b", "c"}}, map[string]int{"ab": 300, "bc": 299}, nil, nil)
	if _, err := ParseTokenizerJSON(data); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "id order") {
		t.Fatalf("got %v, want an id-order refusal", err)
	}
	ok := byteLevelJSON(t, [][2]string{{"a", "b"}, {"b", "c"}}, nil, nil, nil)
	tok, err := ParseTokenizerJSON(ok)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("abc", false); !slices.Equal(got, []int{256, 'c'}) {
		t.Fatalf("abc -> %v", got)
	}
}

func TestLoadRefusals(t *testing.T) {
	for name, mutate := range map[string]func(map[string]any){
		"unigram": func(d map[string]any) { d["model"].(map[string]any)["type"] = "Unigram" },
		"nfkc":    func(d map[string]any) { d["normalizer"] = map[string]any{"type": "NFKC"} },
		"lowercase": func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Lowercase"}}}
		},
		"prefix space": func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
		},
		"roberta": func(d map[string]any) { d["post_processor"] = map[string]any{"type": "RobertaProcessing"} },
		"dropout": func(d map[string]any) { d["model"].(map[string]any)["dropout"] = 0.1 },
		"invert": func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["invert"] = true
		},
		"behavior": func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		},
	} {
		data := byteLevelJSON(t, [][2]string{{"a", "b"}}, nil, nil, mutate)
		if _, err := ParseTokenizerJSON(data); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ErrUnsupported", name, err)
		}
	}
	lstrip := []tjAdded{{ID: 400, Content: "<x>", LStrip: true, Special: true}}
	if _, err := ParseTokenizerJSON(byteLevelJSON(t, nil, nil, lstrip, nil)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("lstrip: got %v", err)
	}
}

func TestAddedTokensLeftmostLongest(t *testing.T) {
	added := []tjAdded{
		{ID: 300, Content: "<a>", Special: true},
		{ID: 301, Content: "<a><b>", Special: true},
		{ID: 302, Content: "a><", Special: false},
		{ID: 303, Content: "xy", Normalized: true},
	}
	tok, err := ParseTokenizerJSON(byteLevelJSON(t, nil, nil, added, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"<a><b>", []int{301}}, // longest at the leftmost start
		{"<a><c>", []int{300, '<', 'c', '>'}},
		{"z<a><b", []int{'z', 300, '<', 'b'}}, // "a><" starts later than "<a>"
		{"qa><", []int{'q', 302}},
		{"wxyz", []int{'w', 303, 'z'}}, // normalized token, second pass
	} {
		if got := tok.Encode(c.in, false); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
	}
	if sp := tok.SpecialTokens(); len(sp) != 2 || sp["<a>"] != 300 {
		t.Errorf("SpecialTokens = %v", sp)
	}
	if got := tok.AddedTokens(); !slices.Equal(got, []string{"<a>", "<a><b>", "a><", "xy"}) {
		t.Errorf("AddedTokens = %v", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	tok := loadTokFixture(t, "llama3_1")
	entries := loadTokCorpus(t)
	want := make([][]int, 200)
	for i := range want {
		want[i] = tok.Encode(entries[i*7].Text, true)
	}
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for i := range want {
				if got := tok.Encode(entries[i*7].Text, true); !slices.Equal(got, want[i]) {
					done <- errors.New("concurrent Encode differs")
					return
				}
				if n, _ := tok.Count(entries[i*7].Text, true, 0); n != len(want[i]) {
					done <- errors.New("concurrent Count differs")
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestAddedTokensOneFirstByte covers the strings.IndexByte search used when
// every added token starts with the same byte.
func TestAddedTokensOneFirstByte(t *testing.T) {
	added := []tjAdded{
		{ID: 300, Content: "<a>", Special: true},
		{ID: 301, Content: "<a><b>", Special: true},
	}
	tok, err := ParseTokenizerJSON(byteLevelJSON(t, nil, nil, added, nil))
	if err != nil {
		t.Fatal(err)
	}
	if tok.raw.only != '<' {
		t.Fatalf("only = %d, want '<'", tok.raw.only)
	}
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"<<a><b>", []int{'<', 301}},
		{"x<a<a>y<", []int{'x', '<', 'a', 300, 'y', '<'}},
		{"<a><b<a>", []int{300, '<', 'b', 300}},
		{"no tokens", []int{'n', 'o', ' ', 't', 'o', 'k', 'e', 'n', 's'}},
	} {
		if got := tok.Encode(c.in, false); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.in, got, c.want)
		}
	}
}
