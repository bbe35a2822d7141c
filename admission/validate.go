package admission

import (
	"fmt"
	"slices"
	"strings"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// A chat message's role is any string: vLLM's message union ends in a
// custom TypedDict whose role is a plain str, so a role outside OpenAI's
// (Llama 3.1's "ipython", Granite's "document" and "available_tools") goes
// to the chat template, which decides. The door counts it as rendered and
// refuses only what that union refuses: a missing or non-string role.

// Content part types vLLM's chat parser accepts.
var partTypes = []string{"text", "input_text", "output_text", "refusal", "thinking",
	"image_url", "input_image", "image_embeds", "image_pil", "audio_url", "input_audio", "video_url", "file"}

func checkMessages(req *ojson.Value) *Rejection {
	msgs := req.Get("messages")
	if msgs == nil || msgs.IsNull() {
		return &Rejection{Reason: InvalidMessages, Status: 400, Code: codeMissingParam, Param: "messages",
			Message: "You must provide a messages parameter."}
	}
	if msgs.Kind != ojson.Array {
		return badMessages("messages", codeInvalidType, "messages must be an array of message objects, got %s.", msgs.Kind)
	}
	if len(msgs.Items) == 0 {
		return badMessages("messages", codeInvalidValue, "messages must contain at least one message.")
	}
	for i, m := range msgs.Items {
		if plainMessage(m) {
			continue
		}
		if rej := checkMessage(m, fmt.Sprintf("messages[%d]", i)); rej != nil {
			return rej
		}
	}
	return nil
}

// plainMessage reports whether m is the common message that checkMessage
// accepts at once: an object of exactly "role" and "content" (both
// strings). It spares
// the chat's messages their path, which is only formatted for a message
// that checkMessage looks at in full.
func plainMessage(m *ojson.Value) bool {
	if m.Kind != ojson.Object || len(m.Members) != 2 {
		return false
	}
	var role, content *ojson.Value
	for _, mem := range m.Members {
		switch mem.Key {
		case "role":
			role = mem.Value
		case "content":
			content = mem.Value
		default:
			return false
		}
	}
	return role != nil && content != nil && role.Kind == ojson.String && content.Kind == ojson.String
}

func badMessages(param, code, format string, args ...any) *Rejection {
	return &Rejection{Reason: InvalidMessages, Status: 400, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

func checkMessage(m *ojson.Value, path string) *Rejection {
	if m.Kind != ojson.Object {
		return badMessages(path, codeInvalidType, "%s must be an object, got %s.", path, m.Kind)
	}
	if rej := checkKeyCase(m, path); rej != nil {
		return rej
	}
	rv := m.Get("role")
	if rv == nil || rv.IsNull() {
		return badMessages(path+".role", codeMissingParam, "%s.role is required.", path)
	}
	if rv.Kind != ojson.String {
		return badMessages(path+".role", codeInvalidType, "%s.role must be a string, got %s.", path, rv.Kind)
	}
	role := rv.Str
	if v := m.Get("name"); v != nil && !v.IsNull() && v.Kind != ojson.String {
		return badMessages(path+".name", codeInvalidType, "%s.name must be a string, got %s.", path, v.Kind)
	}
	// tool_calls are read (and held to their shape) on an assistant turn
	// only: vLLM's parser ignores them on any other role. A tool message
	// may leave tool_call_id out (the custom message of vLLM's union takes
	// it as optional); one given is a string.
	if tc := m.Get("tool_calls"); tc != nil && !tc.IsNull() && role == "assistant" {
		if rej := checkToolCalls(tc, path+".tool_calls"); rej != nil {
			return rej
		}
	}
	if id := m.Get("tool_call_id"); role == "tool" && id != nil && !id.IsNull() && id.Kind != ojson.String {
		return badMessages(path+".tool_call_id", codeInvalidType, "%s.tool_call_id must be a string, got %s.", path, id.Kind)
	}
	c := m.Get("content")
	switch {
	case c.IsNull():
		if c == nil || role == "assistant" {
			// An assistant turn may be only tool calls, or empty before
			// continue_final_message; and a message of any role may leave
			// content out (vLLM's CustomChatCompletionMessageParam does not
			// require it; its parser reads it as no parts, rendered ""). An
			// explicit null is refused for the other roles, as pydantic does.
			return nil
		}
		return badMessages(path+".content", codeMissingParam, "%s.content is required for role %q.", path, role)
	case c.Kind == ojson.String:
		return nil
	case c.Kind == ojson.Array:
		for j, part := range c.Items {
			if rej := checkPart(part, fmt.Sprintf("%s.content[%d]", path, j)); rej != nil {
				return rej
			}
		}
		return nil
	}
	return badMessages(path+".content", codeInvalidType, "%s.content must be a string, an array of content parts, or null, got %s.", path, c.Kind)
}

func checkPart(p *ojson.Value, path string) *Rejection {
	if p.Kind != ojson.Object {
		return badMessages(path, codeInvalidType, "%s must be a content part object, got %s.", path, p.Kind)
	}
	t := p.Get("type")
	if t == nil || t.IsNull() {
		return badMessages(path+".type", codeMissingParam, "Missing 'type' field in content part %s.", path)
	}
	if t.Kind != ojson.String || !slices.Contains(partTypes, t.Str) {
		return badMessages(path+".type", codeInvalidValue, "Unsupported content part type %s in %s. Supported types: %s.",
			describeType(t), path, strings.Join(partTypes, ", "))
	}
	if t.Str == "text" || t.Str == "input_text" || t.Str == "output_text" {
		if tx := p.Get("text"); tx == nil || tx.Kind != ojson.String {
			return badMessages(path+".text", codeInvalidType, "A %s part needs a string text (%s).", t.Str, path)
		}
	}
	return nil
}

func describeType(t *ojson.Value) string {
	if t.Kind == ojson.String {
		return fmt.Sprintf("%q", t.Str)
	}
	return t.Kind.String()
}

func checkToolCalls(tc *ojson.Value, path string) *Rejection {
	if tc.Kind != ojson.Array {
		return badMessages(path, codeInvalidType, "%s must be an array, got %s.", path, tc.Kind)
	}
	for i, call := range tc.Items {
		p := fmt.Sprintf("%s[%d]", path, i)
		if call.Kind != ojson.Object {
			return badMessages(p, codeInvalidType, "%s must be an object, got %s.", p, call.Kind)
		}
		fn := call.Get("function")
		if fn == nil || fn.Kind != ojson.Object {
			return badMessages(p+".function", codeMissingParam, "%s.function must be an object with name and arguments.", p)
		}
		if name := fn.Get("name"); name == nil || name.Kind != ojson.String {
			return badMessages(p+".function.name", codeMissingParam, "%s.function.name must be a string.", p)
		}
		if args := fn.Get("arguments"); args != nil && !args.IsNull() && args.Kind != ojson.String && args.Kind != ojson.Object {
			return badMessages(p+".function.arguments", codeInvalidType, "%s.function.arguments must be a JSON string, got %s.", p, args.Kind)
		}
	}
	return nil
}

// checkPrompt accepts what /v1/completions accepts: a string, an array of
// strings, an array of token ids, or an array of such arrays; each id in
// the model's vocabulary (vocab, 0 when not known: CheckTokenIDs).
func checkPrompt(req *ojson.Value, vocab int) *Rejection {
	p := req.Get("prompt")
	bad := func(param, code, format string, args ...any) *Rejection {
		return &Rejection{Reason: InvalidPrompt, Status: 400, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
	}
	if p == nil || p.IsNull() {
		return bad("prompt", codeMissingParam, "You must provide a prompt parameter.")
	}
	const shapes = "a string, an array of strings, an array of token ids, or an array of token-id arrays"
	switch p.Kind {
	case ojson.String:
		return nil
	case ojson.Array:
	default:
		return bad("prompt", codeInvalidType, "prompt must be %s, got %s.", shapes, p.Kind)
	}
	if len(p.Items) == 0 {
		return bad("prompt", codeInvalidValue, "prompt must not be an empty array.")
	}
	switch p.Items[0].Kind {
	case ojson.String:
		for i, it := range p.Items {
			if it.Kind != ojson.String {
				return bad(fmt.Sprintf("prompt[%d]", i), codeInvalidType, "prompt[%d] must be a string like the other prompts, got %s.", i, it.Kind)
			}
		}
	case ojson.Number:
		return promptIDs(p, "prompt", vocab)
	case ojson.Array:
		for i, it := range p.Items {
			param := fmt.Sprintf("prompt[%d]", i)
			if it.Kind != ojson.Array {
				return bad(param, codeInvalidType, "%s must be an array of token ids like the other prompts, got %s.", param, it.Kind)
			}
			if len(it.Items) == 0 {
				return bad(param, codeInvalidValue, "%s must not be empty.", param)
			}
			if rej := promptIDs(it, param, vocab); rej != nil {
				return rej
			}
		}
	default:
		return bad("prompt[0]", codeInvalidType, "prompt must be %s, got an array of %s.", shapes, p.Items[0].Kind)
	}
	return nil
}

// promptIDs checks a completions prompt's token ids (CheckTokenIDs). The
// prompt's refusals are InvalidPrompt, and an entry that is not an id is
// invalid_value whether or not it is an integer: the code the completions
// prompt has always answered (TestDoorRejections, "float token id"),
// where the pooling input and /detokenize answer invalid_type for a
// non-integer.
func promptIDs(ids *ojson.Value, param string, vocab int) *Rejection {
	rej := CheckTokenIDs(ids, param, vocab)
	if rej != nil {
		rej.Reason, rej.Code = InvalidPrompt, codeInvalidValue
	}
	return rej
}
