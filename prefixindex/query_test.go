package prefixindex

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/maitred-dev/maitred/kvevents"
)

// walkMatch is the reference match: each backend's run of held keys from
// the first, key by key.
func walkMatch(x *Index, keys []Key, names []string) []int {
	out := make([]int, len(names))
	for i, n := range names {
		bit := x.backends[n].bit
		for out[i] < len(keys) && x.blocks[keys[out[i]]]&bit != 0 {
			out[i]++
		}
	}
	return out
}

// orphansOf counts b's held blocks whose parent it does not hold.
func orphansOf(b *backend) int {
	n := 0
	for _, hb := range b.held {
		if _, ok := b.held[hb.parent]; !ok && !hb.top {
			n++
		}
	}
	return n
}

// TestMatchDifferential: conversations' prompts (sharing system prompts,
// growing turn by turn) stored by three backends as vLLM stores them
// (a request's blocks after the cached prefix, naming its parent), on
// several data-parallel ranks, removed either in vLLM's eviction order
// (a block before its parent) or in any order (a parent removed first,
// leaving orphans), with clears. After every step each backend's match of
// every prompt must be the key-by-key walk's, and its orphan count the
// real one: bisection (while no backend has orphans) and walking agree.
func TestMatchDifferential(t *testing.T) {
	names := []string{"a", "b", "c"}
	for _, anyOrder := range []bool{false, true} {
		t.Run(fmt.Sprintf("any_order=%v", anyOrder), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 29))
			x := New(bs, 0, nil)
			for _, n := range names {
				x.Add(n, 0, 2)
				x.SetState(n, 0, true, "")
				x.SetState(n, 1, true, "")
			}
			// Prompts: 4 system prompts, each continued by conversations
			// growing by a turn.
			var prompts [][]int
			for s := range 4 {
				p := prompt(4*bs + s)
				p[0] = 1000 + s
				prompts = append(prompts, p)
			}
			// hashes of what each backend holds, by (backend, rank).
			type rankKey struct {
				name string
				rank int
			}
			held := map[rankKey][]kvevents.Hash{}
			nextHash := kvevents.Hash(1)
			hashOf := map[string]kvevents.Hash{} // a rank's block: its vLLM hash
			bused := func(rk rankKey, p []int, j int) string { return fmt.Sprint(rk, p[:(j+1)*bs]) }
			for step := range 400 {
				switch op := rng.IntN(10); {
				case op < 4: // a new turn of a conversation
					base := prompts[rng.IntN(len(prompts))]
					p := append(append([]int(nil), base...), prompt(1+rng.IntN(3*bs))...)
					p[len(base)] = 5000 + step
					prompts = append(prompts, p)
				case op < 8: // a backend's rank stores a prompt's blocks after those it holds
					rk := rankKey{names[rng.IntN(len(names))], rng.IntN(2)}
					p := prompts[rng.IntN(len(prompts))]
					nb := len(p) / bs
					j := 0
					for j < nb && hashOf[bused(rk, p, j)] != 0 {
						j++
					}
					if j == nb {
						continue
					}
					e := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: bs}
					if j > 0 {
						e.Parent, e.HasParent = hashOf[bused(rk, p, j-1)], true
					}
					for ; j < nb; j++ {
						h := nextHash
						nextHash++
						hashOf[bused(rk, p, j)] = h
						held[rk] = append(held[rk], h)
						e.BlockHashes = append(e.BlockHashes, h)
						for _, id := range p[j*bs : (j+1)*bs] {
							e.TokenIDs = append(e.TokenIDs, int32(id))
						}
					}
					x.Apply(rk.name, kvevents.Batch{Events: []kvevents.Event{e}, DPRank: rk.rank})
				case op < 9: // removals
					rk := rankKey{names[rng.IntN(len(names))], rng.IntN(2)}
					hs := held[rk]
					for n := rng.IntN(4); n > 0 && len(hs) > 0; n-- {
						i := len(hs) - 1 // the last stored first: a child before its parent
						if anyOrder {
							i = rng.IntN(len(hs))
						}
						h := hs[i]
						hs = append(hs[:i], hs[i+1:]...)
						for k, v := range hashOf {
							if v == h {
								delete(hashOf, k)
							}
						}
						x.Apply(rk.name, kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{h}}}, DPRank: rk.rank})
					}
					held[rk] = hs
				default: // a backend cleared
					n := names[rng.IntN(len(names))]
					x.Clear(n)
					for rk := range held {
						if rk.name == n {
							delete(held, rk)
						}
					}
					for k := range hashOf {
						if len(k) > len(n)+1 && k[1:len(n)+1] == n && k[len(n)+1] == ' ' {
							delete(hashOf, k)
						}
					}
				}
				for _, n := range names {
					b := x.backends[n]
					if got, want := b.orphans, orphansOf(b); got != want {
						t.Fatalf("step %d: %s has %d orphans, counted %d", step, n, got, want)
					}
				}
				for _, p := range prompts {
					keys := AppendKeys(nil, "", p, bs)
					got := make([]int, len(names))
					if !x.Match(keys, names, got) {
						t.Fatal("Match: not usable")
					}
					if want := walkMatch(x, keys, names); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("step %d: match %v, key by key %v", step, got, want)
					}
				}
			}
			orphans := 0
			for _, n := range names {
				orphans += x.backends[n].orphans
			}
			if anyOrder != (orphans > 0) {
				t.Errorf("orphans at the end: %d (removals in any order: %v)", orphans, anyOrder)
			}
		})
	}
}
