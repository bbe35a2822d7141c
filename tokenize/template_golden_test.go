package tokenize

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
)

// goldenNow is the clock tools/chatgolden renders with.
var goldenNow = func() time.Time { return time.Date(2026, 3, 5, 14, 7, 9, 0, time.Local) }

type chatGolden struct {
	ID        string `json:"id"`
	Body      string `json:"body"`
	Text      string `json:"text"`
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
	Tokens    *int   `json:"tokens"`
}

func readChatGoldens(t testing.TB, model string) []chatGolden {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "chat", model+".golden.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []chatGolden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g chatGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

var (
	modelMu    sync.Mutex
	modelCache = map[string]*Model{}
)

// fixtureModel loads a fixture model once per test binary.
func fixtureModel(t testing.TB, name string) *Model {
	t.Helper()
	modelMu.Lock()
	defer modelMu.Unlock()
	if m := modelCache[name]; m != nil {
		return m
	}
	m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, name), LoadOptions{Now: goldenNow})
	if err != nil {
		t.Fatal(err)
	}
	modelCache[name] = m
	return m
}

// knownRenderGaps lists golden cases where this package knowingly differs
// from Python, with the cause. Keep it empty where possible.
var knownRenderGaps = map[string]string{}

// TestChatGoldens compares renders (and token counts, when the golden has
// them) with Python jinja2 in transformers' configuration.
func TestChatGoldens(t *testing.T) {
	for _, model := range []string{"qwen3", "llama3_1", "deepseek_v3", "gemma3"} {
		t.Run(model, func(t *testing.T) {
			m := fixtureModel(t, model)
			gs := readChatGoldens(t, model)
			same, counted := 0, 0
			for _, g := range gs {
				body, err := ojson.Parse([]byte(g.Body), ojson.DefaultMaxDepth)
				if err != nil {
					t.Fatalf("%s: body: %v", g.ID, err)
				}
				got, err := m.RenderChat(body)
				ok := false
				why := ""
				switch g.ErrorType {
				case "":
					ok = err == nil && got == g.Text
					if err != nil {
						why = "go error: " + err.Error()
					} else if !ok {
						why = "render differs:\n" + diffContext(g.Text, got)
					}
				case "TemplateError":
					var te *TemplateError
					ok = errors.As(err, &te) && te.Message == g.Error
					why = "want TemplateError " + g.Error + ", got " + errString(err)
				case "InputError":
					var ie *InputError
					var ne *NotExactError
					ok = errors.As(err, &ie) || errors.As(err, &ne)
					why = "want InputError, got " + errString(err)
				default:
					ok = err != nil
					why = "python raised " + g.ErrorType + ": " + g.Error + "; go: " + errString(err)
				}
				if !ok {
					if gap, known := knownRenderGaps[model+"/"+g.ID]; known {
						t.Logf("%s: known gap (%s)", g.ID, gap)
					} else {
						t.Errorf("%s: %s", g.ID, why)
					}
					continue
				}
				same++
				if g.Tokens != nil && err == nil {
					c, cerr := m.CountChat(body, 0)
					if cerr != nil || !c.Exact || c.Tokens != *g.Tokens {
						t.Errorf("%s: count %+v (err %v), want %d", g.ID, c, cerr, *g.Tokens)
					} else {
						counted++
					}
				}
			}
			t.Logf("%s: %d/%d renders identical to Python; %d counts equal to HF tokenizers", model, same, len(gs), counted)
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func diffContext(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-60)
	return "  want …" + strings.ReplaceAll(want[lo:min(len(want), i+60)], "\n", "⏎") +
		"\n  got  …" + strings.ReplaceAll(got[lo:min(len(got), i+60)], "\n", "⏎")
}

// TestModelConcurrentUse counts the golden conversations of one model from
// four goroutines at once (run under -race by make test): every count
// equals the golden, as it does alone.
func TestModelConcurrentUse(t *testing.T) {
	m := fixtureModel(t, "qwen3")
	var bodies []*ojson.Value
	var want []int
	for _, g := range readChatGoldens(t, "qwen3") {
		if g.Tokens == nil {
			continue
		}
		b, err := ojson.Parse([]byte(g.Body), 0)
		if err != nil {
			t.Fatal(err)
		}
		bodies, want = append(bodies, b), append(want, *g.Tokens)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for i, b := range bodies {
				if c, err := m.CountChat(b, 0); err != nil || c.Tokens != want[i] {
					errs <- fmt.Errorf("conversation %d: %+v %v, want %d", i, c, err, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
