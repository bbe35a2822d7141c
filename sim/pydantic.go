package sim

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// Field checks shared by the request readers, each answering pydantic's
// error for a field that does not validate.

// parseObject parses a JSON request body that must be an object, with
// pydantic's errors for anything else.
func parseObject(body []byte) (*ojson.Value, *apiError) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		off := 0
		if se, ok := err.(*ojson.SyntaxError); ok {
			off = se.Offset
		}
		return nil, requestValidationError("json_invalid", []any{"body", off}, "JSON decode error", nil)
	}
	if v.Kind != ojson.Object {
		return nil, requestValidationError("model_attributes_type", []any{"body"},
			"Input should be a valid dictionary or object to extract fields from", strp("body"))
	}
	if m := v.Get("model"); !m.IsNull() && m.Kind != ojson.String {
		return nil, fieldError("model", "string_type", "Input should be a valid string")
	}
	return v, nil
}

// optLiteral checks an optional string field against its allowed values.
func optLiteral(obj *ojson.Value, name string, allowed ...string) (string, *apiError) {
	f := obj.Get(name)
	if f.IsNull() {
		return "", nil
	}
	if f.Kind == ojson.String {
		for _, a := range allowed {
			if f.Str == a {
				return a, nil
			}
		}
	}
	msg := "Input should be "
	for i, a := range allowed {
		switch {
		case i == 0:
		case i == len(allowed)-1:
			msg += " or "
		default:
			msg += ", "
		}
		msg += "'" + a + "'"
	}
	return "", fieldError(name, "literal_error", msg)
}

// optIntMin is optInt with pydantic's ge constraint.
func optIntMin(obj *ojson.Value, name string, lo int) (*int, *apiError) {
	n, e := optInt(obj, name)
	if e != nil || n == nil {
		return n, e
	}
	if *n < lo {
		return nil, fieldError(name, "greater_than_equal", fmt.Sprintf("Input should be greater than or equal to %d", lo))
	}
	return n, nil
}

// badInput is a ValueError raised while vLLM prepares the prompts: 400
// BadRequestError with no param.
func badInput(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg}
}

func cloneLoc(a []any) []any { return append([]any(nil), a...) }

// dotted renders a pydantic loc as vLLM's param ("body.messages.0.role").
func dotted(loc []any) string {
	var b bytes.Buffer
	for i, l := range loc {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprint(&b, l)
	}
	return b.String()
}

// laxBools are the strings pydantic's lax mode takes as booleans (its
// bool_parsing rule), matched case-insensitively.
var laxBools = map[string]bool{
	"0": false, "off": false, "f": false, "false": false, "n": false, "no": false,
	"1": true, "on": true, "t": true, "true": true, "y": true, "yes": true,
}

// pyBool parses a query or form boolean the way pydantic does in lax mode.
func pyBool(s string) (bool, bool) {
	b, ok := laxBools[strings.ToLower(s)]
	return b, ok
}
