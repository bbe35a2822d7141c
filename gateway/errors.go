package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/maitred-dev/maitred/triage"
)

// Error is every error the gateway itself answers with. Handlers return it;
// the edge adapter (serve) is the only place that turns it into bytes, in
// OpenAI's envelope {"error": {"message", "type", "param", "code"}}.
//
// Backend answers never become an Error: vLLM's own 4xx and 5xx bodies pass
// through untouched.
type Error struct {
	Status  int
	Type    string // OpenAI's error type, e.g. "invalid_request_error"
	Code    string // machine-readable code; "" renders as null
	Param   string // the offending request field; "" renders as null
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds,
	// rounded up).
	RetryAfter time.Duration
	// Cause is logged, never shown to the client.
	Cause error
	// Context, on a context_length_exceeded error, adds the numbers to the
	// error object so that clients can act without parsing the message.
	Context *contextFields
	// CloseConn ends the connection after the answer: the request left
	// unread bytes on it (a body over the limit).
	CloseConn bool
	// Outcome is the request's outcome in the access log, the metrics and
	// triage; "" means Code. A door rejection's is its admission.Reason,
	// the reason label of maitred_rejections_total.
	Outcome string
	// StatusCode: the envelope's code is the HTTP status as a number, as
	// vLLM's own errors have it (an answer that must be vLLM's very
	// bytes; Code then names it in the log only).
	StatusCode bool
	// Layer is where the request's progress stopped, set where the error
	// is built (triage.LayerNone, "", for a shutdown, which is no
	// failure of the request's own).
	Layer triage.Layer
}

// outcome is the request outcome e stands for.
func (e *Error) outcome() string {
	if e.Outcome != "" {
		return e.Outcome
	}
	return e.Code
}

// contextFields are the machine-readable numbers of a context error.
type contextFields struct {
	PromptTokens      int  `json:"prompt_tokens"`
	MaxTokens         *int `json:"max_tokens"`
	MaxModelLen       int  `json:"max_model_len"`
	PromptTokensExact bool `json:"prompt_tokens_exact"`
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Status, e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Cause }

// OpenAI's error types.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

// Codes the gateway answers with. Each is also the outcome label in logs
// (a door rejection's outcome is its admission.Reason instead).
const (
	codeInvalidJSON      = "invalid_json"
	codeInvalidType      = "invalid_type"
	codeInvalidValue     = "invalid_value"
	codeContextLength    = "context_length_exceeded"
	codeModelNotFound    = "model_not_found"
	codeMissingParam     = "missing_required_parameter"
	codeRequestTooLarge  = "request_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeUnknownURL       = "unknown_url"
	codeMethodNotAllowed = "method_not_allowed"
	codeBackendDown      = "backend_unavailable"
	codeBackendTimeout   = "backend_timeout"
	codeModelNotReady    = "model_not_ready"
	codeDisconnected     = "backend_disconnected"
	codeStalled          = "backend_stalled"
	codeShuttingDown     = "server_shutting_down"
	codeServerBusy       = "server_busy"
	codeRequestTimeout   = "request_timeout"
	codeAmbiguousFraming = "ambiguous_framing"
	codeQueueFull        = "queue_full"
	codeQueueTimeout     = "queue_timeout"
	codeExceedsKV        = "exceeds_kv_capacity"
	codeStoreDown        = "store_unavailable"
	codeBodyRead         = "body_read_error"
	codeInvalidForm      = "invalid_form"
	codeInternal         = "internal_error"
	codeInvalidAPIKey    = "invalid_api_key"
	codeRateLimited      = "rate_limit_exceeded"
	// A Responses request a key may not send (responsesScreen).
	codeRequestIDNotAllowed  = "request_id_not_allowed"
	codeBackgroundNotAllowed = "background_not_allowed"
)

