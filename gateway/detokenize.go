package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/maitred-dev/maitred/admission"
	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
	"github.com/maitred-dev/maitred/triage"
)

// detokenizeAnswer is vLLM's DetokenizeResponse.
type detokenizeAnswer struct {
	Prompt string `json:"prompt"`
}

// detokenize answers POST /detokenize {model?, tokens} -> {prompt} locally
// when the model's tokenizer decodes the ids exactly as vLLM's
// tokenizer.decode does (tokenize.Model.Detokenize). Ids are held to the
// model's vocabulary as every endpoint that takes ids holds them
// (admission.CheckTokenIDs), and to max_model_len ids: no sequence the
// model holds is longer. Both are refused with 400, where vLLM drops ids
// its tokenizer does not know and decodes any length: an id no sequence of
// this model can hold, or more of them than it holds, is no text to
// recover. Otherwise (no tokenizer, a decoder this gateway does not
// reproduce, ids inside the vocabulary the tokenizer has no text for,
// max_model_len not known) it goes to a ready backend, outside the queue,
// as /tokenize does.
func (g *Gateway) detokenize(w http.ResponseWriter, r *http.Request, x *exchange) error {
	body, err := g.readJSONBody(w, r, x)
	if err != nil {
		return err
	}
	slot, err := g.localWork(x)
	if err != nil {
		return err
	}
	defer slot.release()
	// The body is parsed within the values the longest context's ids
	// need: a body of short ids costs fifty times its bytes parsed whole.
	longest, maxValues := g.idsValueLimit()
	req, err := parseObjectLimited(body, maxValues)
	if tm, ok := errors.AsType[*ojson.TooManyValuesError](err); ok {
		return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeContextLength, Param: "tokens", Layer: triage.LayerDoor,
			Outcome: admission.ContextLength.String(),
			Message: fmt.Sprintf("The request holds more than %d JSON values: more token ids than any model here holds (max_model_len %d at most). Please reduce the number of tokens.", tm.Limit, longest)}
	}
	if err != nil {
		return err
	}
	rt, err := g.lookupModel(x, req)
	if err != nil {
		return err
	}
	L := rt.fm.MaxModelLen()
	ids, err := tokenIDList(req, rt.vocab(), L)
	if err != nil {
		return err
	}
	if tok := rt.tok; tok == nil {
		x.uncounted = "no_tokenizer"
	} else if L <= 0 {
		x.uncounted = "no_context_limit"
	} else {
		text, derr := tok.Detokenize(ids)
		var ne *tokenize.NotExactError
		switch {
		case derr == nil:
			x.promptTokens = len(ids)
			writeJSONRaw(w, http.StatusOK, detokenizeAnswer{Prompt: text})
			return nil
		case errors.As(derr, &ne):
			x.uncounted = ne.Reason
		default:
			return derr
		}
	}
	slot.release()
	return g.forwardOutsideQueue(w, r, x, rt, body)
}

// idsOtherValues is room for the values of a body of token ids
// (/detokenize's tokens, /tokenize's prompt) besides its ids: the object,
// model, the array, a few more fields.
const idsOtherValues = 64

// idsValueLimit is the longest context in force (longestContext) and the
// number of JSON values a body of that many token ids holds at most (0,
// no limit, while a model does not know its context yet).
func (g *Gateway) idsValueLimit() (longest, maxValues int) {
	longest = g.longestContext()
	if longest > 0 {
		maxValues = longest + idsOtherValues
	}
	return longest, maxValues
}

// longestContext is the largest max_model_len of the models in force, 0
// when one of them does not know its own yet.
func (g *Gateway) longestContext() int {
	n := 0
	for _, rt := range g.live().models {
		l := rt.fm.MaxModelLen()
		if l <= 0 {
			return 0
		}
		n = max(n, l)
	}
	return n
}

// parseObjectLimited reads a request body that must be one JSON object,
// holding it to maxValues values (0: no limit); past them the error is an
// *ojson.TooManyValuesError.
func parseObjectLimited(body []byte, maxValues int) (*ojson.Value, error) {
	req, perr := ojson.ParseLimited(body, ojson.DefaultMaxDepth, maxValues)
	if tm, ok := errors.AsType[*ojson.TooManyValuesError](perr); ok {
		return nil, tm
	}
	if perr != nil {
		return nil, badRequest(codeInvalidJSON, "", "The request body is not valid JSON: %v", perr)
	}
	if req.Kind != ojson.Object {
		return nil, badRequest(codeInvalidJSON, "", "The request body must be a JSON object, got %s", req.Kind)
	}
	return req, nil
}

// lookupModel finds the request's model as vLLM's tokenizer endpoints do
// ("model" names it, a configured model or a LoRA adapter of one, and a
// request without one means the only served model) and records it in x.
func (g *Gateway) lookupModel(x *exchange, req *ojson.Value) (*modelRuntime, error) {
	name := ""
	mv := req.Get("model")
	switch {
	case mv != nil && mv.Kind == ojson.String:
		name = mv.Str
	case mv != nil && !mv.IsNull():
		return nil, badRequest(codeInvalidType, "model", "model must be a string, got %s.", mv.Kind)
	default:
		if names := g.fleet.Names(); len(names) == 1 {
			name = names[0]
		}
	}
	return g.modelNamed(x, name)
}

// tokenIDList reads "tokens": a required list of at most maxLen (0: no
// bound) token ids of a vocabulary of vocab ids (0: not known).
func tokenIDList(req *ojson.Value, vocab, maxLen int) ([]int, error) {
	tv := req.Get("tokens")
	if tv == nil || tv.IsNull() {
		return nil, &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeMissingParam, Param: "tokens", Layer: triage.LayerDoor,
			Message: "You must provide tokens, a list of token ids."}
	}
	if tv.Kind != ojson.Array {
		return nil, badRequest(codeInvalidType, "tokens", "tokens must be a list of integers, got %s.", tv.Kind)
	}
	if maxLen > 0 && len(tv.Items) > maxLen {
		return nil, &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: codeContextLength, Param: "tokens", Layer: triage.LayerDoor,
			Outcome: admission.ContextLength.String(),
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, tokens holds %d token ids. Please reduce the number of tokens.", maxLen, len(tv.Items))}
	}
	if rej := admission.CheckTokenIDs(tv, "tokens", vocab); rej != nil {
		return nil, rejection(rej)
	}
	ids := make([]int, len(tv.Items))
	for i, it := range tv.Items {
		n, _ := it.LaxInt() // CheckTokenIDs held it to the vocabulary
		ids[i] = int(n)
	}
	return ids, nil
}

// writeJSONRaw writes v as Python's JSON responses write text: "<", ">"
// and "&" as themselves, not escaped as HTML.
func writeJSONRaw(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // only the gateway's own types
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
