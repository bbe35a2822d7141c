package sim

import (
	"net/http"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// POST /invocations is SageMaker's entry point as vLLM serves it
// (entrypoints/sagemaker/routes.py): outside /v1, so no API key; the
// body must be JSON (validate_json_request), and it is read as each
// request type in turn, chat completion, completion, embedding,
// classification, score, rerank, pooling, and served by the first whose
// schema takes it. The simulator tells the types apart by the fields each
// requires; a body none of them takes is refused 400 with vLLM's message.

// invocationTypes are the request types in vLLM's order: the field(s) one
// requires, the type's name, and how it is served. Classification needs
// input, as embeddings (before it) does, so it never wins here.
var invocationTypes = []struct {
	name  string
	takes func(v *ojson.Value) bool
	serve func(s *Server, w http.ResponseWriter, r *http.Request, body []byte)
}{
	{"ChatCompletionRequest", func(v *ojson.Value) bool { return v.Has("messages") },
		func(s *Server, w http.ResponseWriter, r *http.Request, body []byte) { s.generate(w, r, body, kindChat) }},
	{"CompletionRequest", func(v *ojson.Value) bool { return v.Has("prompt") || v.Has("prompt_embeds") },
		func(s *Server, w http.ResponseWriter, r *http.Request, body []byte) {
			s.generate(w, r, body, kindCompletion)
		}},
	{"EmbeddingRequest", func(v *ojson.Value) bool { return v.Has("input") }, servePool(poolEmbed)},
	{"ClassificationRequest", func(v *ojson.Value) bool { return v.Has("input") }, servePool(poolClassify)},
	{"ScoreRequest", func(v *ojson.Value) bool {
		return (v.Has("queries") && (v.Has("documents") || v.Has("items"))) || (v.Has("data_1") && v.Has("data_2")) ||
			(v.Has("text_1") && v.Has("text_2"))
	}, servePool(poolScore)},
	{"RerankRequest", func(v *ojson.Value) bool { return v.Has("query") && v.Has("documents") }, servePool(poolRerank)},
	{"PoolingRequest", func(v *ojson.Value) bool { return v.Has("data") }, servePool(poolPooling)},
}

func servePool(k poolKind) func(s *Server, w http.ResponseWriter, r *http.Request, body []byte) {
	return func(s *Server, w http.ResponseWriter, r *http.Request, body []byte) { s.pool(w, r, body, k) }
}

// invocations serves POST /invocations.
func (s *Server) invocations(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	s.record(r, body)
	s.count(func(st *Stats) { st.Requests++ })
	if e := checkContentType(r); e != nil {
		writeAPIError(w, e)
		return
	}
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: "Bad Request", Message: "JSON decode error: " + err.Error()})
		return
	}
	names := ""
	for i, t := range invocationTypes {
		if v.Kind == ojson.Object && t.takes(v) {
			t.serve(s, w, r, body)
			return
		}
		if i > 0 {
			names += ", "
		}
		names += "'" + t.name + "'"
	}
	writeAPIError(w, &apiError{Status: http.StatusBadRequest, Type: "BadRequestError",
		Message: "Cannot find suitable handler for request. Expected one of: [" + names + "]"})
}
