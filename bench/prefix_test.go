package main

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/tokenize"
)

// TestPxTokenizerIsTheModels: the scenario's remembering tokenizer gives
// the demo model's own ids for growing conversations (its pieces cut at
// <|im_start|> encode as the whole does), turn after turn, with the
// memory warm.
func TestPxTokenizerIsTheModels(t *testing.T) {
	m, err := tokenize.Builtin("demo")
	if err != nil {
		t.Fatal(err)
	}
	px := newPxTokenizer(m)
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := []chatMessage{{"system", pxText(rng, 300) + " <|im_start|>x"}}
	for turn := range 6 {
		msgs = append(msgs, chatMessage{"user", pxText(rng, 20+turn)})
		body, err := json.Marshal(pxStreamRequest{Model: "demo", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		v, err := ojson.Parse(body, ojson.DefaultMaxDepth)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.TokenizeChat(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := px.ChatTokenIDs(body)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("turn %d: %d ids (%v), want the model's %d", turn, len(got), err, len(want))
		}
		msgs = append(msgs, chatMessage{"assistant", pxText(rng, 10) + "\n\n"})
	}
}
