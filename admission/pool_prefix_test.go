package admission

import (
	"testing"

	"github.com/maitred-dev/maitred/kvevents"
	"github.com/maitred-dev/maitred/prefixindex"
)

// precisePool is two backends of 1000 budget tokens each; b1 holds the
// first three blocks (of 4 tokens) of prompt, b0 none.
func precisePool(t *testing.T) (*Pool, *prefixindex.Index, []int) {
	x := prefixindex.New(4, 0, nil)
	for _, n := range []string{"b0", "b1"} {
		x.Add(n, 0, 1)
		x.SetState(n, 0, true, "")
	}
	prompt := make([]int, 14)
	ids := make([]int32, 12)
	for i := range prompt {
		prompt[i] = 500 + i
		if i < 12 {
			ids[i] = int32(500 + i)
		}
	}
	x.Apply("b1", kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: []kvevents.Hash{1, 2, 3}, TokenIDs: ids, BlockSize: 4}}})
	p := testPool([]SlotConfig{{Name: "b0", Ready: always, KVTokens: 1000}, {Name: "b1", Ready: always, KVTokens: 1000}}, nil)
	return p, x, prompt
}

func preciseTicket(x *prefixindex.Index, prompt []int, w PrefixWeights) Ticket {
	q := &prefixindex.Query{Index: x, Keys: prefixindex.AppendKeys(nil, "", prompt, 4)}
	return Ticket{Tokens: len(prompt) + 10, Prefix: q, PromptTokens: len(prompt), PrefixWeights: w}
}

func TestPrecisePick(t *testing.T) {
	p, x, prompt := precisePool(t)
	w := PrefixWeights{Cache: 1, Load: 0.5}
	for range 8 { // every time, not by the luck of two random choices
		l, o := p.Acquire(t.Context(), preciseTicket(x, prompt, w))
		if o != Admitted || l.Slot.Name != "b1" || l.Policy != "precise" || l.Cached != 12 {
			t.Fatalf("lease = %+v, %s; want b1 by precise with 12 cached tokens", l, o)
		}
		l.Release(Succeeded)
	}
	// b1 loaded past what its cached share is worth with load weighed
	// 1: 12/14 - 900/1000 < 0 - 0; with 0.5 it is still worth it.
	big, _ := p.Acquire(t.Context(), Ticket{Tokens: 900, Only: []string{"b1"}})
	l, _ := p.Acquire(t.Context(), preciseTicket(x, prompt, w))
	if l.Slot.Name != "b1" {
		t.Fatalf("lease = %+v; want b1 (load weighed 0.5)", l)
	}
	l.Release(Succeeded)
	l, _ = p.Acquire(t.Context(), preciseTicket(x, prompt, PrefixWeights{Cache: 1, Load: 1}))
	if l.Slot.Name != "b0" || l.Policy != "precise" || l.Cached != 0 {
		t.Fatalf("lease = %+v; want b0 (b1 too loaded)", l)
	}
	l.Release(Succeeded)
	big.Release(Succeeded)
}

func TestPreciseFallsBack(t *testing.T) {
	p, x, prompt := precisePool(t)
	w := PrefixWeights{Cache: 1, Load: 0.5}
	// Nothing of this prompt cached anywhere: as without (p2c).
	other := []int{1, 2, 3, 4, 5, 6, 7, 8}
	if l, _ := p.Acquire(t.Context(), preciseTicket(x, other, w)); l.Policy != "p2c" {
		t.Fatalf("policy = %s, want p2c", l.Policy)
	} else {
		l.Release(Succeeded)
	}
	if got := p.Stats().PreciseFallbacks; got[FallbackNothingCached] != 1 || got[FallbackNotLive] != 0 {
		t.Fatalf("fallbacks = %v, want one nothing_cached", got)
	}
	// One backend's index not live (its events unreachable): as without.
	x.SetState("b0", 0, false, "events endpoint unreachable")
	if l, _ := p.Acquire(t.Context(), preciseTicket(x, prompt, w)); l.Policy != "p2c" || l.Cached != 0 {
		t.Fatalf("lease = %+v, want p2c", l)
	} else {
		l.Release(Succeeded)
	}
	if got := p.Stats().PreciseFallbacks; got[FallbackNothingCached] != 1 || got[FallbackNotLive] != 1 {
		t.Fatalf("fallbacks = %v, want one of each", got)
	}
}
