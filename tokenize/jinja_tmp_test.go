package tokenize

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

type featureGolden struct {
	ID, Template, Vars, Text, Error string
	ErrorType                       string `json:"error_type"`
}

func readFeatureGoldens(t testing.TB) []featureGolden {
	f, err := os.Open(filepath.Join("testdata", "chat", "features.golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []featureGolden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var g featureGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

func TestTmpOwned(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		tm := fixtureModel(t, name).ChatTemplate()
		t.Logf("%s: owned=%v %s", name, tm.owned != nil, tm.notOwned)
	}
	tm, _ := CompileTemplate(demoTemplate)
	t.Logf("demo: owned=%v %s", tm.owned != nil, tm.notOwned)
}

func TestTmpFeatures(t *testing.T) {
	for _, g := range readFeatureGoldens(t) {
		tm, err := CompileTemplate(g.Template)
		if err != nil {
			t.Logf("%s: compile error %v", g.ID, err)
			continue
		}
		if tm.owned == nil {
			t.Logf("%s: not owned: %s", g.ID, tm.notOwned)
		}
	}
}
