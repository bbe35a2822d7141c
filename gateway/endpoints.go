package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/maitred-dev/maitred/admission"
)

// endpoint is the spec of one endpoint the gateway serves: every place
// that treats endpoints differently (the router, the pipeline, the door,
// tracing, triage, the access log) reads a field of it, and none compares
// endpoint names or paths (TestNoEndpointComparisons). A new endpoint is a
// new value in endpointList.
type endpoint struct {
	paths   []string // route patterns; each is also the request's endpoint label
	methods []string
	on      listeners
	// errors is the envelope the gateway's own errors are written in
	// (nil: OpenAI's).
	errors errorWriter
	// keyed: it needs an API key when auth is configured (the model APIs
	// and the local work that stands in for vLLM's routes; keys.go).
	keyed bool
	// xAPIKey: the key may also come in Anthropic's x-api-key header.
	xAPIKey bool

	// A model API, run by the shared pipeline (pipeline), has a door spec.
	api

	// A local endpoint (no door) has a handler: local builds it (pages:
	// this listener serves the admin pages), or raw is a plain
	// http.Handler outside the edge adapter (/metrics).
	local func(g *Gateway, pages bool) handlerFunc
	raw   func(g *Gateway) http.Handler

	// operation is gen_ai.operation.name on its spans: the convention's
	// names where one fits (chat, text_completion, embeddings), the
	// family's otherwise; "" for an endpoint that is no model API.
	operation string
	// unobserved: triage and the phase metrics skip it (local work
	// outside the queue that is no model request).
	unobserved bool
	// quiet: its access-log line is at debug level (probes).
	quiet bool
	// vllm: vLLM serves the same path, so the simulator must too
	// (TestEverySpecHasASimulatorRoute); false for the gateway's own
	// pages and probes.
	vllm bool
}

// listeners says where an endpoint is served.
type listeners int

const (
	onAPI   listeners = iota // the API listener
	onBoth                   // both listeners (probes: load balancers probe the API port)
	onAdmin                  // the admin pages: the admin listener, or the API's when adminOnAPI
)

// The methods endpoints answer: probes answer HEAD too.
var (
	onlyGET, onlyPOST, getOrHead = []string{http.MethodGet}, []string{http.MethodPost}, []string{http.MethodGet, http.MethodHead}
)

// method adapts a handler method (a method expression) to a local
// endpoint's builder.
func method(h func(*Gateway, http.ResponseWriter, *http.Request, *exchange) error) func(*Gateway, bool) handlerFunc {
	return func(g *Gateway, _ bool) handlerFunc {
		return func(w http.ResponseWriter, r *http.Request, x *exchange) error { return h(g, w, r, x) }
	}
}

