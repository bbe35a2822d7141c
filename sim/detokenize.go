package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// TokenDecoder turns token ids back into text, as vLLM's POST /detokenize
// does with tokenizer.decode (special tokens kept). Implementations must be
// safe for concurrent use.
type TokenDecoder interface {
	DecodeTokens(ids []int) (string, error)
}

type detokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// detokenize serves POST /detokenize {model?, tokens: [int]} -> {prompt}.
// Like vLLM it has no length check and no API key (not under /v1); ids a
// Python int cannot convert to the tokenizer's u32 are a 400, unknown ids
// are skipped as Hugging Face tokenizers skip them.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request, body []byte) {
	cfg := s.Config()
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return
	}
	v, e := parseObject(body)
	if e != nil {
		writeAPIError(w, e)
		return
	}
	toks := v.Get("tokens")
	if toks == nil {
		writeAPIError(w, fieldError("tokens", "missing", "Field required"))
		return
	}
	if toks.Kind != ojson.Array {
		writeAPIError(w, fieldError("tokens", "list_type", "Input should be a valid list"))
		return
	}
	ids := make([]int, len(toks.Items))
	for i, it := range toks.Items {
		loc := []any{"body", "tokens", i}
		if it.Kind != ojson.Number {
			writeAPIError(w, requestValidationError("int_type", loc, "Input should be a valid integer", strp(dotted(loc))))
			return
		}
		if !isInt(it) {
			writeAPIError(w, requestValidationError("int_from_float", loc,
				"Input should be a valid integer, got a number with a fractional part", strp(dotted(loc))))
			return
		}
		f := it.Float()
		if n, ok := it.Int(); ok {
			f = float64(n)
		}
		if f < 0 || f > math.MaxUint32 {
			writeAPIError(w, badInput("out of range integral type conversion attempted"))
			return
		}
		ids[i] = int(f)
	}
	if e := checkModel(v, cfg); e != nil {
		writeAPIError(w, e)
		return
	}
	dec := cfg.Detokenizer
	if dec == nil {
		dec, _ = cfg.Tokenizer.(TokenDecoder)
	}
	if dec == nil {
		writeAPIError(w, &apiError{Status: http.StatusNotImplemented, Type: "NotImplementedError",
			Message: "The simulator's tokenizer cannot decode token ids (set Config.Detokenizer)"})
		return
	}
	text, err := dec.DecodeTokens(ids)
	if err != nil {
		writeAPIError(w, badInput(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, detokenizeResponse{Prompt: text})
}

// DecodeTokens implements TokenDecoder, approximately: Approx's piece ids
// are hashes and cannot be inverted, so each decodes to "<|piece_ID|>";
// its template ids decode to "<s>", "<|im_start|>", "<|im_end|>" and "\n",
// and its ids for other characters to the character (exact below U+0384).
// Ids Approx never produces are skipped.
func (Approx) DecodeTokens(ids []int) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id == approxBOS:
			b.WriteString("<s>")
		case id == approxStart:
			b.WriteString("<|im_start|>")
		case id == approxEnd:
			b.WriteString("<|im_end|>")
		case id == approxNL:
			b.WriteString("\n")
		case id >= 100 && id < 1000:
			b.WriteRune(rune(id - 100))
		case id >= 1000 && id < 31000:
			fmt.Fprintf(&b, "<|piece_%d|>", id)
		}
	}
	return b.String(), nil
}

var _ TokenDecoder = Approx{}

