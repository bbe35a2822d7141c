package prefixindex

import (
	"fmt"
	"testing"

	"github.com/maitred-dev/maitred/kvevents"
)

// BenchmarkIndexMatch: a 1k- and a 30k-token prompt (blocks of 16)
// matched against four live backends, one holding every block of it, in
// an index holding 100k other blocks: the door's index lookup.
func BenchmarkIndexMatch(b *testing.B) {
	x := New(16, 0, nil)
	names := []string{"b0", "b1", "b2", "b3"}
	for _, n := range names {
		x.Add(n, 0, 1)
		x.SetState(n, 0, true, "")
	}
	other := make([]int32, 100_000*16)
	for i := range other {
		other[i] = int32(i % 151_000)
	}
	hashes := make([]kvevents.Hash, 100_000)
	for i := range hashes {
		hashes[i] = kvevents.Hash(1_000_000 + i)
	}
	x.Apply("b1", kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: hashes, TokenIDs: other, BlockSize: 16}}})
	for _, tokens := range []int{1000, 30000} {
		ids := make([]int32, tokens/16*16)
		for i := range ids {
			ids[i] = int32(7 + i%1000)
		}
		hs := make([]kvevents.Hash, len(ids)/16)
		for i := range hs {
			hs[i] = kvevents.Hash(tokens + i)
		}
		x.Apply("b0", kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: hs, TokenIDs: ids, BlockSize: 16}}})
		keys := AppendKeys(nil, "", ids, 16)
		cached := make([]int, len(names))
		b.Run(fmt.Sprintf("%dk", tokens/1000), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !x.Match(keys, names, cached) || cached[0] != len(keys) {
					b.Fatalf("cached = %v, want %d blocks on b0", cached, len(keys))
				}
			}
		})
	}
}
