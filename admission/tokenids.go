package admission

import (
	"fmt"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// maxTokenID bounds a token id where the vocabulary is not known: vLLM's
// ids are 32-bit and no vocabulary comes near.
const maxTokenID = 1<<31 - 1

// TokenIDError says why v is not a token id of a vocabulary of vocab ids
// (0: not known), or returns "". An id must be a non-negative integer (as
// pydantic's lax int reads one: 1.0 is 1, ojson.Value.Integral) and,
// as vLLM's input processor checks before the engine sees it, below the
// vocabulary's size (the larger of the tokenizer's and the model's, see
// tokenize.Model.VocabSize); the wording past the path is vLLM's, with
// the gateway's numbers. Every endpoint that takes token ids (completions
// and its render, embeddings, /pooling, /classify, /detokenize) holds
// them to it, through CheckTokenIDs.
func TokenIDError(v *ojson.Value, vocab int) string {
	n, ok := v.LaxInt()
	switch {
	case !v.Integral():
		return fmt.Sprintf("must be a token id (an integer), got %s.", describe(v))
	case n < 0 || (!ok && strings.HasPrefix(v.Str, "-")):
		return fmt.Sprintf("must be a token id (a non-negative integer), got %s.", v.Str)
	case vocab > 0 && (!ok || n >= int64(vocab)):
		return fmt.Sprintf("Token id %s is out of vocabulary: this model's token ids are 0 to %d.", v.Str, vocab-1)
	case !ok || n > maxTokenID:
		return fmt.Sprintf("Token id %s is out of vocabulary: token ids are at most %d.", v.Str, maxTokenID)
	}
	return ""
}

// CheckTokenIDs holds a list of token ids (ids, an array the caller has
// checked is one; param, its path in the request) to a vocabulary of
// vocab ids (0: not known), and refuses its first entry that is not an id
// (TokenIDError): a 400 InvalidInput whose param and message name the
// entry (param[i]), with code invalid_type for an entry that is not an
// integer and invalid_value for an integer outside the vocabulary. It is
// the one check of token ids: the completions prompt (promptIDs), the
// pooling input and the gateway's /detokenize use it.
func CheckTokenIDs(ids *ojson.Value, param string, vocab int) *Rejection {
	for i, it := range ids.Items {
		msg := TokenIDError(it, vocab)
		if msg == "" {
			continue
		}
		code := codeInvalidValue
		if !it.Integral() {
			code = codeInvalidType
		}
		at := fmt.Sprintf("%s[%d]", param, i)
		return &Rejection{Reason: InvalidInput, Status: 400, Code: code, Param: at, Message: at + ": " + msg}
	}
	return nil
}
