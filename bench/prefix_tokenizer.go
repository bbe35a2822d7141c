package main

import (
	"strings"
	"sync"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/sim"
	"github.com/maitred-dev/maitred/tokenize"
)

// pxTokenizer is the prefix scenario's tokenizer for the simulators and
// the oracle: maitred's demo model (ChatML on o200k_base), the same ids as
// its TokenizeChat, with each message's tokens remembered. The demo
// encoder splits at special tokens and encodes the text between them on
// its own, so the rendered prompt cut before each <|im_start|> encodes
// piece by piece to the same ids; a conversation's earlier messages are
// then not encoded again at every turn by each of four simulators (their
// tokenizing would otherwise eat the scaled clock: 30k-token prompts at
// tens of requests per second on a busy machine).
type pxTokenizer struct {
	sim.Tokenizer // completions, as the model counts them
	m             *tokenize.Model

	mu   sync.Mutex
	memo map[string][]int
}

// pxMemoMax bounds the remembered messages: past it they are forgotten
// all at once (a turn then encodes its conversation again).
const pxMemoMax = 1 << 14

func newPxTokenizer(m *tokenize.Model) *pxTokenizer {
	return &pxTokenizer{Tokenizer: sim.ModelTokenizer(m), m: m, memo: map[string][]int{}}
}

func (t *pxTokenizer) ChatPromptTokens(body []byte) (int, error) {
	ids, err := t.ChatTokenIDs(body)
	return len(ids), err
}

func (t *pxTokenizer) ChatTokenIDs(body []byte) ([]int, error) {
	v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
	if err != nil {
		return nil, err
	}
	text, err := t.m.RenderChat(v)
	if err != nil {
		return nil, err
	}
	var ids []int
	for text != "" {
		n := strings.Index(text[1:], pxCut) + 1
		if n == 0 {
			n = len(text)
		}
		ids = append(ids, t.piece(text[:n])...)
		text = text[n:]
	}
	return ids, nil
}

// pxCut is the special token the rendered prompt is cut before.
const pxCut = "<|im_start|>"

func (t *pxTokenizer) piece(s string) []int {
	t.mu.Lock()
	ids, ok := t.memo[s]
	t.mu.Unlock()
	if ok {
		return ids
	}
	ids = t.m.Encoder().Encode(s, false)
	t.mu.Lock()
	if len(t.memo) >= pxMemoMax {
		clear(t.memo)
	}
	t.memo[strings.Clone(s)] = ids
	t.mu.Unlock()
	return ids
}

var _ sim.ChatTokenIDer = (*pxTokenizer)(nil)
