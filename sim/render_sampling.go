package sim

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// samplingEps is vLLM's _SAMPLING_EPS: a temperature below it is greedy.
const samplingEps = 1e-5

// RequestOutputKind values.
const (
	outputCumulative = 0 // the default
	outputDelta      = 1 // streaming requests
	outputFinalOnly  = 2 // non-streaming requests
)

// samplingParams is vLLM's SamplingParams (a msgspec Struct) for the
// fields the simulator reads, after __post_init__. It serializes as
// msgspec does with omit_defaults: every field in declaration order, those
// equal to their default left out.
type samplingParams struct {
	n                 int
	presencePenalty   float64
	frequencyPenalty  float64
	repetitionPenalty float64
	temperature       float64
	topP              float64
	topK              int64
	minP              float64
	seed              *int64
	stop              []string
	stopTokenIDs      []int64
	ignoreEOS         bool
	maxTokens         int
	minTokens         int
	outputKind        int
	skipClone         bool
}

// samplingDefaults are SamplingParams' field defaults.
var samplingDefaults = samplingParams{n: 1, repetitionPenalty: 1, temperature: 1, topP: 1, maxTokens: 16}

// samplingRequest is what a chat or completion request's
// to_sampling_params reads, as the request holds it (nil: unset).
type samplingRequest struct {
	n                                                    int
	presencePenalty, frequencyPenalty, repetitionPenalty *float64
	temperature, topP, minP                              *float64
	topK, seed                                           *int64
	stop                                                 []string
	stopTokenIDs                                         []int64
	ignoreEOS                                            bool
	minTokens                                            int
	stream                                               bool
}

// readSamplingRequest reads the sampling fields with pydantic's types: n,
// temperature, min_tokens and ignore_eos as parseRequest read them; the
// rest here.
func readSamplingRequest(req *genRequest, v *ojson.Value) (samplingRequest, *apiError) {
	s := samplingRequest{n: req.n, temperature: req.temperature, ignoreEOS: req.ignoreEOS, minTokens: req.minTokens, stream: req.stream}
	var e *apiError
	for _, f := range []struct {
		name string
		dst  **float64
	}{
		{"presence_penalty", &s.presencePenalty}, {"frequency_penalty", &s.frequencyPenalty},
		{"repetition_penalty", &s.repetitionPenalty}, {"top_p", &s.topP}, {"min_p", &s.minP},
	} {
		if *f.dst, e = optFloat(v, f.name); e != nil {
			return s, e
		}
	}
	for _, f := range []struct {
		name string
		dst  **int64
	}{{"top_k", &s.topK}, {"seed", &s.seed}} {
		n, e := optInt(v, f.name)
		if e != nil {
			return s, e
		}
		if n != nil {
			x := int64(*n)
			*f.dst = &x
		}
	}
	if s.stop, e = readStop(v); e != nil {
		return s, e
	}
	s.stopTokenIDs, e = readStopTokenIDs(v)
	return s, e
}

// readStop reads stop: str | list[str] | None.
func readStop(v *ojson.Value) ([]string, *apiError) {
	f := v.Get("stop")
	switch {
	case f.IsNull():
		return nil, nil
	case f.Kind == ojson.String:
		return []string{f.Str}, nil // SamplingParams makes a list of one
	case f.Kind != ojson.Array:
		return nil, fieldError("stop", "list_type", "Input should be a valid list")
	}
	out := make([]string, len(f.Items))
	for i, it := range f.Items {
		if it.Kind != ojson.String {
			return nil, requestValidationError("string_type", []any{"body", "stop", "list[str]", i},
				"Input should be a valid string", strp("body.stop"))
		}
		out[i] = it.Str
	}
	return out, nil
}

