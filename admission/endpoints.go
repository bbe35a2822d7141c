package admission

import "github.com/maitred-dev/maitred/internal/ojson"

// EndpointSpec is the door's spec of one API: everything the door does
// differently for it is a field here, read where the rule applies, so that
// no step compares endpoint names. A new API is a new value (and, when its
// body has a shape of its own, a new check function), not a new branch.
type EndpointSpec struct {
	name string
	// check runs steps 2 to 6 on a body that is a JSON object (step 1
	// done): checkGenerated (chat, completions), checkPooled,
	// checkMessagesAPI, checkResponses. A multipart endpoint (form) is
	// checked by CheckForm instead; its check is the pooled one, which is
	// what Check ran for it before specs.
	check func(d *Door, ep Endpoint, req *ojson.Value, body []byte) (Decision, *Rejection)
	// generates: its requests ask for an output budget (max_tokens).
	generates bool
	// prompt: its input is a completions prompt (the "prompt" field:
	// counted as text, a list of prompts is a batch, errors name
	// "prompt" and are InvalidPrompt); otherwise a chat conversation
	// ("messages", rendered by the chat template, InvalidMessages).
	prompt bool
	// defaultMaxTokens is the output budget vLLM assumes when max_tokens
	// is absent (completions: 16; 0: the context's rest).
	defaultMaxTokens int
	// form: a multipart upload (audio), checked by CheckForm.
	form bool

	// The pooling rules (checkPooled).
	// encoding: encoding_format and dimensions are typed (embeddings,
	// /pooling).
	encoding bool
	// topN: top_n is typed (rerank).
	topN bool
	// pairs, when set, is a score or rerank request's pair of fields;
	// the pairs are forwarded uncounted.
	pairs *pairRule
	// operation is vLLM's word for the work in its pooling context
	// message; taskOperation: a "task" of classify or token_classify
	// says classification instead (/pooling).
	operation     string
	taskOperation bool
}

// Endpoint is the API a request was sent to: a pointer to its spec, one
// value per API, compared by nothing but its fields.
type Endpoint = *EndpointSpec

// pairRule is how a score or rerank request names its two sides.
type pairRule struct {
	// names are the field pairs in vLLM's order of preference; the last
	// is the default when none is complete.
	names [][2]string
	// firstWins: a request carrying the first pair's first field is read
	// as that pair, complete or not (score's queries).
	firstWins bool
	// singleFirst: the first side must be one string (rerank's query).
	singleFirst bool
}

const (
	embedding      = "embedding generation"
	classification = "classification"
)

// The APIs the door checks. The gateway's endpoint list (gateway/endpoints.go)
// names one of these for each model API route.
var (
	Chat        = &EndpointSpec{name: "chat", check: modelled(checkGenerated), generates: true}                                                          // /v1/chat/completions
	Completions = &EndpointSpec{name: "completions", check: modelled(checkGenerated), generates: true, prompt: true, defaultMaxTokens: 16}               // /v1/completions
	Embeddings  = &EndpointSpec{name: "embeddings", check: modelled(checkPooled), encoding: true, operation: embedding}                                  // /v1/embeddings
	Pooling     = &EndpointSpec{name: "pooling", check: modelled(checkPooled), encoding: true, operation: embedding, taskOperation: true}                // /pooling
	Classify    = &EndpointSpec{name: "classify", check: modelled(checkPooled), operation: classification}                                               // /classify
	Score       = &EndpointSpec{name: "score", check: modelled(checkPooled), operation: embedding, pairs: &pairRule{names: scorePairs, firstWins: true}} // /score, /v1/score
	Rerank      = &EndpointSpec{name: "rerank", check: modelled(checkPooled), operation: embedding, topN: true,                                          // /rerank, /v1/rerank, /v2/rerank
		pairs: &pairRule{names: [][2]string{{"query", "documents"}}, singleFirst: true}}

	Transcriptions = &EndpointSpec{name: "transcriptions", check: modelled(checkPooled), form: true, operation: embedding} // /v1/audio/transcriptions (CheckForm)
	Translations   = &EndpointSpec{name: "translations", check: modelled(checkPooled), form: true, operation: embedding}   // /v1/audio/translations (CheckForm)

	Messages  = &EndpointSpec{name: "messages", check: modelled(checkMessagesAPI), generates: true} // /v1/messages (Anthropic), /v1/messages/count_tokens
	Responses = &EndpointSpec{name: "responses", check: (*Door).checkResponses, generates: true}    // /v1/responses (OpenAI Responses API)
)

// Invocations is SageMaker's /invocations, which dispatches on the body's
// shape (invocations.go).
var Invocations = &EndpointSpec{name: "invocations", check: checkInvocation}

func (e *EndpointSpec) String() string { return e.name }

// Generates reports whether the endpoint generates tokens: its requests
// ask for an output budget (max_tokens). A pooling endpoint's requested
// output is 0: it only reads its inputs.
func (e *EndpointSpec) Generates() bool { return e.generates }

// Chat reports whether the endpoint's input is a chat conversation
// (messages) rather than a completions prompt: how /tokenize, render and
// prefix affinity read it.
func (e *EndpointSpec) Chat() bool { return !e.prompt }

// Form reports whether the endpoint takes a multipart upload (CheckForm)
// rather than a JSON body.
func (e *EndpointSpec) Form() bool { return e.form }

// inputParam is the field an input error or a context refusal names.
func (e *EndpointSpec) inputParam() string {
	if e.prompt {
		return "prompt"
	}
	return "messages"
}

// inputReason is the reason an input the tokenizer refuses is given.
func (e *EndpointSpec) inputReason() Reason {
	if e.prompt {
		return InvalidPrompt
	}
	return InvalidMessages
}