// Outcomes that are no error code: how a request ended that the gateway
// did not answer with an Error of its own.
const (
	// outcomeClientClosed: the client left; outcomeClientStalled: it
	// stopped reading until a write to it made no progress for
	// stream_idle_timeout.
	outcomeClientClosed  = "client_closed"
	outcomeClientStalled = "client_stalled"
	// outcomeClientGone: the client left while its request waited in the
	// queue.
	outcomeClientGone = "client_gone"
	// outcomeAborted: the proxy aborted a body it had started, for no
	// reason the gateway could name.
	outcomeAborted = "aborted"
	// outcomeBackendRejected: the backend answered with its own 4xx: not
	// a door rejection (the door passed it) and not a backend failure
	// (the backend is working; it does not count toward ejection).
	outcomeBackendRejected = "backend_rejected"
	// outcomeConnectFailed: no backend could be reached (answered 502
	// backend_unavailable; retried on another backend first);
	// outcomeFailedBeforeHeaders: a backend failed before answering (502
	// backend_unavailable).
	outcomeConnectFailed       = "connect_failed"
	outcomeFailedBeforeHeaders = "failed_before_headers"
	// outcomeModelRemoved: a reload removed the model while the request
	// waited (answered 404 model_not_found).
	outcomeModelRemoved = "model_removed"
)

// badRequest is a 400 the gateway answers itself, before any backend: a
// door-layer failure.
func badRequest(code, param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: code, Param: param, Message: fmt.Sprintf(format, args...), Layer: triage.LayerDoor}
}

// envelope is OpenAI's error body. Pointers render absent values as null,
// which SDKs expect.
type envelope struct {
	Error envelopeBody `json:"error"`
}

type envelopeBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"` // a string, vLLM's status number (StatusCode), or nil: null
	// A nil embedded pointer adds no keys.
	*contextFields
}

func (e *Error) envelope() envelope {
	b := envelopeBody{Message: e.Message, Type: e.Type, contextFields: e.Context}
	if e.Param != "" {
		b.Param = &e.Param
	}
	switch {
	case e.StatusCode:
		b.Code = e.Status
	case e.Code != "":
		b.Code = e.Code
	}
	return envelope{b}
}

// errorWriter writes the gateway's own error as the whole response, in
// one API's envelope. serve calls the route's; every other error path
// returns an *Error to it.
type errorWriter func(w http.ResponseWriter, e *Error)

// openAIErrors writes OpenAI's envelope, the one vLLM's OpenAI server and
// its SDKs read.
func openAIErrors(w http.ResponseWriter, e *Error) { e.write(w) }

// write renders e as the whole response. Call it only before any header
// went out.
func (e *Error) write(w http.ResponseWriter) { e.writeAs(w, e.envelope()) }

// writeAs renders e as the whole response with env as its body: the
// headers (Retry-After, Connection) are every envelope's.
func (e *Error) writeAs(w http.ResponseWriter, env any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retrySeconds(e.RetryAfter)))
	}
	if e.CloseConn {
		h.Set("Connection", "close")
	}
	body, _ := json.Marshal(env)
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	w.Write(body)
}

// sseEvent renders e as the last event of a stream that already answered
// 200: one error event in the shape vLLM itself uses mid-stream, so SDKs
// surface the error instead of ending quietly. No [DONE] follows: the
// stream did not end, and the proxy aborts the response after it.
func (e *Error) sseEvent() []byte {
	body, _ := json.Marshal(e.envelope())
	out := make([]byte, 0, len(body)+8)
	out = append(out, "data: "...)
	out = append(out, body...)
	out = append(out, "\n\n"...)
	return out
}

// logText is an error as the access log writes it. A client error's
// message can quote the request (a chat template's raise_exception often
// includes the offending message, a JSON error names a key), so a 4xx is
// logged by status, code and param only; the numbers that matter are
// fields of their own. A 5xx is the gateway's own wording or a transport
// error and is logged whole.
func logText(err error) string {
	var e *Error
	if !errors.As(err, &e) || e.Status >= 500 {
		return err.Error()
	}
	s := strconv.Itoa(e.Status) + " " + e.Code
	// A JSON error's param is a key path of the client's own naming;
	// every other param is built from the API's field names.
	if e.Param != "" && e.Code != codeInvalidJSON {
		s += " (param " + e.Param + ")"
	}
	return s
}

func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
