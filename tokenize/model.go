package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// LoadOptions adjusts how a model folder is loaded.
type LoadOptions struct {
	// ChatTemplate overrides the folder's template, as vLLM's
	// --chat-template: a path to a file, or the template text itself
	// (recognised by containing one of "{", "}" or a newline).
	ChatTemplate string
	// ContentFormat forces vLLM's --chat-template-content-format; empty
	// means auto detection from the template.
	ContentFormat ContentFormat
	// DefaultChatTemplateKwargs is vLLM's --default-chat-template-kwargs, a
	// JSON object; request chat_template_kwargs win over it.
	DefaultChatTemplateKwargs string
	// Encoder replaces tokenizer.json (tests, built-in models).
	Encoder Encoder
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
}

// Model is a tokenizer plus chat template, loaded the way vLLM loads a
// model folder. Safe for concurrent use.
type Model struct {
	Name string

	enc Encoder
	// templates: "default" is the chat template; a folder with named
	// templates may add "tool_use" (chosen when the request has tools, as
	// transformers' get_chat_template does) and others.
	templates     map[string]*Template
	contentFormat ContentFormat // forced; "" = per template
	special       map[string]value
	defaultKwargs *ojson.Value
	now           func() time.Time
	// cleanUp is tokenizer_config.json's clean_up_tokenization_spaces
	// (nil: not set), which transformers' decode applies.
	cleanUp *bool
	// modelVocab is config.json's vocab_size (its text_config's for a
	// multimodal model); 0 when the folder has none (VocabSize).
	modelVocab int
	// renders counts chat template renders (ChatRenders).
	renders atomic.Int64
	// chatReqs pools prepared chat requests (*chatRequest) with their
	// message slabs, given back once a render is done.
	chatReqs sync.Pool
}

// ChatRenders is the number of chat template renders the model has done
// (CountChat, RenderChat, TokenizeChat): the costliest step of counting a
// chat request, which a request should pay once (a Model a Loader gives
// to several names counts the renders of all). For tests and diagnostics.
func (m *Model) ChatRenders() int64 { return m.renders.Load() }

// VocabSize is the bound vLLM holds prompt token ids to: an id is in the
// vocabulary when it is below the larger of the tokenizer's length
// (len(tokenizer): its vocabulary and added tokens) and the model's
// vocab_size from the folder's config.json, which may be larger (Qwen3's
// embedding table is padded past its tokenizer's 151,669 ids to 151,936;
// vLLM accepts ids up to either). 0 when neither is known (an Encoder
// given in LoadOptions that does not say its size, and no config.json).
func (m *Model) VocabSize() int {
	n := m.modelVocab
	if s, ok := m.enc.(interface{ Size() int }); ok {
		n = max(n, s.Size())
	}
	return n
}

// Encoder returns the model's tokenizer.
func (m *Model) Encoder() Encoder { return m.enc }

// ChatTemplate returns the default chat template, or nil if the model has
// none.
func (m *Model) ChatTemplate() *Template { return m.templates["default"] }

// LoadDir loads a Hugging Face model folder: tokenizer.json,
// tokenizer_config.json, and chat_template.jinja or chat_template.json when
// present (they win over tokenizer_config.json's chat_template, which may
// be a string or a list of named templates), then opts.ChatTemplate over
// all of them. A folder without any chat template loads; CountChat then
// reports the count as not exact, as vLLM would refuse the request.
// A [Loader] loads the same way, sharing what two folders have identical.
func LoadDir(dir string, opts LoadOptions) (*Model, error) {
	return loadDir(dir, opts, nil)
}

// loadDir is LoadDir, through pass p when not nil: the tokenizer and the
// templates come from p's Loader, and a model whose inputs are all
// identical to one it holds is that model.
func loadDir(dir string, opts LoadOptions, p *LoadPass) (*Model, error) {
	files, err := readFolder(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Name: filepath.Base(dir), templates: map[string]*Template{}, now: opts.Now}
	cfg, err := m.loadConfig(dir, files)
	if err != nil {
		return nil, err
	}
	var override templateOverride
	if opts.ChatTemplate != "" {
		override.set = true
		override.src, override.err = resolveTemplateOption(opts.ChatTemplate)
	}

	// Tokenizer.
	var key [32]byte
	keyed := false
	if opts.Encoder != nil {
		m.enc = opts.Encoder
	} else {
		path := filepath.Join(dir, "tokenizer.json")
		bos, bosErr := bosConfig(cfg)
		var tok *Tokenizer
		if p == nil {
			if tok, err = LoadTokenizerJSON(path); err != nil {
				return nil, err
			}
		} else {
			sum, err := p.fileSum(path)
			if err != nil {
				return nil, fmt.Errorf("tokenize: %w", err)
			}
			if keyed = opts.Now == nil && override.err == nil && bosErr == nil; keyed {
				key = files.modelKey(m.Name, sum, override, opts)
				if cached := p.l.cachedModel(key); cached != nil {
					return cached, nil
				}
			}
			var used [32]byte
			if tok, used, err = p.l.tokenizer(path, sum, bos); err != nil {
				// Another load's failure, or this one's: loaded alone,
				// the error names this folder.
				return LoadDir(dir, opts)
			}
			keyed = keyed && used == sum
		}
		if bosErr != nil {
			return nil, fmt.Errorf("tokenize: %s: %w", dir, bosErr)
		}
		if p == nil {
			if tok, err = bos.apply(tok); err != nil {
				return nil, fmt.Errorf("tokenize: %s: %w", dir, err)
			}
		}
		m.enc = tok
	}

	compile := compileOrKeep
	if p != nil {
		compile = p.l.template
	}
	if err := m.loadTemplates(dir, cfg, files, override, compile); err != nil {
		return nil, err
	}
	if err := m.setOptions(opts); err != nil {
		return nil, err
	}
	if keyed {
		return p.l.keepModel(key, m), nil
	}
	return m, nil
}

