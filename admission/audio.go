package admission

import (
	"fmt"
	"strconv"
	"strings"
)

// The audio endpoints (Transcriptions, Translations) take a multipart
// form, not JSON: the gateway reads the form fields that decide routing
// and the reservation while it spools the upload (the audio itself is
// never read here), and CheckForm runs steps 2 and 4 on them. The audio is
// not counted: the reservation is an estimate (PromptEstimate), never a
// reason to refuse, and vLLM judges every other field.

// Form is what the gateway read of an audio request's form.
type Form struct {
	// Model is the `model` field; HasModel says the form had one.
	Model    string
	HasModel bool
	// Fields are the other fields the door reads (FormFields), by name,
	// when the form had them before the part where the gateway stopped
	// reading (a file part after `model`).
	Fields map[string]string
}

// FormFields are the small form fields the door reads besides `model`.
var FormFields = []string{"stream", "max_completion_tokens"}

// The reservation of an audio request, in Whisper's terms: its encoder
// reads one 30 s window as 1500 positions and its decoder prompt is 4
// tokens; a decoder writes at most 448 tokens a window. vLLM splits a
// longer clip into windows run one after another; the estimate is one
// window.
const (
	audioPromptEstimate = 1500 + 4
	audioOutputEstimate = 448
)

// CheckForm checks an audio request's form: a known model, a well-typed
// stream and max_completion_tokens. The Decision is uncounted
// (NotCounted) with PromptEstimate set.
func (d *Door) CheckForm(ep Endpoint, f Form) (Decision, *Rejection) {
	if !f.HasModel || f.Model == "" {
		return Decision{}, &Rejection{Reason: MissingModel, Status: 400, Code: codeMissingParam, Param: "model",
			Message: "You must provide a model parameter (a `model` form field)."}
	}
	m, ok := d.models.Lookup(f.Model)
	if !ok {
		return Decision{}, UnknownModelRejection(f.Model, d.models.Names())
	}
	dec := Decision{Endpoint: ep, Model: m.Name, Ref: m.Ref, Only: m.Only, N: 1, Prompts: 1, Uncounted: NotCounted, PromptEstimate: audioPromptEstimate}
	reject := func(param, msg string) (Decision, *Rejection) {
		return Decision{}, &Rejection{Reason: InvalidParam, Status: 400, Code: codeInvalidType, Param: param, Message: msg,
			Model: m.Name, Ref: m.Ref}
	}
	if v, ok := f.Fields["stream"]; ok {
		b, ok := formBool(v)
		if !ok {
			return reject("stream", fmt.Sprintf("stream must be a boolean (true or false), got %q.", clip(v)))
		}
		dec.Stream = b
	}
	if v, ok := f.Fields["max_completion_tokens"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return reject("max_completion_tokens", fmt.Sprintf("max_completion_tokens must be an integer, got %q.", clip(v)))
		}
		if n < 1 {
			return Decision{}, &Rejection{Reason: InvalidParam, Status: 400, Code: codeInvalidValue, Param: "max_completion_tokens",
				Message: fmt.Sprintf("max_completion_tokens must be at least 1, got %d.", n), Model: m.Name, Ref: m.Ref}
		}
		dec.MaxTokens = n
	}
	if dec.MaxTokens == 0 {
		dec.PromptEstimate += audioOutputEstimate
	}
	return dec, nil
}

// formBool reads a form boolean as pydantic does.
func formBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "1", "true", "t", "yes", "y", "on":
		return true, true
	case "0", "false", "f", "no", "n", "off":
		return false, true
	}
	return false, false
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
