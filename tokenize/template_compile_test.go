package tokenize

import (
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/internal/fixtures"
	"github.com/maitred-dev/maitred/internal/ojson"
)

// uncompilableTemplate is a chat template Python's jinja2 renders (the
// with statement is built in) that the evaluator does not parse: it stops
// at line 3.
const uncompilableTemplate = "{{ bos_token }}\n{%- for m in messages %}\n{%- with c = m['content'] %}{{ c }}{% endwith %}\n{%- endfor %}"

// TestUncompilableTemplateLoads: a chat template that does not compile is
// never a failed load (issue 26): the model loads, names the template's
// line and the reason, and counts its chat requests as not exact, for the
// gateway to forward them uncounted; its completions still count.
func TestUncompilableTemplateLoads(t *testing.T) {
	m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), LoadOptions{ChatTemplate: uncompilableTemplate})
	if err != nil {
		t.Fatalf("the model did not load: %v", err)
	}
	probs := m.TemplateProblems()
	if len(probs) != 1 || probs[0].Name != "default" || probs[0].Err.Line != 3 || !strings.Contains(probs[0].Err.Reason, `"with"`) {
		t.Fatalf("problems %+v, want the default template at line 3 (with)", probs)
	}
	if got := probs[0].Err.Error(); got != `chat template: line 3: not supported: statement "with"` {
		t.Errorf("error text %q", got)
	}
	body, _ := ojson.Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), ojson.DefaultMaxDepth)
	c, err := m.CountChat(body, 0)
	if err != nil || c.Exact || !strings.Contains(c.Reason, "line 3") {
		t.Fatalf("CountChat = %+v, %v; want not exact, naming the template's problem", c, err)
	}
	comp, _ := ojson.Parse([]byte(`{"model":"m","prompt":"hi"}`), ojson.DefaultMaxDepth)
	if c, err := m.CountCompletion(comp, 0); err != nil || !c.Exact || c.Tokens == 0 {
		t.Errorf("CountCompletion = %+v, %v; want an exact count", c, err)
	}
	// A lexer failure names its line too.
	if _, err := CompileTemplate("a\nb {# open"); err == nil || err.(*CompileError).Line != 2 {
		t.Errorf("lexer error %v, want line 2", err)
	}
}

// TestJambaLikeTemplateOwned: the Jamba-like template (macros called
// through a list with *args unpacking) compiles and
// counts a chat request exactly, where it used to stop the load.
func TestJambaLikeTemplateOwned(t *testing.T) {
	src := readFile(t, "testdata/chat/jamba_like.jinja")
	_, err := CompileTemplate(src)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	m, err := fixtureLoader.LoadDir(fixtures.ModelDir(t, "qwen3"), LoadOptions{ChatTemplate: src})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if ps := m.TemplateProblems(); len(ps) != 0 {
		t.Fatalf("template problems: %+v", ps)
	}
	body, _ := ojson.Parse([]byte(`{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`), ojson.DefaultMaxDepth)
	c, err := m.CountChat(body, 0)
	if err != nil || !c.Exact || c.Rendered != "<|bom|><|system|> S<|eom|><|bom|><|user|> hi<|eom|><|bom|><|assistant|>" {
		t.Fatalf("CountChat = %+v, %v", c, err)
	}
}
