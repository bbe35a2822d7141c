package tokenize

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
)

// The template corpus: the Hugging Face chat templates of the npm package
// @huggingface/ollama-utils (MIT), which scripts/fetch-fixtures.sh
// downloads, verifies by its integrity and extracts to .fixtures/templates
// (index.json names each file's model and sha256). Nothing of them is
// committed: tools/chatgolden/corpus.py renders them over the
// conversations of testdata/corpus.cases.jsonl with Python jinja2 in
// transformers' configuration and writes testdata/corpus.golden.jsonl,
// which holds only hashes: per (template, case) the template's sha256 and
// the SHA-256 and byte length of jinja2's text, or the error it raised.

// corpusSpecial are the special tokens tools/chatgolden/corpus.py gives
// every template (its SPECIAL).
var corpusSpecial = map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

// knownCorpusGaps lists the templates on which the owned evaluator
// knowingly does not reproduce jinja2, one row per template (file name in
// .fixtures/templates) with the reason. TestTemplateCorpus fails on a row
// whose template no longer differs on any case, so the table stays true.
var knownCorpusGaps = map[string]string{}

type corpusEntry struct {
	File   string `json:"file"`
	Model  string `json:"model"`
	SHA256 string `json:"sha256"`
}

type corpusCase struct {
	ID   string `json:"id"`
	Body string `json:"body"`
}

type corpusGolden struct {
	Template   string `json:"template"`
	SHA256     string `json:"sha256"`
	ID         string `json:"id"`
	TextSHA256 string `json:"text_sha256"`
	TextBytes  int    `json:"text_bytes"`
	Error      string `json:"error"`
	ErrorType  string `json:"error_type"`
}

// runeEncoder gives one id per rune: the corpus test renders, it does not
// count, but a Model needs an encoder.
type runeEncoder struct{}

func (e runeEncoder) AppendEncode(dst []int, text string, addSpecial bool) []int {
	return append(dst, e.Encode(text, addSpecial)...)
}

func (runeEncoder) Encode(text string, _ bool) []int {
	ids := make([]int, 0, len(text))
	for _, r := range text {
		ids = append(ids, int(r))
	}
	return ids
}

