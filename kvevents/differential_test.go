package kvevents

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"
)

// FuzzDecodeMatchesMsgpackLibrary holds the package's own msgpack reader
// to a reference: a batch built from the fuzzer's values is encoded by
// github.com/vmihailenco/msgpack (in vLLM's two layouts: array_like
// arrays, and maps with the tag under "type" and defaults omitted), and
// Decode must read back exactly what was encoded.
func FuzzDecodeMatchesMsgpackLibrary(f *testing.F) {
	f.Add(1700000000.5, uint8(2), uint64(1)<<63+5, true, false, uint32(100), "GPU", "", int8(-1), false)
	f.Add(0.0, uint8(1), uint64(7), false, true, uint32(0), "", "adapter", int8(3), true)
	f.Add(-1.25, uint8(0), uint64(0), true, true, uint32(1<<31-40), "CPU", "l", int8(0), true)
	f.Fuzz(func(t *testing.T, ts float64, blocks uint8, seed uint64, intHash, noParent bool, tok0 uint32,
		medium, lora string, dp int8, arrays bool) {
		if math.IsNaN(ts) {
			return
		}
		const bs = 4
		n := int(blocks % 6)
		var want Batch
		want.TS, want.DPRank = ts, int(dp)
		if dp < 0 {
			want.DPRank = -1
		}
		hashes := make([]any, n)
		stored := Event{Kind: BlockStored, BlockSize: bs, Medium: medium, LoraName: lora}
		for i := range n {
			v := seed + uint64(i)*0x9e3779b97f4a7c15
			if intHash {
				hashes[i] = v
				stored.BlockHashes = append(stored.BlockHashes, Hash(v))
			} else {
				b := bytes.Repeat([]byte{byte(v), byte(v >> 8)}, 16)
				hashes[i] = b
				stored.BlockHashes = append(stored.BlockHashes, Hash(xxhash.Sum64(b)))
			}
		}
		var parent any
		if !noParent {
			parent, stored.Parent, stored.HasParent = seed^1, Hash(seed^1), true
		}
		ids := make([]any, n*bs)
		for i := range ids {
			id := int32((uint64(tok0) + uint64(i)) % (1 << 31))
			ids[i] = id
			stored.TokenIDs = append(stored.TokenIDs, id)
		}
		removed := Event{Kind: BlockRemoved, BlockHashes: stored.BlockHashes, Medium: medium}
		want.Events = []Event{stored, removed, {Kind: AllBlocksCleared}}

		orNil := func(s string) any {
			if s == "" {
				return nil
			}
			return s
		}
		var dpv any
		if dp >= 0 {
			dpv = int(dp)
		}
		var payload any
		if arrays {
			payload = []any{ts, []any{
				[]any{"BlockStored", hashes, parent, ids, bs, nil, orNil(medium), orNil(lora)},
				[]any{"BlockRemoved", hashes, orNil(medium)},
				[]any{"AllBlocksCleared"},
			}, dpv}
		} else {
			st := map[string]any{"type": "BlockStored", "block_hashes": hashes, "token_ids": ids, "block_size": bs}
			if parent != nil {
				st["parent_block_hash"] = parent
			}
			if medium != "" {
				st["medium"] = medium
			}
			if lora != "" {
				st["lora_name"] = lora
			}
			rm := map[string]any{"type": "BlockRemoved", "block_hashes": hashes}
			if medium != "" {
				rm["medium"] = medium
			}
			payload = map[string]any{"ts": ts, "events": []any{st, rm, map[string]any{"type": "AllBlocksCleared"}},
				"data_parallel_rank": dpv}
		}
		b, err := msgpack.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("the library's encoding does not decode: %v", err)
		}
		if got.TS != want.TS || got.DPRank != want.DPRank || len(got.Events) != len(want.Events) {
			t.Fatalf("batch ts %v dp %d, %d events; want ts %v dp %d, %d", got.TS, got.DPRank, len(got.Events), want.TS, want.DPRank, len(want.Events))
		}
		for i, w := range want.Events {
			g := got.Events[i]
			if g.Kind != w.Kind || !slices.Equal(g.BlockHashes, w.BlockHashes) || g.Parent != w.Parent || g.HasParent != w.HasParent ||
				!slices.Equal(g.TokenIDs, w.TokenIDs) || (w.Kind == BlockStored && g.BlockSize != w.BlockSize) ||
				g.Medium != w.Medium || (w.Kind == BlockStored && g.LoraName != w.LoraName) {
				t.Fatalf("event %d: got %+v\nwant %+v", i, g, w)
			}
		}
	})
}
