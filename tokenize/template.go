package tokenize

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ContentFormat is how message content reaches the template, as vLLM's
// --chat-template-content-format auto detection decides it.
type ContentFormat string

const (
	// ContentString: text parts joined with "\n" into one string.
	ContentString ContentFormat = "string"
	// ContentOpenAI: content is always a list of {"type","text"} parts.
	ContentOpenAI ContentFormat = "openai"
)

// Template is a compiled chat template, rendered as Python jinja2 renders
// it in transformers' configuration. Safe for concurrent use.
type Template struct {
	source string
	idents map[string]bool
	format ContentFormat
	// owned is the template compiled by the package's evaluator
	// (jinja_*.go); nil when broken.
	owned *ownedTemplate
	// broken: the template did not compile (LoadDir keeps it so): every
	// render is not exact.
	broken *CompileError
}

// CompileError is a chat template that could not be compiled: the lexer
// refused it, or the evaluator does not parse or implement it. Line is
// the template line where the evaluator (or the lexer)
// stopped, 0 when unknown; Reason says why. A model whose template does
// not compile still loads: its requests are forwarded uncounted.
type CompileError struct {
	Line   int
	Reason string
}

func (e *CompileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("chat template: line %d: %s", e.Line, e.Reason)
	}
	return "chat template: " + e.Reason
}

// compileError is err as a *CompileError, its line taken out of the
// reason when the lexer or the owned parser named one.
func compileError(err error) *CompileError {
	var le *lineError
	if errors.As(err, &le) {
		var no *errNotOwned
		if errors.As(le.err, &no) {
			return &CompileError{Line: le.line, Reason: "not supported: " + no.what}
		}
		return &CompileError{Line: le.line, Reason: le.err.Error()}
	}
	msg := err.Error()
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d: ", &line); n == 1 {
		_, msg, _ = strings.Cut(msg, ": ")
		return &CompileError{Line: line, Reason: msg}
	}
	return &CompileError{Reason: msg}
}

// CompileTemplate compiles a Hugging Face chat template. It fails with a
// *CompileError when the evaluator does not parse or implement it.
func CompileTemplate(source string) (*Template, error) {
	lx, err := lexTemplate(source)
	if err != nil {
		return nil, compileError(err)
	}
	owned, err := compileOwned(lx)
	if err != nil {
		return nil, compileError(err)
	}
	return &Template{
		owned:  owned,
		source: source,
		idents: lx.idents,
		format: detectContentFormat(lx.bodies),
	}, nil
}

// uncompiled is a template that did not compile (err): kept by LoadDir
// so that the model loads, and its requests go uncounted.
func uncompiled(source string, err error) *Template {
	var ce *CompileError
	if !errors.As(err, &ce) {
		ce = &CompileError{Reason: err.Error()}
	}
	return &Template{source: source, broken: ce}
}

// CompileErr is why the template did not compile, or nil when it did.
func (t *Template) CompileErr() *CompileError { return t.broken }

// Source returns the template text as given.
func (t *Template) Source() string { return t.source }

// ContentFormat returns the detected content format.
func (t *Template) ContentFormat() ContentFormat { return t.format }

// References reports whether the template mentions name as an identifier
// (an over-approximation of jinja2.meta.find_undeclared_variables, which
// is what vLLM uses to filter chat_template_kwargs).
func (t *Template) References(name string) bool { return t.idents[name] }

// TemplateError is a failure the template raised itself
// (raise_exception), or a TypeError Python would raise at the same point.
// Message is the template's own text.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return e.Message }

type raisedError struct{ msg string }

func (e *raisedError) Error() string { return e.msg }

// Render renders the template with vars (which it does not change). now
// is the clock strftime_now reads; nil means time.Now.
//
// Errors: *TemplateError when the template raised (or Python would have
// raised a TypeError this package detects); *unsupportedError when a
// feature is not reproduced exactly.
func (t *Template) Render(vars map[string]Value, now func() time.Time) (string, error) {
	if t.broken != nil {
		return "", errUnsupported(t.broken.Error())
	}
	return t.renderOwned(mapVars(vars), now)
}

// renderChat renders a prepared chat request's variables.
func (t *Template) renderChat(vars *chatVars, now func() time.Time) (string, error) {
	if t.broken != nil {
		return "", errUnsupported(t.broken.Error())
	}
	return t.renderOwned(vars, now)
}

// renderOwned renders with the package's evaluator; a panic in it is a
// render not reproduced (not exact), never a crash.
func (t *Template) renderOwned(vars varSource, now func() time.Time) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", errUnsupported(fmt.Sprintf("the template evaluator failed: %v", r))
		}
	}()
	out, err = t.owned.render(vars, now)
	if err != nil {
		return "", templateErr(err)
	}
	return out, nil
}

// templateErr turns the template's own failures into a *TemplateError.
func templateErr(err error) error {
	var re *raisedError
	var te *pyTypeError
	switch {
	case errors.As(err, &re):
		return &TemplateError{re.msg}
	case errors.As(err, &te):
		return &TemplateError{te.msg}
	}
	return err
}

// Content-format detection, after vLLM's _detect_content_format: the
// template is "openai" when some for loop iterates over a message's
// content directly (`for x in message['content']`, `message.content`,
// with or without filters), where message is a loop variable over messages
// or over a variable set from messages. As vLLM, a variable set from the
// content (`set c = message.content` then `for x in c`) does not count.
var (
	reForIn  = regexp.MustCompile(`^for\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s+in\s+(.+)$`)
	reSetTo  = regexp.MustCompile(`^set\s+([A-Za-z_]\w*)\s*=\s*(.+)$`)
	reHeadID = regexp.MustCompile(`^\(?\s*([A-Za-z_]\w*)`)
	reConAcc = regexp.MustCompile(`^\(?\s*([A-Za-z_]\w*)\s*(?:\.\s*content\b|\[\s*['"]content['"]\s*\])`)
)

func detectContentFormat(bodies []string) ContentFormat {
	msgVars := map[string]bool{"messages": true}
	// Aliases of messages (set loop_messages = messages[1:]) and loop
	// variables over them; iterate to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, b := range bodies {
			if m := reSetTo.FindStringSubmatch(b); m != nil {
				if h := reHeadID.FindStringSubmatch(m[2]); h != nil && msgVars[h[1]] && h[1] == "messages" && !msgVars["@"+m[1]] {
					msgVars["@"+m[1]] = true // alias of the list
					changed = true
				}
			}
			if m := reForIn.FindStringSubmatch(b); m != nil {
				if h := reHeadID.FindStringSubmatch(m[2]); h != nil && (h[1] == "messages" || msgVars["@"+h[1]]) && !msgVars[m[1]] {
					msgVars[m[1]] = true
					changed = true
				}
			}
		}
	}
	delete(msgVars, "messages")
	for _, b := range bodies {
		m := reForIn.FindStringSubmatch(b)
		if m == nil {
			continue
		}
		if c := reConAcc.FindStringSubmatch(m[2]); c != nil && msgVars[c[1]] {
			return ContentOpenAI
		}
	}
	return ContentString
}