// endpointList is every endpoint the gateway serves, the one list the
// router (routes), tracing (genAIOperation), triage (observe) and the
// access log read, and the simulator's routes are tested against.
func endpointList() []*endpoint {
	model := func(paths []string, op string, a api) *endpoint {
		if a.read == nil {
			a.read = readJSON
		}
		return &endpoint{paths: paths, methods: onlyPOST, keyed: true, api: a, operation: op, vllm: true}
	}
	chatty := api{affinity: true, tokenizeCheck: true}
	keyed := func(paths []string, methods []string, h func(*Gateway, bool) handlerFunc) *endpoint {
		return &endpoint{paths: paths, methods: methods, keyed: true, local: h, vllm: true}
	}
	return []*endpoint{
		// The model APIs: the door spec says how the door checks the
		// request; the rest, how the shared pipeline (pipeline) runs it.
		model([]string{"/v1/chat/completions"}, "chat", withDoor(chatty, admission.Chat)),
		model([]string{"/v1/completions"}, "text_completion", withDoor(chatty, admission.Completions)),
		model([]string{"/v1/embeddings"}, "embeddings", api{door: admission.Embeddings}),
		model([]string{"/pooling"}, "pooling", api{door: admission.Pooling}),
		model([]string{"/classify"}, "classify", api{door: admission.Classify}),
		model([]string{"/score", "/v1/score"}, "score", api{door: admission.Score}),
		model([]string{"/rerank", "/v1/rerank", "/v2/rerank"}, "rerank", api{door: admission.Rerank}),
		// The audio APIs read a spooled upload (audio.go).
		model([]string{"/v1/audio/transcriptions"}, "transcription", api{door: admission.Transcriptions, read: readUpload}),
		model([]string{"/v1/audio/translations"}, "translation", api{door: admission.Translations, read: readUpload}),
		inAnthropicAPI(model([]string{"/v1/messages"}, "chat", api{door: admission.Messages, affinity: true, stream: anthropicStream})),
		// SageMaker's entry point: the door reads the body as the first
		// API it fits (admission/invocations.go). No prefix affinity or
		// tokenizer check: its body may be any of them.
		model([]string{"/invocations"}, "invocations", api{door: admission.Invocations}),
		model([]string{"/v1/responses"}, "chat", api{door: admission.Responses, stream: responsesStream, pin: pinPreviousResponse,
			screen: responsesScreen, recordsID: true}),

		// Local work standing in for vLLM's own routes, keyed like the
		// model APIs. /tokenize, /version and count_tokens are outside
		// the queue and triage.
		outsideTriage(inAnthropicAPI(keyed([]string{"/v1/messages/count_tokens"}, onlyPOST, method((*Gateway).countTokens)))),
		keyed([]string{"/v1/responses/{id}"}, onlyGET, method((*Gateway).responseByID)),
		keyed([]string{"/v1/responses/{id}/cancel"}, onlyPOST, method((*Gateway).responseByID)),
		outsideTriage(keyed([]string{"/version"}, onlyGET, method((*Gateway).version))),
		outsideTriage(keyed([]string{"/tokenize"}, onlyPOST, method((*Gateway).tokenize))),
		keyed([]string{"/detokenize"}, onlyPOST, method((*Gateway).detokenize)),
		keyed([]string{"/v1/chat/completions/render"}, onlyPOST, func(g *Gateway, _ bool) handlerFunc { return g.render(admission.Chat) }),
		keyed([]string{"/v1/completions/render"}, onlyPOST, func(g *Gateway, _ bool) handlerFunc { return g.render(admission.Completions) }),
		keyed([]string{"/v1/models"}, onlyGET, method((*Gateway).listModels)),

		// Probes answer HEAD too (some load balancers send it), on both
		// listeners. /readyz gives its detail only where the admin pages
		// are served.
		{paths: []string{"/livez"}, methods: getOrHead, on: onBoth, quiet: true, local: method((*Gateway).livez)},
		{paths: []string{"/readyz"}, methods: getOrHead, on: onBoth, quiet: true, local: (*Gateway).readyz},
		{paths: []string{"/health"}, methods: getOrHead, on: onBoth, local: method((*Gateway).health)},

		// The admin pages: no key, and never where a key holder could
		// read them (adminOnAPI).
		{paths: []string{"/debug/triage"}, methods: onlyGET, on: onAdmin, local: method((*Gateway).debugTriage)},
		{paths: []string{"/debug/backends"}, methods: onlyGET, on: onAdmin, local: method((*Gateway).debugBackends)},
		{paths: []string{"/debug/store"}, methods: onlyGET, on: onAdmin, local: method((*Gateway).debugStore)},
		{paths: []string{"/debug/fairness"}, methods: onlyGET, on: onAdmin, local: method((*Gateway).debugFairness)},
		{paths: []string{"/"}, methods: onlyGET, on: onAdmin, local: method((*Gateway).statusPage)},
		{paths: []string{"/metrics"}, methods: onlyGET, on: onAdmin, raw: func(g *Gateway) http.Handler {
			return promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg})
		}},
	}
}

func withDoor(a api, door admission.Endpoint) api { a.door = door; return a }

// inAnthropicAPI: Anthropic's API (its error envelope; the key may come in
// x-api-key).
func inAnthropicAPI(e *endpoint) *endpoint { e.errors, e.xAPIKey = anthropicErrors, true; return e }

func outsideTriage(e *endpoint) *endpoint { e.unobserved = true; return e }

// endpoints is endpointList indexed by path, built once at start (init:
// the list names handlers that read the index, so it cannot be a
// variable's initializer). Read-only afterwards.
var endpoints struct {
	list   []*endpoint
	byPath map[string]*endpoint
}

func init() {
	endpoints.list = endpointList()
	endpoints.byPath = map[string]*endpoint{}
	for _, e := range endpoints.list {
		if e.errors == nil {
			e.errors = openAIErrors
		}
		for _, p := range e.paths {
			endpoints.byPath[p] = e
		}
	}
}

// unmatched is the spec of a request no route matched.
var unmatched = &endpoint{errors: openAIErrors}

// specOf is the spec of the endpoint label (a route pattern) a request
// was served under; unmatched for a path no route has. A map lookup: no
// allocation.
func specOf(path string) *endpoint {
	if e, ok := endpoints.byPath[path]; ok {
		return e
	}
	return unmatched
}

// handler builds the handler of e's path on a listener (pages: it serves
// the admin pages).
func (g *Gateway) endpointHandler(e *endpoint, path string, pages bool) http.Handler {
	switch {
	case e.raw != nil:
		return e.raw(g)
	case e.door != nil:
		return g.serveIn(e.errors, path, g.pipeline(&e.api, e.xAPIKey))
	case e.keyed:
		return g.serveIn(e.errors, path, g.keyed(e.local(g, pages), e.xAPIKey))
	}
	return g.serveIn(e.errors, path, e.local(g, pages))
}
