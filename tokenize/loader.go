package tokenize

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync"
)

// Loader loads model folders as [LoadDir] does and shares, between the
// models it loads, what their files make identical, by content (SHA-256):
//
//   - a model whose inputs are all identical to a model it holds (the
//     folder's name, the bytes of every file LoadDir reads, the options)
//     is that *Model;
//   - a tokenizer.json with the same bytes (and the same BOS/EOS rebuild
//     from tokenizer_config.json) is one *Tokenizer;
//   - a chat template with the same source is one *Template.
//
// All three are immutable once loaded, so sharing them changes no count;
// a model's settings outside its folder (max_model_len, limits) are the
// gateway's, per model name. A load with LoadOptions.Now or Encoder is
// its own model (it shares its tokenizer and templates). A shared
// tokenizer's Name is the path it was first loaded from.
//
// Loads go through a [LoadPass] (one config's models): a file several
// models name is read and hashed once in a pass; the next pass (a reload)
// hashes it again, so a changed file loads fresh. [Loader.Keep] drops
// what the models in force no longer use. Safe for concurrent use; two
// concurrent loads of one tokenizer parse it once.
type Loader struct {
	mu     sync.Mutex
	models map[[32]byte]*Model
	toks   map[tokKey]*tokEntry
	tmpls  map[[32]byte]*Template
	parsed int // tokenizers parsed (LoaderStats)
}

// tokKey names a shared tokenizer: tokenizer.json's content and the
// post-processor tokenizer_config.json rebuilds.
type tokKey struct {
	sum [32]byte
	bos bosSpec
}

// tokEntry is a tokenizer loaded or being loaded: done is closed once tok
// or err is set. base is the parsed tokenizer a rebuilt one derives from
// (nil for a parsed one).
type tokEntry struct {
	done chan struct{}
	tok  *Tokenizer
	sum  [32]byte // of the bytes parsed
	err  error
	base *Tokenizer
}

// NewLoader returns an empty Loader.
func NewLoader() *Loader {
	return &Loader{models: map[[32]byte]*Model{}, toks: map[tokKey]*tokEntry{}, tmpls: map[[32]byte]*Template{}}
}

// LoadPass is one pass of loads (a config's models): each file is hashed
// once in it. Safe for concurrent use.
type LoadPass struct {
	l    *Loader
	mu   sync.Mutex
	sums map[string][32]byte // file path -> content hash, as first read
}

// Pass starts a pass of loads.
func (l *Loader) Pass() *LoadPass { return &LoadPass{l: l, sums: map[string][32]byte{}} }

// LoadDir loads one model folder in a pass of its own.
func (l *Loader) LoadDir(dir string, opts LoadOptions) (*Model, error) {
	return l.Pass().LoadDir(dir, opts)
}

// LoadDir is [LoadDir], sharing through the pass's Loader.
func (p *LoadPass) LoadDir(dir string, opts LoadOptions) (*Model, error) {
	return loadDir(dir, opts, p)
}

// LoaderStats is what a Loader holds.
type LoaderStats struct {
	Models, Tokenizers, Templates int
	// Parsed counts the tokenizer.json files parsed since NewLoader.
	Parsed int
}

// Stats reports what l holds.
func (l *Loader) Stats() LoaderStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return LoaderStats{Models: len(l.models), Tokenizers: len(l.toks), Templates: len(l.tmpls), Parsed: l.parsed}
}

