package admission

import (
	"fmt"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// Reason is why the door rejected a request. It is a small closed set that
// doubles as the reason label of maitred_rejections_total, so dashboards
// can rely on it.
type Reason int

const (
	InvalidJSON      Reason = iota // not a strict JSON object
	UnsupportedMedia               // Content-Type is not JSON (checked by the HTTP edge)
	TooLarge                       // body over the limit (checked by the HTTP edge)
	MissingModel                   // no "model"
	UnknownModel                   // "model" names no configured model
	InvalidMessages                // chat messages malformed (roles, content, tool calls)
	InvalidPrompt                  // completions prompt malformed
	InvalidParam                   // max_tokens, n, stream ... out of range or ill-typed
	TemplateError                  // the chat template raised, as Python's jinja2 would
	ContextLength                  // prompt + max_tokens beyond max_model_len
	InvalidInput                   // a pooling request's input (embeddings, score, rerank, ...) malformed
	InvalidForm                    // an audio upload's multipart form malformed or ambiguous (checked by the HTTP edge)
	// The API key checks (the gateway's auth; the door never returns
	// them, but they name refusals at the same place, before any backend
	// work, and share the vocabulary).
	InvalidAPIKey   // no key, or a key that is not configured (401)
	ModelNotAllowed // a configured model outside the key's allow-list (answered as UnknownModel's 404)
	RateLimited     // over one of the key's limits (429)
	numReasons
)

var reasonNames = [...]string{
	InvalidJSON:      "invalid_json",
	UnsupportedMedia: "unsupported_media_type",
	TooLarge:         "request_too_large",
	MissingModel:     "missing_model",
	UnknownModel:     "model_not_found",
	InvalidMessages:  "invalid_messages",
	InvalidPrompt:    "invalid_prompt",
	InvalidParam:     "invalid_param",
	TemplateError:    "invalid_chat_template_input",
	ContextLength:    "context_length_exceeded",
	InvalidInput:     "invalid_input",
	InvalidForm:      "invalid_form",
	InvalidAPIKey:    "invalid_api_key",
	ModelNotAllowed:  "model_not_allowed",
	RateLimited:      "rate_limited",
}

func (r Reason) String() string {
	if r >= 0 && r < numReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Reasons lists every Reason, for pre-registering metric label values.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// Uncounted is why a forwarded request carries no exact prompt count. Such
// requests are forwarded, never rejected on a guess: vLLM decides. It is the
// reason label of maitred_admission_uncounted_total.
type Uncounted int

const (
	Counted        Uncounted = iota // the count is exact
	NoTokenizer                     // the model has no tokenizer configured
	NotExact                        // the tokenizer or template cannot reproduce vLLM here
	NoContextLimit                  // max_model_len unknown (no config, no backend report yet)
	Truncating                      // truncate_prompt_tokens: vLLM cuts the input to a length of its own
	NotCounted                      // the endpoint's inputs are not counted (score and rerank pairs)
	numUncounted
)

var uncountedNames = [...]string{
	Counted:        "counted",
	NoTokenizer:    "no_tokenizer",
	NotExact:       "not_exact",
	NoContextLimit: "no_context_limit",
	Truncating:     "truncate_prompt_tokens",
	NotCounted:     "endpoint_not_counted",
}

func (u Uncounted) String() string {
	if u >= 0 && u < numUncounted {
		return uncountedNames[u]
	}
	return fmt.Sprintf("Uncounted(%d)", int(u))
}

// The machine-readable codes of rejections, in OpenAI's wording: what the
// client reads in error.code. The metric label and the log's outcome are
// the Reason instead.
const (
	codeInvalidJSON   = "invalid_json"
	codeInvalidType   = "invalid_type"
	codeInvalidValue  = "invalid_value"
	codeMissingParam  = "missing_required_parameter"
	codeModelNotFound = "model_not_found"
	codeTemplateInput = "invalid_chat_template_input"
	codeContextLength = "context_length_exceeded"
)

// Rejection is a request the door refuses, with everything the HTTP edge
// needs to answer in OpenAI's envelope. Status is an HTTP status number;
// this package does not import net/http.
type Rejection struct {
	Reason  Reason
	Status  int
	Code    string // OpenAI-style machine-readable code
	Param   string // the offending field path, e.g. messages[2].role
	Message string
	// Context carries the numbers of a context_length_exceeded rejection.
	Context *ContextInfo
	// Model is the configured model the request named, once known; Ref
	// is then its catalog handle (Model.Ref).
	Model string
	Ref   Runtime
}

func (r *Rejection) Error() string {
	return fmt.Sprintf("%s (%s): %s", r.Reason, r.Param, r.Message)
}

// ContextInfo is the arithmetic behind a context decision.
type ContextInfo struct {
	// PromptTokens is the prompt's count; in a batch, the count of the
	// prompt at Index, the first that does not fit.
	PromptTokens int
	// PromptExact is false when counting stopped at the limit: PromptTokens
	// is then a lower bound.
	PromptExact bool
	MaxTokens   int // 0 when the request set none
	MaxModelLen int
	// Batch is the number of prompts of a batched completions request (a
	// list prompt), 0 for a single prompt; Index is then the offending
	// prompt's.
	Batch, Index int
}

// Runtime is a catalog's handle for one of its models (Model.Ref): what
// the caller built for the model, passed back by the door as it came. The
// door only carries it; ModelName names the model it stands for.
type Runtime interface {
	ModelName() string
}

// Decision is a request the door lets through.
type Decision struct {
	Model string
	// Ref is the model's catalog handle (Model.Ref).
	Ref Runtime
	// Only is Model.Only: the model's backends (slots) that may serve
	// the request; nil: all.
	Only   []string
	Stream bool
	// Body is what to forward: the client's bytes, or a copy with
	// max_tokens lowered when the model clamps.
	Body []byte
	// PromptTokens is exact when Uncounted is Counted. For a batch of
	// prompts it is their sum, as vLLM's usage.prompt_tokens.
	PromptTokens int
	// Prompts is the number of prompts: more than 1 for a batched
	// completions request, which vLLM runs as that many requests, each
	// with its own n choices of up to MaxTokens.
	Prompts   int
	Uncounted Uncounted
	// Detail explains Uncounted (the tokenizer's reason).
	Detail string
	// MaxTokens is the output budget requested (after clamping), 0 if none.
	MaxTokens int
	// ClampedFrom is the client's max_tokens when the door lowered it.
	ClampedFrom int
	// N is the number of choices requested (default 1).
	N int
	// Endpoint is the API the request was checked as: the one it was sent
	// to, or, for an endpoint that dispatches on the body's shape, the one
	// the body reads as. Later stages (the reservation, affinity, the
	// sampled tokenizer check) read its properties.
	Endpoint Endpoint
	// Request is the parsed body, for later stages that read it again
	// (prefix affinity, the sampled tokenizer check): parse once.
	Request *ojson.Value

	// PromptEstimate, when positive, is the reservation's prompt for an
	// input that is not text (audio): an estimate, never a reason to refuse.
	PromptEstimate int
	// Chat is the chat conversation a Messages request converts to (when
	// the door could convert it exactly), for prefix affinity; nil for
	// every other request.
	Chat *ojson.Value
	// Rendered is the chat prompt the door rendered to count a chat
	// request (or a Messages request's Chat conversation): the one render
	// of the request, reused by prefix affinity. "" when the door rendered
	// none (completions, no tokenizer, a count that is not exact).
	Rendered string
	// PromptKeys are the prompt's block keys when the model's counter
	// computed them with the count (tokenize.Count.Keys: a model routed
	// precisely); nil otherwise. The gateway's precise ticket takes them
	// and gives their pooled buffers back.
	PromptKeys *tokenize.PromptKeys
}
