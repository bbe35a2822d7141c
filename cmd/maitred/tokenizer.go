package main

import (
	"fmt"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// modelTokenizer lets the simulator count prompts with a real model's
// tokenizer and chat template, as vLLM does.
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

var _ sim.ChatTokenIDer = modelTokenizer{}

// demoTokenizer is the built-in demo model: o200k_base with a ChatML
// template, available offline.
func demoTokenizer() (sim.Tokenizer, error) {
	m, err := tokenize.Builtin("demo")
	if err != nil {
		return nil, err
	}
	return modelTokenizer{m}, nil
}
