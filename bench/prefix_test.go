package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/maitred-dev/maitred/internal/ojson"
	"github.com/maitred-dev/maitred/sim"
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

// TestPxRunSendsEveryArrival: the open-loop driver sends an arrival at
// once by an idle user and, when every user waits for an answer, keeps it
// until the next answer comes, then sends it by that user, oldest first:
// no arrival is dropped. A real simulator holds each answer at its
// TokenGate until the test lets it go.
func TestPxRunSendsEveryArrival(t *testing.T) {
	gate := make(chan struct{})
	s := sim.New(sim.Config{Model: "demo", OutputTokens: 1, TokenGate: gate}, nil)
	defer s.Close()
	u, stop, err := serve(s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	r := &pxRun{target: u, client: &http.Client{Transport: poolTransport()}, systems: []string{"be brief"},
		users: []*pxUser{{}, {}}}
	const arrivals = 5
	for i := range arrivals {
		r.arrive(pxTurn{at: time.Now(), text: fmt.Sprintf("turn %d", i), pick: i})
	}
	r.mu.Lock()
	queued := r.res.queued
	r.mu.Unlock()
	if queued != arrivals-2 {
		t.Fatalf("%d arrivals queued with 2 users, want %d", queued, arrivals-2)
	}
	done := make(chan struct{})
	go func() { // one token for each request the simulator runs
		for {
			select {
			case gate <- struct{}{}:
			case <-done:
				return
			}
		}
	}()
	r.wg.Wait()
	close(done)
	if r.res.sent != arrivals || r.res.done != arrivals || r.res.failed != 0 || len(r.backlog) != 0 || len(r.waits) != arrivals {
		t.Fatalf("sent %d done %d failed %d, backlog %d, %d waits; want %d sent and answered", r.res.sent, r.res.done,
			r.res.failed, len(r.backlog), len(r.waits), arrivals)
	}
	last := map[*pxUser]int{}
	for _, u := range r.users {
		last[u] = -1
		for _, m := range u.msgs {
			var i int
			if _, err := fmt.Sscanf(m.Content, "turn %d", &i); m.Role != "user" || err != nil {
				continue
			}
			if i <= last[u] {
				t.Errorf("a user sent turn %d after turn %d: the backlog is not first come first served", i, last[u])
			}
			last[u] = i
		}
	}
}
