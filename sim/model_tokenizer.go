package sim

import (
	"fmt"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// ModelTokenizer lets the simulator count prompts with a real model's
// tokenizer and chat template, as vLLM does (maitred sim --tokenizer DIR).
func ModelTokenizer(m *tokenize.Model) Tokenizer { return modelTokenizer{m} }

type modelTokenizer struct{ m *tokenize.Model }

func (t modelTokenizer) ChatPromptTokens(body []byte) (int, error) {
	ids, err := t.ChatTokenIDs(body)
	return len(ids), err
}

func (t modelTokenizer) CompletionPromptTokens(body []byte) (int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return 0, err
	}
	c, err := t.m.CountCompletion(v, 0)
	if err != nil {
		return 0, err
	}
	if !c.Exact {
		return 0, fmt.Errorf("cannot count: %s", c.Reason)
	}
	return c.Tokens, nil
}

func (t modelTokenizer) ChatTokenIDs(body []byte) ([]int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	return t.m.TokenizeChat(v)
}

func (t modelTokenizer) CompletionTokenIDs(body []byte) ([]int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	return t.m.TokenizeCompletion(v)
}

var (
	_ ChatTokenIDer       = modelTokenizer{}
	_ CompletionTokenIDer = modelTokenizer{}
)