// loadConfig reads tokenizer_config.json (returned, parsed at its top
// level), the special tokens and clean-up flag it sets, and config.json's
// vocabulary size.
func (m *Model) loadConfig(dir string, files folderFiles) (map[string]json.RawMessage, error) {
	cfg := map[string]json.RawMessage{}
	if files.config.ok {
		if err := json.Unmarshal(files.config.data, &cfg); err != nil {
			return nil, fmt.Errorf("tokenize: %s: tokenizer_config.json: %w", dir, err)
		}
	}
	if err := m.loadSpecial(dir, cfg); err != nil {
		return nil, err
	}
	if raw, ok := cfg["clean_up_tokenization_spaces"]; ok && string(raw) != "null" {
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("tokenize: %s: clean_up_tokenization_spaces: %w", dir, err)
		}
		m.cleanUp = &b
	}
	m.modelVocab = modelVocabSize(files.modelConfig)
	return cfg, nil
}

// loadSpecial reads the special-token strings, as transformers'
// special_tokens_map passes them to the template.
func (m *Model) loadSpecial(dir string, cfg map[string]json.RawMessage) error {
	m.special = map[string]value{}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		s, ok, err := tokenString(cfg[k])
		if err != nil {
			return fmt.Errorf("tokenize: %s: tokenizer_config.json %s: %w", dir, k, err)
		}
		if ok {
			m.special[k] = strV(s)
		}
	}
	if raw, ok := cfg["additional_special_tokens"]; ok && string(raw) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("tokenize: %s: additional_special_tokens: %w", dir, err)
		}
		items := make([]value, 0, len(list))
		for _, r := range list {
			s, ok, err := tokenString(r)
			if err != nil || !ok {
				return fmt.Errorf("tokenize: %s: additional_special_tokens: bad entry %s", dir, r)
			}
			items = append(items, strV(s))
		}
		m.special["additional_special_tokens"] = listV(items)
	}

	return nil
}

// modelVocabSize is config.json's vocab_size (or its text_config's), 0
// when the folder has none (f: config.json as read): the model's own vocabulary size, when the
// folder is the model's.
func modelVocabSize(f folderFile) int {
	if !f.ok {
		return 0
	}
	b := f.data
	var mc struct {
		VocabSize  *int `json:"vocab_size"`
		TextConfig *struct {
			VocabSize *int `json:"vocab_size"`
		} `json:"text_config"`
	}
	// A config.json this cannot read (Python's json writes NaN) only
	// leaves the model's size unknown: the tokenizer's stands.
	switch err := json.Unmarshal(b, &mc); {
	case err != nil:
	case mc.VocabSize != nil:
		return max(*mc.VocabSize, 0)
	case mc.TextConfig != nil && mc.TextConfig.VocabSize != nil:
		return max(*mc.TextConfig.VocabSize, 0)
	}
	return 0
}

// loadTemplates reads the chat templates, lowest priority first:
// tokenizer_config.json's, chat_template.json, chat_template.jinja, then
// the override, each compiled by compile.
func (m *Model) loadTemplates(dir string, cfg map[string]json.RawMessage, files folderFiles, override templateOverride, compile func(string) *Template) error {
	if raw, ok := cfg["chat_template"]; ok {
		if err := m.addConfigTemplates(raw, compile); err != nil {
			return fmt.Errorf("tokenize: %s: tokenizer_config.json chat_template: %w", dir, err)
		}
	}
	if files.ctJSON.ok {
		var ct struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(files.ctJSON.data, &ct); err != nil {
			return fmt.Errorf("tokenize: %s: chat_template.json: %w", dir, err)
		}
		m.templates = map[string]*Template{}
		if err := m.addConfigTemplates(ct.ChatTemplate, compile); err != nil {
			return fmt.Errorf("tokenize: %s: chat_template.json: %w", dir, err)
		}
	}
	if files.ctJinja.ok {
		m.templates = map[string]*Template{"default": compile(string(files.ctJinja.data))}
	}
	if override.err != nil {
		return override.err
	}
	if override.set {
		m.templates = map[string]*Template{"default": compile(override.src)}
	}
	return nil
}

