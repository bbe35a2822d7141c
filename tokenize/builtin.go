package tokenize

import (
	"fmt"
	"strings"
	"sync"
)

// demoTemplate is ChatML: <|im_start|>role\ncontent<|im_end|>\n per
// message, tools listed in a system block, and <|im_start|>assistant\n as
// the generation prompt.
const demoTemplate = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{ messages[0].content + '\n\n' }}{% endif %}
{{- 'You may call these functions:\n' }}
{%- for tool in tools %}{{ tool | tojson }}{{ '\n' }}{% endfor %}
{{- '<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if not (message.role == 'system' and loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content }}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}{{ '\n<tool_call>' }}{{ call.function | tojson }}{{ '</tool_call>' }}{% endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// Demo special tokens: o200k_base has no ChatML tokens, so the demo model
// places them after the encoding's own specials.
var demoSpecials = map[string]int{
	"<|endoftext|>":   199999,
	"<|endofprompt|>": 200018,
	"<|im_start|>":    200264,
	"<|im_end|>":      200265,
}

var (
	o200kOnce sync.Once
	o200k     *Tokenizer
	o200kErr  error
)

// Builtin returns a model compiled into the binary. "demo" is o200k_base
// with a ChatML template; its context length is left to the configuration.
func Builtin(name string) (*Model, error) {
	if name != "demo" {
		return nil, fmt.Errorf("tokenize: unknown built-in model %q (have: demo)", name)
	}
	o200kOnce.Do(func() { o200k, o200kErr = NewOpenAI("o200k_base") })
	if o200kErr != nil {
		return nil, o200kErr
	}
	t, err := CompileTemplate(demoTemplate)
	if err != nil {
		return nil, err
	}
	return &Model{
		Name:      "demo",
		enc:       newSpecialSplitter(o200k, demoSpecials),
		templates: map[string]*Template{"default": t},
		special:   map[string]value{"eos_token": strV("<|im_end|>")},
	}, nil
}

// specialSplitter adds special tokens to an Encoder: they are split off
// (leftmost, then longest) and the text between them goes to the inner
// encoder. The demo model uses it for ChatML tokens o200k_base lacks.
type specialSplitter struct {
	inner    Encoder
	specials map[string]int
	names    []string
}

func newSpecialSplitter(inner Encoder, specials map[string]int) *specialSplitter {
	e := &specialSplitter{inner: inner, specials: specials}
	for s := range specials {
		e.names = append(e.names, s)
	}
	return e
}

// next returns the position and text of the leftmost (then longest)
// special token in s.
func (e *specialSplitter) next(s string) (int, string) {
	best, bestTok := -1, ""
	for _, n := range e.names {
		i := strings.Index(s, n)
		if i < 0 {
			continue
		}
		if best < 0 || i < best || (i == best && len(n) > len(bestTok)) {
			best, bestTok = i, n
		}
	}
	return best, bestTok
}

func (e *specialSplitter) Encode(text string, _ bool) []int {
	return e.AppendEncode(nil, text, false)
}

// AppendEncode appends text's ids to dst: the door's precise routing
// (routing: precise) encodes a prompt into a pooled buffer this way.
func (e *specialSplitter) AppendEncode(dst []int, text string, _ bool) []int {
	for text != "" {
		i, tok := e.next(text)
		seg := text
		if i >= 0 {
			seg = text[:i]
		}
		if seg != "" {
			dst = e.inner.AppendEncode(dst, seg, false)
		}
		if i < 0 {
			break
		}
		dst = append(dst, e.specials[tok])
		text = text[i+len(tok):]
	}
	return dst
}

func (e *specialSplitter) Count(text string, _ bool, limit int) (int, bool) {
	n := 0
	for text != "" {
		i, tok := e.next(text)
		seg := text
		if i >= 0 {
			seg = text[:i]
		}
		if seg != "" {
			rest := 0
			if limit > 0 {
				rest = max(limit-n, 0)
				if rest == 0 {
					return n + 1, false
				}
			}
			k, exact := e.inner.Count(seg, false, rest)
			n += k
			if !exact {
				return n, false
			}
		}
		if i < 0 {
			break
		}
		n++
		text = text[i+len(tok):]
		if limit > 0 && n > limit {
			return n, false
		}
	}
	return n, true
}
