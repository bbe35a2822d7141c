package sim

import (
	"bytes"
	"strconv"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// The prompts of a validated pooling request, built as vLLM's pooling IO
// processors build its engine inputs: each text prompt tokenized with the
// request's add_special_tokens, token ids as given, each conversation
// rendered through the chat template with the chat class's defaults, and
// score/rerank pairs as a cross-encoder's (the query, then the document).
// A prompt is what the Tokenizer receives: a completions-shaped body for
// text, a chat-shaped body for a conversation.

// textPrompt is one text prompt as a body for CompletionPromptTokens.
func textPrompt(rawString []byte, addSpecial bool) poolInput {
	var b bytes.Buffer
	b.WriteString(`{"prompt":`)
	b.Write(rawString)
	b.WriteString(`,"add_special_tokens":`)
	b.WriteString(strconv.FormatBool(addSpecial))
	b.WriteByte('}')
	return poolInput{body: b.Bytes()}
}

// chatPrompt is one conversation as a body for ChatPromptTokens: the
// messages, the chat class's add_generation_prompt and add_special_tokens
// (default false), and the template fields the request sets.
func chatPrompt(v *ojson.Value, body, conv []byte) poolInput {
	var b bytes.Buffer
	b.WriteString(`{"messages":`)
	b.Write(conv)
	for _, k := range []string{"add_generation_prompt", "add_special_tokens"} {
		b.WriteString(`,"` + k + `":`)
		if f := v.Get(k); !f.IsNull() {
			b.Write(f.Raw(body))
		} else {
			b.WriteString("false")
		}
	}
	for _, k := range []string{"continue_final_message", "chat_template", "chat_template_kwargs", "tools"} {
		if f := v.Get(k); f != nil {
			b.WriteString(`,"` + k + `":`)
			b.Write(f.Raw(body))
		}
	}
	b.WriteByte('}')
	return poolInput{chat: true, body: b.Bytes()}
}

// scorePairs pairs data_1 with data_2 as vLLM's score validates and pairs
// them (1:1, 1:N or N:N): each pair is the query with special tokens
// followed by the document without.
func scorePairs(data1, data2 []*ojson.Value, body []byte) ([]poolInput, *apiError) {
	switch {
	case len(data1) == 0:
		return nil, badInput("At least one text element must be given")
	case len(data2) == 0:
		return nil, badInput("At least one text_pair element must be given")
	case len(data1) > 1 && len(data1) != len(data2):
		return nil, badInput("Input lengths must be either 1:1, 1:N or N:N")
	}
	out := make([]poolInput, len(data2))
	for i, d := range data2 {
		q := data1[0]
		if len(data1) > 1 {
			q = data1[i]
		}
		doc := textPrompt(d.Raw(body), false)
		doc.doc = d.Str
		out[i] = textPrompt(q.Raw(body), true)
		out[i].pair = &doc
	}
	return out, nil
}