func (m *Model) setOptions(opts LoadOptions) error {
	switch opts.ContentFormat {
	case "", ContentString, ContentOpenAI:
		m.contentFormat = opts.ContentFormat
	default:
		return fmt.Errorf("tokenize: content format %q: want %q or %q", opts.ContentFormat, ContentString, ContentOpenAI)
	}
	if opts.DefaultChatTemplateKwargs != "" {
		v, err := ojson.Parse([]byte(opts.DefaultChatTemplateKwargs), ojson.DefaultMaxDepth)
		if err != nil || v.Kind != ojson.Object {
			return fmt.Errorf("tokenize: default chat template kwargs: not a JSON object")
		}
		m.defaultKwargs = v
	}
	return nil
}

// addConfigTemplates adds a chat_template value: a string, or a list of
// {"name", "template"}.
func (m *Model) addConfigTemplates(raw json.RawMessage, compile func(string) *Template) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		m.templates["default"] = compile(s)
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("neither a string nor a list of named templates")
	}
	for _, e := range list {
		m.templates[e.Name] = compile(e.Template)
	}
	return nil
}

// compileOrKeep compiles a chat template; one that does not compile is
// kept as such (Template.CompileErr), never a failed load: vLLM, whose
// Python jinja2 may render what no path here parses, serves the model,
// and so does the gateway, forwarding its requests uncounted.
func compileOrKeep(source string) *Template {
	t, err := CompileTemplate(source)
	if err != nil {
		return uncompiled(source, err)
	}
	return t
}

// TemplateProblem is a chat template of the model that did not compile.
type TemplateProblem struct {
	Name string // "default", or the named template's name
	Err  *CompileError
}

// TemplateProblems lists the model's chat templates that did not compile,
// by name: the requests that would render them are forwarded uncounted
// (CountChat reports them not exact).
func (m *Model) TemplateProblems() []TemplateProblem {
	var out []TemplateProblem
	for name, t := range m.templates {
		if t.broken != nil {
			out = append(out, TemplateProblem{Name: name, Err: t.broken})
		}
	}
	slices.SortFunc(out, func(a, b TemplateProblem) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// templateOverride is LoadOptions.ChatTemplate resolved: its source, or
// why it could not be read; set is false when there is none.
type templateOverride struct {
	set bool
	src string
	err error
}

// resolveTemplateOption reads a --chat-template value as vLLM's
// load_chat_template does.
func resolveTemplateOption(v string) (string, error) {
	if b, err := os.ReadFile(v); err == nil {
		return string(b), nil
	}
	if strings.ContainsAny(v, "{}\n") {
		return v, nil
	}
	return "", fmt.Errorf("tokenize: chat template %q looks like a file path but could not be opened", v)
}

// tokenString reads a special token given as a string or as an AddedToken
// object {"content": ...}. ok is false for a missing or null token.
func tokenString(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf("want a string or {\"content\": ...}, got %s", raw)
	}
	return *obj.Content, true, nil
}

// bosSpec is what tokenizer_config.json asks of the tokenizer's
// post-processor (bosConfig): nothing (rebuild false), or the BOS and EOS
// token strings to add ("" for none).
type bosSpec struct {
	rebuild  bool
	bos, eos string
}

// bosConfig mirrors transformers' LlamaTokenizerFast and
// GemmaTokenizerFast, which rebuild the post-processor from
// tokenizer_config.json's add_bos_token (default true) and add_eos_token
// (default false). Other tokenizer classes keep tokenizer.json's
// post-processor.
func bosConfig(cfg map[string]json.RawMessage) (bosSpec, error) {
	var class string
	_ = json.Unmarshal(cfg["tokenizer_class"], &class)
	switch strings.TrimSuffix(class, "Fast") {
	case "LlamaTokenizer", "GemmaTokenizer", "CodeLlamaTokenizer":
	default:
		return bosSpec{}, nil
	}
	addBOS, addEOS := true, false
	if raw, ok := cfg["add_bos_token"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &addBOS); err != nil {
			return bosSpec{}, fmt.Errorf("add_bos_token: %w", err)
		}
	}
	if raw, ok := cfg["add_eos_token"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &addEOS); err != nil {
			return bosSpec{}, fmt.Errorf("add_eos_token: %w", err)
		}
	}
	spec := bosSpec{rebuild: true}
	if addBOS {
		s, ok, err := tokenString(cfg["bos_token"])
		if err != nil || !ok {
			return bosSpec{}, fmt.Errorf("add_bos_token is set but bos_token is missing")
		}
		spec.bos = s
	}
	if addEOS {
		s, ok, err := tokenString(cfg["eos_token"])
		if err != nil || !ok {
			return bosSpec{}, fmt.Errorf("add_eos_token is set but eos_token is missing")
		}
		spec.eos = s
	}
	return spec, nil
}

// apply gives tok the post-processor s asks for.
func (s bosSpec) apply(tok *Tokenizer) (*Tokenizer, error) {
	if !s.rebuild {
		return tok, nil
	}
	out, ok := tok.WithSpecials(s.bos, s.eos)
	if !ok {
		return nil, fmt.Errorf("bos/eos token %q/%q is not in the vocabulary", s.bos, s.eos)
	}
	return out, nil
}