func (e runeEncoder) Count(text string, add bool, _ int) (int, bool) {
	return len(e.Encode(text, add)), true
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readCorpus returns the index and the templates by file name, each
// checked against its sha256 in index.json.
func readCorpus(t *testing.T, dir string) ([]corpusEntry, map[string]string) {
	t.Helper()
	var index []corpusEntry
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "index.json"))), &index); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range index {
		b, err := os.ReadFile(filepath.Join(dir, e.File))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256Hex(b); got != e.SHA256 {
			t.Errorf("%s: sha256 %s, index.json says %s", e.File, got, e.SHA256)
		}
		out[e.File] = string(b)
	}
	return index, out
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// corpusModel loads a model folder holding only a tokenizer_config.json
// with the template and the corpus' special tokens, as LoadDir loads a
// real one.
func corpusModel(t *testing.T, source string) *Model {
	t.Helper()
	cfg := map[string]string{"chat_template": source}
	for k, v := range corpusSpecial {
		cfg[k] = v
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := LoadDir(dir, LoadOptions{Encoder: runeEncoder{}, Now: goldenNow})
	if err != nil {
		t.Fatalf("a corpus template must never fail the load: %v", err)
	}
	return m
}

// TestTemplateCorpus renders every corpus template over the corpus
// conversations with the owned evaluator: a text whose SHA-256 is jinja2's
// wherever jinja2 rendered; where jinja2 raised, an error or a decline
// (forwarded for vLLM to refuse), never a render. A template that does not
// compile still loads, uncompiled. Every difference is a row of
// knownCorpusGaps.
func TestTemplateCorpus(t *testing.T) {
	dir := fixtures.TemplateDir(t)
	index, templates := readCorpus(t, dir)
	cases := readJSONL[corpusCase](t, filepath.Join("testdata", "corpus.cases.jsonl"))
	goldens := readJSONL[corpusGolden](t, filepath.Join("testdata", "corpus.golden.jsonl"))
	if len(index) < 90 {
		t.Errorf("corpus has %d templates, want at least 90", len(index))
	}
	bodies := map[string]*ojson.Value{}
	for _, c := range cases {
		v, err := ojson.Parse([]byte(c.Body), ojson.DefaultMaxDepth)
		if err != nil {
			t.Fatalf("case %s: %v", c.ID, err)
		}
		bodies[c.ID] = v
	}
	byTemplate := map[string][]corpusGolden{}
	for _, g := range goldens {
		byTemplate[g.Template] = append(byTemplate[g.Template], g)
	}
	for _, e := range index {
		gs := byTemplate[e.File]
		if len(gs) == 0 {
			t.Errorf("%s: no goldens (run python3 tools/chatgolden/corpus.py)", e.File)
		}
		for _, g := range gs {
			if g.SHA256 != e.SHA256 {
				t.Errorf("%s: goldens are of sha256 %s, the template is %s (run python3 tools/chatgolden/corpus.py)", e.File, g.SHA256, e.SHA256)
				break
			}
		}
	}
	for n := range byTemplate {
		if _, ok := templates[n]; !ok {
			t.Errorf("corpus.golden.jsonl names %s, which is not in the corpus", n)
		}
	}

	var ncases, identical, raisedBoth, declined int
	gapSeen := map[string]bool{}
	gap := func(name, key, why string) {
		if reason, known := knownCorpusGaps[name]; known {
			gapSeen[name] = true
			t.Logf("%s: known gap (%s): %s", key, reason, why)
			return
		}
		t.Errorf("%s: %s", key, why)
	}
	for _, e := range index {
		name := e.File
		m := corpusModel(t, templates[name])
		tm := m.ChatTemplate()
		if tm == nil {
			t.Fatalf("%s: the model has no chat template", name)
		}
		gs := byTemplate[name]
		if len(gs) == 1 && gs[0].ID == "compile" {
			// jinja2 does not compile it: neither may the owned evaluator.
			ncases++
			if tm.CompileErr() == nil {
				gap(name, name, "jinja2 does not compile it ("+gs[0].Error+"), the owned evaluator does")
			} else {
				raisedBoth++
			}
			continue
		}
		if ce := tm.CompileErr(); ce != nil {
			why := "not compiled: " + ce.Error()
			// Uncompiled: every request declines (forwarded). That is
			// right where jinja2 raised, a gap where it rendered.
			for _, g := range gs {
				ncases++
				if g.ErrorType != "" {
					declined++
				} else {
					gap(name, name+"/"+g.ID, why)
				}
			}
			continue
		}
		for _, g := range gs {
			ncases++
			key := name + "/" + g.ID
			body, ok := bodies[g.ID]
			if !ok {
				t.Fatalf("%s: no case %q in corpus.cases.jsonl", key, g.ID)
			}
			got, err := m.RenderChat(body)
			switch {
			case g.ErrorType == "" && err == nil && len(got) == g.TextBytes && sha256Hex([]byte(got)) == g.TextSHA256:
				identical++
			case g.ErrorType == "" && err != nil:
				gap(name, key, "jinja2 renders, the owned evaluator fails: "+err.Error())
			case g.ErrorType == "":
				gap(name, key, fmt.Sprintf("render differs: %d bytes, jinja2 %d", len(got), g.TextBytes))
			case err == nil:
				gap(name, key, "jinja2 raised "+g.ErrorType+" ("+g.Error+"), the owned evaluator rendered")
			default:
				var te *TemplateError
				switch {
				case !errors.As(err, &te):
					declined++ // not counted: forwarded for vLLM to refuse
				case g.ErrorType == "TemplateError" && te.Message != g.Error:
					gap(name, key, "raised "+strings.TrimSpace(te.Message)+", jinja2 raised "+g.Error)
				default:
					raisedBoth++ // refused at the door, as vLLM would
				}
			}
		}
	}
	var stale []string
	for name := range knownCorpusGaps {
		if !gapSeen[name] {
			stale = append(stale, name)
		}
	}
	slices.Sort(stale)
	for _, name := range stale {
		t.Errorf("%s: listed in knownCorpusGaps but the owned evaluator now matches jinja2 on every case (or the template is gone): remove the row", name)
	}
	t.Logf("corpus: %d templates, %d cases: %d renders identical to jinja2, %d raised by both, %d declined where jinja2 raised, %d templates with known gaps",
		len(index), ncases, identical, raisedBoth, declined, len(gapSeen))
}
