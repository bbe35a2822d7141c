package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// apiError is one of vLLM's ErrorResponse answers:
// {"error":{"message","type","param","code"}} with code = HTTP status.
type apiError struct {
	Status  int
	Type    string
	Message string
	Param   *string // nil encodes as null
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type errorEnvelope struct {
	Error errorInfo `json:"error"`
}

func (e *apiError) envelope() errorEnvelope {
	return errorEnvelope{Error: errorInfo{Message: e.Message, Type: e.Type, Param: e.Param, Code: e.Status}}
}

func strp(s string) *string { return &s }

// validationError is VLLMValidationError: BadRequestError, param set, and
// str(exc) ends in " (parameter=<p>, value=<v>)".
func validationError(msg, param string, value any) *apiError {
	return &apiError{
		Status:  http.StatusBadRequest,
		Type:    "BadRequestError",
		Message: fmt.Sprintf("%s (parameter=%s, value=%v)", msg, param, value),
		Param:   strp(param),
	}
}

// requestValidationError is what vLLM's RequestValidationError handler sends
// for pydantic failures: 400 with type "Bad Request" (the HTTP phrase). The
// message imitates str(exc.errors()), a Python list of error dicts; it is
// approximate.
func requestValidationError(errType string, loc []any, msg string, param *string) *apiError {
	var b strings.Builder
	b.WriteString("[{'type': '")
	b.WriteString(errType)
	b.WriteString("', 'loc': (")
	for i, l := range loc {
		if i > 0 {
			b.WriteString(", ")
		}
		switch v := l.(type) {
		case string:
			b.WriteString("'" + v + "'")
		default:
			fmt.Fprintf(&b, "%v", v)
		}
	}
	if len(loc) == 1 {
		b.WriteString(",")
	}
	b.WriteString("), 'msg': ")
	b.WriteString(pyRepr(msg))
	b.WriteString("}]")
	return &apiError{Status: http.StatusBadRequest, Type: "Bad Request", Message: b.String(), Param: param}
}

// pyRepr quotes s as Python's repr does: single quotes, or double quotes
// when s holds a single quote and no double quote.
func pyRepr(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}

// fieldError is a pydantic type or value error on a top-level body field.
func fieldError(field, errType, msg string) *apiError {
	return requestValidationError(errType, []any{"body", field}, msg, strp("body."+field))
}

// modelValidatorError is a pydantic model_validator ValueError, which
// pydantic prefixes with "Value error, ".
func modelValidatorError(msg, param string) *apiError {
	e := requestValidationError("value_error", []any{"body"}, "Value error, "+msg, strp(param))
	return e
}

// httpError is what vLLM's HTTPException handler sends: the status phrase as
// type (and, for router 404/405, as message).
func httpError(status int, msg string) *apiError {
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &apiError{Status: status, Type: http.StatusText(status), Message: msg}
}

// failError is the answer for Config.FailStatus: the envelope vLLM's
// create_error_response builds for the usual exception behind that status.
func failError(status int, msg string) *apiError {
	typ := ""
	switch status {
	case 400:
		typ = "BadRequestError"
	case 404:
		typ = "NotFoundError"
	case 422:
		typ = "UnprocessableEntityError"
	case 500:
		typ = "InternalServerError"
		if msg == "" {
			// engine_error_handler's text for EngineDeadError (issue #42362).
			msg = "EngineCore encountered an issue. See stack trace (above) for the root cause."
		}
	case 501:
		typ = "NotImplementedError"
	default:
		typ = strings.ReplaceAll(http.StatusText(status), " ", "") + "Error"
		if typ == "Error" {
			typ = "InternalServerError"
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
		if msg == "" {
			msg = "Internal server error"
		}
	}
	return &apiError{Status: status, Type: typ, Message: msg}
}

// generationError is GenerationError / an engine abort at shutdown:
// 500 "Internal server error".
func generationError() *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: "Internal server error"}
}

// marshal encodes v as JSON without HTML escaping (Python's json does not
// escape <, > and &) and without a trailing newline.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types are encoded; failure is a programming error.
		panic(fmt.Sprintf("sim: marshal %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, e.envelope())
}