// LoadVocabDecoder reads a Hugging Face tokenizer.json and returns a
// decoder for its vocabulary (model.vocab and added_tokens) and its decoder
// pipeline: ByteLevel, Metaspace, or a Sequence of Replace, ByteFallback,
// Fuse and Strip (the Llama 2 and Gemma style). maitred sim --tokenizer DIR
// uses it for /detokenize.
func LoadVocabDecoder(path string) (TokenDecoder, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	var tj struct {
		Model struct {
			Type  string          `json:"type"`
			Vocab json.RawMessage `json:"vocab"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Decoder json.RawMessage `json:"decoder"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("sim: %s: %w", path, err)
	}
	vocab := map[string]int{}
	if err := json.Unmarshal(tj.Model.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("sim: %s: model type %q: vocab is not a token->id map", path, tj.Model.Type)
	}
	d := &vocabDecoder{tokens: make(map[int]string, len(vocab)+len(tj.AddedTokens))}
	for tok, id := range vocab {
		d.tokens[id] = tok
	}
	for _, a := range tj.AddedTokens {
		d.tokens[a.ID] = a.Content
	}
	if d.steps, err = decoderSteps(tj.Decoder); err != nil {
		return nil, fmt.Errorf("sim: %s: decoder: %w", path, err)
	}
	return d, nil
}

// vocabDecoder is a tokenizer.json vocabulary and its decoder steps.
type vocabDecoder struct {
	tokens map[int]string
	steps  []decodeStep
}

// decodeStep is one Hugging Face decoder over the token strings.
type decodeStep func(toks []string) []string

func (d *vocabDecoder) DecodeTokens(ids []int) (string, error) {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if t, ok := d.tokens[id]; ok {
			toks = append(toks, t)
		}
	}
	for _, st := range d.steps {
		toks = st(toks)
	}
	return strings.Join(toks, ""), nil
}

func decoderSteps(raw json.RawMessage) ([]decodeStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
		Pattern  struct {
			String string `json:"String"`
		} `json:"pattern"`
		Content       string `json:"content"`
		Start         int    `json:"start"`
		Stop          int    `json:"stop"`
		Replacement   string `json:"replacement"`
		PrependScheme string `json:"prepend_scheme"`
		AddPrefix     *bool  `json:"add_prefix_space"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var out []decodeStep
		for _, sub := range c.Decoders {
			st, err := decoderSteps(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, st...)
		}
		return out, nil
	case "ByteLevel":
		return []decodeStep{byteLevelStep}, nil
	case "Replace":
		from, to := c.Pattern.String, c.Content
		return []decodeStep{func(toks []string) []string {
			for i, t := range toks {
				toks[i] = strings.ReplaceAll(t, from, to)
			}
			return toks
		}}, nil
	case "ByteFallback":
		return []decodeStep{byteFallbackStep}, nil
	case "Fuse":
		return []decodeStep{func(toks []string) []string { return []string{strings.Join(toks, "")} }}, nil
	case "Strip":
		return []decodeStep{stripStep(c.Content, c.Start, c.Stop)}, nil
	case "Metaspace":
		rep := c.Replacement
		if rep == "" {
			rep = "▁"
		}
		prefix := c.PrependScheme != "never" && (c.AddPrefix == nil || *c.AddPrefix)
		return []decodeStep{func(toks []string) []string {
			for i, t := range toks {
				t = strings.ReplaceAll(t, rep, " ")
				if i == 0 && prefix {
					t = strings.TrimPrefix(t, " ")
				}
				toks[i] = t
			}
			return toks
		}}, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", c.Type)
}

// byteLevelStep maps GPT-2's byte alphabet back to bytes; characters
// outside it (added tokens) stay as they are.
func byteLevelStep(toks []string) []string {
	var b []byte
	for _, t := range toks {
		for _, r := range t {
			if c, ok := gpt2Bytes[r]; ok {
				b = append(b, c)
			} else {
				b = utf8.AppendRune(b, r)
			}
		}
	}
	return []string{strings.ToValidUTF8(string(b), "\uFFFD")}
}

// byteFallbackStep turns runs of <0xNN> tokens into the text they encode
// (one U+FFFD per byte when the bytes are not UTF-8).
func byteFallbackStep(toks []string) []string {
	out := make([]string, 0, len(toks))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			out = append(out, strings.Repeat("\uFFFD", len(pending)))
		}
		pending = pending[:0]
	}
	for _, t := range toks {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if n, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				pending = append(pending, byte(n))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// stripStep removes up to start leading and stop trailing content
// characters from every token.
func stripStep(content string, start, stop int) decodeStep {
	return func(toks []string) []string {
		for i, t := range toks {
			for n := 0; n < start && content != "" && strings.HasPrefix(t, content); n++ {
				t = t[len(content):]
			}
			for n := 0; n < stop && content != "" && strings.HasSuffix(t, content); n++ {
				t = t[:len(t)-len(content)]
			}
			toks[i] = t
		}
		return toks
	}
}

// gpt2Bytes inverts GPT-2's bytes_to_unicode: printable Latin-1 bytes map
// to themselves, the other 68 bytes to U+0100 onwards.
var gpt2Bytes = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
			continue
		}
		m[next] = byte(b)
		next++
	}
	return m
}()
