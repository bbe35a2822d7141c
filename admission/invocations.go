package admission

import "github.com/maitred-dev/maitred/internal/ojson"

// POST /invocations is SageMaker's entry point, which vLLM serves
// (vllm/entrypoints/sagemaker/routes.py): it reads the body as each of
// its request types in turn (chat completion, completion, embedding,
// classification, score, rerank, pooling) and hands it to the first whose
// schema accepts it; a body none accepts is refused, 400 "Cannot find
// suitable handler for request". The door does the same by the field each
// type requires, then checks the body as that API (its Decision names it,
// Decision.Endpoint). A body with messages reads as chat, as in vLLM,
// where chat comes first and accepts any messages list; one with input as
// embeddings (classification and pooling's text form come after it);
// score before rerank. A type the model does not serve is the backend's
// to refuse: the door does not know a model's tasks.

// invocationTargets are the APIs /invocations dispatches to, in vLLM's
// order, each with the test of the fields its request type requires.
var invocationTargets = []struct {
	ep    Endpoint
	reads func(req *ojson.Value) bool
}{
	{Chat, func(req *ojson.Value) bool { return req.Has("messages") }},
	{Completions, func(req *ojson.Value) bool { return req.Has("prompt") || req.Has("prompt_embeds") }},
	{Embeddings, func(req *ojson.Value) bool { return req.Has("input") }},
	{Score, func(req *ojson.Value) bool { return hasPair(Score.pairs, req) }},
	{Rerank, func(req *ojson.Value) bool { return hasPair(Rerank.pairs, req) }},
	{Pooling, func(req *ojson.Value) bool { return req.Has("data") }}, // an IO processor's request
}

// hasPair reports whether req carries both fields of one of rule's pairs.
func hasPair(rule *pairRule, req *ojson.Value) bool {
	for _, p := range rule.names {
		if req.Has(p[0]) && req.Has(p[1]) {
			return true
		}
	}
	return false
}

// checkInvocation checks an /invocations body as the first API it reads
// as.
func checkInvocation(d *Door, _ Endpoint, req *ojson.Value, body []byte) (Decision, *Rejection) {
	for _, t := range invocationTargets {
		if !t.reads(req) {
			continue
		}
		dec, rej := t.ep.check(d, t.ep, req, body)
		if rej == nil {
			dec.Endpoint = t.ep
		}
		return dec, rej
	}
	return Decision{}, &Rejection{Reason: InvalidInput, Status: 400, Code: codeMissingParam,
		Message: "Cannot find suitable handler for request: the body must carry messages (chat completions), prompt (completions), " +
			"input (embeddings), queries and documents, data_1 and data_2 or text_1 and text_2 (score), query and documents (rerank), " +
			"or data (pooling)."}
}