// Keep drops every model, tokenizer and template none of models uses (the
// models in force after a config is loaded or reloaded). A load in
// flight keeps its tokenizer.
func (l *Loader) Keep(models iter.Seq[*Model]) {
	keepM, keepT, keepTpl := map[*Model]bool{}, map[*Tokenizer]bool{}, map[*Template]bool{}
	for m := range models {
		if m == nil {
			continue
		}
		keepM[m] = true
		if t, ok := m.enc.(*Tokenizer); ok {
			keepT[t] = true
		}
		for _, t := range m.templates {
			keepTpl[t] = true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.toks {
		if e.base != nil && keepT[e.tok] {
			keepT[e.base] = true // what a rebuild of another bos would parse again
		}
	}
	for k, m := range l.models {
		if !keepM[m] {
			delete(l.models, k)
		}
	}
	for k, e := range l.toks {
		select {
		case <-e.done:
			if !keepT[e.tok] {
				delete(l.toks, k)
			}
		default:
		}
	}
	for k, t := range l.tmpls {
		if !keepTpl[t] {
			delete(l.tmpls, k)
		}
	}
}

// fileSum is the SHA-256 of the file at path, read once per pass.
func (p *LoadPass) fileSum(path string) ([32]byte, error) {
	p.mu.Lock()
	sum, ok := p.sums[path]
	p.mu.Unlock()
	if ok {
		return sum, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	p.mu.Lock()
	p.sums[path] = sum
	p.mu.Unlock()
	return sum, nil
}

func (l *Loader) cachedModel(key [32]byte) *Model {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.models[key]
}

// keepModel holds m under key, or returns the model a concurrent load of
// the same inputs put there first.
func (l *Loader) keepModel(key [32]byte, m *Model) *Model {
	l.mu.Lock()
	defer l.mu.Unlock()
	if have := l.models[key]; have != nil {
		return have
	}
	l.models[key] = m
	return m
}

// tokenizer returns the tokenizer of the tokenizer.json at path whose
// content hashed to sum, with bos applied, parsing it unless l holds it
// (with any bos: a rebuilt post-processor shares the parsed tables).
// used is the hash of the bytes parsed: not sum when the file changed
// since it was hashed (the tokenizer is then not kept under sum). A
// failed load is not kept.
func (l *Loader) tokenizer(path string, sum [32]byte, bos bosSpec) (tok *Tokenizer, used [32]byte, err error) {
	base, used, err := l.parsedTokenizer(path, sum)
	if err != nil || !bos.rebuild {
		return base, used, err
	}
	k := tokKey{used, bos}
	l.mu.Lock()
	e := l.toks[k]
	l.mu.Unlock()
	if e != nil {
		return e.tok, used, nil
	}
	if tok, err = bos.apply(base); err != nil {
		return nil, used, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.toks[k]; e != nil {
		return e.tok, used, nil
	}
	if used == sum {
		done := make(chan struct{})
		close(done)
		l.toks[k] = &tokEntry{done: done, tok: tok, sum: used, base: base}
	}
	return tok, used, nil
}

// parsedTokenizer is tokenizer.json at path as parsed (no bos applied):
// one parse per content, however many load it at once.
func (l *Loader) parsedTokenizer(path string, sum [32]byte) (*Tokenizer, [32]byte, error) {
	k := tokKey{sum: sum}
	l.mu.Lock()
	e := l.toks[k]
	owner := e == nil
	if owner {
		e = &tokEntry{done: make(chan struct{})}
		l.toks[k] = e
	}
	l.mu.Unlock()
	if !owner {
		<-e.done
		return e.tok, e.sum, e.err
	}
	e.tok, e.sum, e.err = parseTokenizerFile(path)
	l.mu.Lock()
	if e.err == nil {
		l.parsed++
	}
	if e.err != nil || e.sum != sum {
		delete(l.toks, k)
	}
	l.mu.Unlock()
	close(e.done)
	return e.tok, e.sum, e.err
}

// LoadTokenizerJSON is [LoadTokenizerJSON] through l: a tokenizer.json
// with the same bytes as one l holds is that tokenizer (as parsed,
// before any model folder's BOS/EOS settings).
func (l *Loader) LoadTokenizerJSON(path string) (*Tokenizer, error) {
	sum, err := l.Pass().fileSum(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if t, _, err := l.parsedTokenizer(path, sum); err == nil {
		return t, nil
	}
	return LoadTokenizerJSON(path) // its error, in its words
}

// parseTokenizerFile loads the tokenizer.json at path, and the hash of
// the bytes it parsed.
func parseTokenizerFile(path string) (*Tokenizer, [32]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, [32]byte{}, err
	}
	sum := sha256.Sum256(data)
	t, err := ParseTokenizerJSON(data)
	if err != nil {
		return nil, sum, err
	}
	t.name = path
	return t, sum, nil
}

// template compiles source (compileOrKeep) unless l holds it.
func (l *Loader) template(source string) *Template {
	key := sha256.Sum256([]byte(source))
	l.mu.Lock()
	t := l.tmpls[key]
	l.mu.Unlock()
	if t != nil {
		return t
	}
	t = compileOrKeep(source)
	l.mu.Lock()
	defer l.mu.Unlock()
	if have := l.tmpls[key]; have != nil {
		return have
	}
	l.tmpls[key] = t
	return t
}

// folderFile is a file of a model folder as read: ok is false when it
// could not be.
type folderFile struct {
	data []byte
	ok   bool
}

// folderFiles are the small files LoadDir reads from a model folder
// (tokenizer.json, the large one, is read apart).
type folderFiles struct {
	config      folderFile // tokenizer_config.json
	modelConfig folderFile // config.json
	ctJSON      folderFile // chat_template.json
	ctJinja     folderFile // chat_template.jinja
}

// readFolder reads dir's small files. Only tokenizer_config.json fails the
// load, when it exists and cannot be read; the others are optional.
func readFolder(dir string) (folderFiles, error) {
	var f folderFiles
	read := func(name string) (folderFile, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return folderFile{data: b, ok: err == nil}, err
	}
	var err error
	if f.config, err = read("tokenizer_config.json"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return f, fmt.Errorf("tokenize: %w", err)
	}
	f.modelConfig, _ = read("config.json")
	f.ctJSON, _ = read("chat_template.json")
	f.ctJinja, _ = read("chat_template.jinja")
	return f, nil
}

// modelKey is the hash of every input of a model's load: its name, the
// folder's files (tokenizer.json by its hash), the template override and
// the options a Loader shares models across.
func (f folderFiles) modelKey(name string, tokSum [32]byte, override templateOverride, opts LoadOptions) [32]byte {
	h := sha256.New()
	field := func(ok bool, b []byte) {
		var n [9]byte
		if ok {
			n[0] = 1
		}
		binary.LittleEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(true, []byte(name))
	field(true, tokSum[:])
	for _, ff := range []folderFile{f.config, f.modelConfig, f.ctJSON, f.ctJinja} {
		field(ff.ok, ff.data)
	}
	field(override.set, []byte(override.src))
	field(true, []byte(opts.ContentFormat))
	field(true, []byte(opts.DefaultChatTemplateKwargs))
	var key [32]byte
	h.Sum(key[:0])
	return key
}