// readStopTokenIDs reads stop_token_ids: list[int] | None.
func readStopTokenIDs(v *ojson.Value) ([]int64, *apiError) {
	f := v.Get("stop_token_ids")
	if f.IsNull() {
		return nil, nil
	}
	if f.Kind != ojson.Array {
		return nil, fieldError("stop_token_ids", "list_type", "Input should be a valid list")
	}
	out := make([]int64, len(f.Items))
	for i, it := range f.Items {
		if it.Kind != ojson.Number || !isInt(it) {
			return nil, requestValidationError("int_type", []any{"body", "stop_token_ids", i},
				"Input should be a valid integer", strp("body.stop_token_ids"))
		}
		out[i] = int64(it.Float())
		if n, ok := it.Int(); ok {
			out[i] = n
		}
	}
	return out, nil
}

// toSamplingParams is the request's to_sampling_params(max_tokens): unset
// fields take SamplingParams' defaults (no generation_config is modelled),
// then __post_init__ runs.
func (r samplingRequest) toSamplingParams(maxTokens int) samplingParams {
	p := samplingDefaults
	p.n = r.n
	for _, f := range []struct {
		src *float64
		dst *float64
	}{
		{r.presencePenalty, &p.presencePenalty}, {r.frequencyPenalty, &p.frequencyPenalty},
		{r.repetitionPenalty, &p.repetitionPenalty}, {r.temperature, &p.temperature},
		{r.topP, &p.topP}, {r.minP, &p.minP},
	} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if r.topK != nil {
		p.topK = *r.topK
	}
	p.seed = r.seed
	p.stop, p.stopTokenIDs = r.stop, r.stopTokenIDs
	p.ignoreEOS, p.minTokens, p.maxTokens = r.ignoreEOS, r.minTokens, maxTokens
	p.outputKind = outputFinalOnly
	if r.stream {
		p.outputKind = outputDelta
	}
	p.skipClone = true // the serving layer's requests are never cloned
	p.postInit()
	return p
}

// postInit is SamplingParams.__post_init__'s normalization of the fields
// modelled: a greedy temperature resets top_p, top_k and min_p. (-1 stays
// -1: vLLM accepts it as "disabled" without rewriting it.)
func (p *samplingParams) postInit() {
	if p.temperature < samplingEps {
		p.topP, p.topK, p.minP = 1, 0, 0
	}
}

// MarshalJSON writes msgspec's omit_defaults form.
func (p samplingParams) MarshalJSON() ([]byte, error) {
	d := samplingDefaults
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(name string, isDefault bool, value []byte) {
		if isDefault {
			return
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + name + `":`)
		b.Write(value)
	}
	itoa := func(n int64) []byte { return strconv.AppendInt(nil, n, 10) }
	float := func(f float64) []byte { return []byte(pyFloat(f)) }
	field("n", p.n == d.n, itoa(int64(p.n)))
	field("presence_penalty", p.presencePenalty == d.presencePenalty, float(p.presencePenalty))
	field("frequency_penalty", p.frequencyPenalty == d.frequencyPenalty, float(p.frequencyPenalty))
	field("repetition_penalty", p.repetitionPenalty == d.repetitionPenalty, float(p.repetitionPenalty))
	field("temperature", p.temperature == d.temperature, float(p.temperature))
	field("top_p", p.topP == d.topP, float(p.topP))
	field("top_k", p.topK == d.topK, itoa(p.topK))
	field("min_p", p.minP == d.minP, float(p.minP))
	if p.seed != nil {
		field("seed", false, itoa(*p.seed))
	}
	field("stop", len(p.stop) == 0, pyJSON(p.stop))
	field("stop_token_ids", len(p.stopTokenIDs) == 0, pyJSON(p.stopTokenIDs))
	field("ignore_eos", p.ignoreEOS == d.ignoreEOS, []byte(strconv.FormatBool(p.ignoreEOS)))
	field("max_tokens", p.maxTokens == d.maxTokens, itoa(int64(p.maxTokens)))
	field("min_tokens", p.minTokens == d.minTokens, itoa(int64(p.minTokens)))
	field("output_kind", p.outputKind == d.outputKind, itoa(int64(p.outputKind)))
	field("skip_clone", p.skipClone == d.skipClone, []byte(strconv.FormatBool(p.skipClone)))
	b.WriteByte('}')
	return b.Bytes(), nil
}

// pyJSON encodes v as Python's json does with ensure_ascii=False: no HTML
// escaping.
func pyJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
