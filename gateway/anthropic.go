package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/maitred-dev/maitred/admission"
)

// Anthropic Messages: POST /v1/messages runs the model-API pipeline as
// the messagesAPI family (the door's admission.Messages: Anthropic's
// shape, max_tokens required, the conversation converted and counted as
// vLLM converts it); POST /v1/messages/count_tokens is answered locally
// when the count is exact and forwarded outside the queue otherwise. The
// gateway's own errors are written in Anthropic's envelope, and a stream
// ends with event: message_stop (or vLLM's event: error), not [DONE].

// anthropicEnvelope is Anthropic's error body.
type anthropicEnvelope struct {
	Type  string            `json:"type"` // always "error"
	Error anthropicErrorObj `json:"error"`
}

type anthropicErrorObj struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Anthropic's error types.
const (
	anthropicInvalidRequest = "invalid_request_error"
	anthropicAuthentication = "authentication_error"
	anthropicPermission     = "permission_error"
	anthropicNotFound       = "not_found_error"
	anthropicTooLarge       = "request_too_large"
	anthropicRateLimit      = "rate_limit_error"
	anthropicAPI            = "api_error"
	anthropicOverloaded     = "overloaded_error"
)

// anthropicType is the Anthropic error type of the gateway's own error.
// The status stays the gateway's (and Retry-After with it): the type
// says what kind of failure it is. A request the fleet has no room or no
// ready backend for (queue full or timed out, not ready, shutting down)
// is overloaded_error, Anthropic's name for "try again later"; any other
// 5xx (a backend unreachable, timed out, cut) is api_error; a 4xx by its
// status, invalid_request_error when Anthropic has no closer type.
func anthropicType(e *Error) string {
	switch e.Code {
	case codeQueueFull, codeQueueTimeout, codeServerBusy, codeModelNotReady, codeShuttingDown:
		return anthropicOverloaded
	}
	switch e.Status {
	case http.StatusUnauthorized:
		return anthropicAuthentication
	case http.StatusForbidden:
		return anthropicPermission
	case http.StatusNotFound:
		return anthropicNotFound
	case http.StatusRequestEntityTooLarge:
		return anthropicTooLarge
	case http.StatusTooManyRequests:
		return anthropicRateLimit
	case 529:
		return anthropicOverloaded
	}
	if e.Status >= 400 && e.Status < 500 {
		return anthropicInvalidRequest
	}
	return anthropicAPI
}

func (e *Error) anthropicEnvelope() anthropicEnvelope {
	return anthropicEnvelope{Type: "error", Error: anthropicErrorObj{Type: anthropicType(e), Message: e.Message}}
}

// anthropicErrors writes Anthropic's envelope, the one its SDKs read.
func anthropicErrors(w http.ResponseWriter, e *Error) { e.writeAs(w, e.anthropicEnvelope()) }

// anthropicStream is the Messages stream: it ends with message_stop, or
// with vLLM's own error event; a broken one gets one error event in
// Anthropic's shape, and nothing after it (no message_stop; the response
// is aborted).
var anthropicStream = &streamShape{end: anthropicStreamEnd, breakEvents: anthropicErrorEvent, meter: meterAnthropicEvent}

func anthropicErrorEvent(e *Error) []byte {
	body, _ := json.Marshal(e.anthropicEnvelope())
	out := make([]byte, 0, len(body)+24)
	out = append(out, "event: error\ndata: "...)
	out = append(out, body...)
	return append(out, "\n\n"...)
}

// anthropicStreamEnd reports whether events, which end at an event
// boundary, hold an event named message_stop or error (the "event" field,
// as the SSE spec parses fields).
func anthropicStreamEnd(events []byte) bool {
	if !bytes.Contains(events, []byte("message_stop")) && !bytes.Contains(events, []byte("error")) {
		return false
	}
	for len(events) > 0 {
		var line []byte
		line, events, _ = bytes.Cut(events, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		name, value, _ := bytes.Cut(line, []byte{':'})
		if string(name) != "event" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte{' '})
		if string(value) == "message_stop" || string(value) == "error" {
			return true
		}
	}
	return false
}

// countTokensAnswer is vLLM's count_tokens response.
type countTokensAnswer struct {
	InputTokens       int `json:"input_tokens"`
	ContextManagement struct {
		OriginalInputTokens int `json:"original_input_tokens"`
	} `json:"context_management"`
}

// countTokens answers POST /v1/messages/count_tokens locally, as vLLM
// does (the converted conversation through the chat template), with the
// door's checks and count; a count that is not exact goes to a ready
// backend outside the queue, as /tokenize's does. Like /tokenize it holds
// no KV, and its refusals are not counted in maitred_rejections_total.
func (g *Gateway) countTokens(w http.ResponseWriter, r *http.Request, x *exchange) error {
	body, err := g.readJSONBody(w, r, x)
	if err != nil {
		return err
	}
	slot, err := g.localWork(x)
	if err != nil {
		return err
	}
	defer slot.release()
	door, kc := g.doorFor(x)
	dec, rej := door.CountMessages(body)
	if rej != nil {
		return notAllowed(kc, g.refused(x, rej))
	}
	rt := g.decided(x, dec)
	if dec.Uncounted != admission.Counted {
		x.uncounted = dec.Uncounted.String()
		slot.release()
		return g.forwardOutsideQueue(w, r, x, rt, body)
	}
	x.promptTokens = dec.PromptTokens
	var out countTokensAnswer
	out.InputTokens = dec.PromptTokens
	out.ContextManagement.OriginalInputTokens = dec.PromptTokens
	writeJSONRaw(w, http.StatusOK, out)
	return nil
}
