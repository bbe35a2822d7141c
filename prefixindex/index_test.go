package prefixindex

import (
	"encoding/binary"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/maitred-dev/maitred/kvevents"
)

const bs = 4

func ids(from, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(from + i)
	}
	return out
}

func stored(parent kvevents.Hash, hasParent bool, hashes []kvevents.Hash, toks []int32) kvevents.Event {
	return kvevents.Event{Kind: kvevents.BlockStored, BlockHashes: hashes, Parent: parent, HasParent: hasParent, TokenIDs: toks, BlockSize: bs}
}

func batch(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{Events: evs, DPRank: -1} }

func live(x *Index, names ...string) {
	for _, n := range names {
		x.Add(n, 0, 1)
		x.SetState(n, 0, true, "")
	}
}

func match(t *testing.T, x *Index, prompt []int, names ...string) []int {
	t.Helper()
	keys := AppendKeys(nil, "", prompt, bs)
	out := make([]int, len(names))
	if !x.Match(keys, names, out) {
		t.Fatalf("Match: not usable")
	}
	return out
}

func prompt(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 100 + i
	}
	return p
}

func TestStoreMatchRemove(t *testing.T) {
	x := New(bs, 0, nil)
	live(x, "a", "b")
	// a holds 3 blocks of the prompt (two events: the second names its
	// parent by vLLM's hash), b holds the first only.
	x.Apply("a", batch(stored(0, false, []kvevents.Hash{11, 12}, ids(100, 8))))
	x.Apply("a", batch(stored(12, true, []kvevents.Hash{13}, ids(108, 4))))
	x.Apply("b", batch(stored(0, false, []kvevents.Hash{900}, ids(100, 4))))
	p := prompt(14) // 3 full blocks and a tail
	if got := match(t, x, p, "a", "b"); got[0] != 3 || got[1] != 1 {
		t.Fatalf("match = %v, want [3 1]", got)
	}
	// Another prompt diverging in the second block.
	q := prompt(12)
	q[5] = 7
	if got := match(t, x, q, "a", "b"); got[0] != 1 || got[1] != 1 {
		t.Fatalf("diverging match = %v, want [1 1]", got)
	}
	x.Apply("a", batch(kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{12}}))
	if got := match(t, x, p, "a", "b"); got[0] != 1 {
		t.Fatalf("after removal = %v, want a at 1", got)
	}
	// Removals of another tier say nothing of the GPU.
	x.Apply("b", batch(kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{900}, Medium: "CPU"}))
	if got := match(t, x, p, "b"); got[0] != 1 {
		t.Fatalf("CPU removal changed b: %v", got)
	}
	x.Apply("b", batch(kvevents.Event{Kind: kvevents.AllBlocksCleared}))
	if got := match(t, x, p, "a", "b"); got[1] != 0 || got[0] != 1 {
		t.Fatalf("after AllBlocksCleared = %v, want [1 0]", got)
	}
	if st, _ := x.Status("b"); st.Blocks != 0 || st.Clears != 1 {
		t.Fatalf("b status = %+v", st)
	}
}

func TestSkippedBlocks(t *testing.T) {
	x := New(bs, 0, nil)
	live(x, "a")
	e := stored(0, false, []kvevents.Hash{1}, ids(100, 4))
	e.ExtraKeys = true // a cache_salt or multimodal input: ids alone do not name it
	x.Apply("a", batch(e))
	x.Apply("a", batch(stored(77, true, []kvevents.Hash{2}, ids(100, 4)))) // unknown parent
	e = stored(0, false, []kvevents.Hash{3}, ids(100, 8))
	e.BlockSize = 8 // another block size
	x.Apply("a", batch(e))
	if got := match(t, x, prompt(8), "a"); got[0] != 0 {
		t.Fatalf("match = %v, want 0", got)
	}
	if st, _ := x.Status("a"); st.Skipped != 3 || st.Blocks != 0 {
		t.Fatalf("status = %+v", st)
	}
}

// Data-parallel ranks of one server are one backend: a block two ranks
// hold stays until both removed it.
func TestRanksShareBackend(t *testing.T) {
	x := New(bs, 0, nil)
	live(x, "a")
	x.Apply("a", batch(stored(0, false, []kvevents.Hash{1}, ids(100, 4))))
	x.Apply("a", batch(stored(0, false, []kvevents.Hash{2}, ids(100, 4))))
	x.Apply("a", batch(kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{1}}))
	if got := match(t, x, prompt(4), "a"); got[0] != 1 {
		t.Fatalf("match = %v, want 1", got)
	}
	x.Apply("a", batch(kvevents.Event{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{2}}))
	if got := match(t, x, prompt(4), "a"); got[0] != 0 {
		t.Fatalf("match = %v, want 0", got)
	}
}

func TestCapacityAndState(t *testing.T) {
	x := New(bs, 0, nil)
	x.Add("a", 2, 1)
	keys := AppendKeys(nil, "", prompt(4), bs)
	out := make([]int, 1)
	if x.Match(keys, []string{"a"}, out) {
		t.Fatal("a backend without events was usable")
	}
	x.SetState("a", 0, true, "")
	x.Apply("a", batch(stored(0, false, []kvevents.Hash{1, 2, 3}, ids(100, 12))))
	if st, _ := x.Status("a"); st.Blocks != 0 || st.Clears != 1 {
		t.Fatalf("over capacity: status = %+v, want cleared", st)
	}
	x.SetState("a", 0, false, "unreachable")
	if x.Match(keys, []string{"a"}, out) {
		t.Fatal("a stale backend was usable")
	}
	x.Remove("a")
	if _, ok := x.Status("a"); ok {
		t.Fatal("removed backend still listed")
	}
	if len(x.blocks) != 0 {
		t.Fatalf("blocks left: %d", len(x.blocks))
	}
}

func TestChainIsOwn(t *testing.T) {
	a := AppendKeys(nil, "", []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, bs)
	b := AppendKeys(nil, "", []int32{1, 2, 3, 4, 5, 6, 7, 8}, bs)
	if len(a) != 2 || a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("int and int32 chains differ: %v %v", a, b)
	}
	if c := AppendKeys(nil, "lora-x", []int{1, 2, 3, 4}, bs); c[0] == a[0] {
		t.Fatal("a LoRA adapter's blocks share the base model's keys")
	}
	// The chain covers the parent: the same block after another prefix
	// is another key.
	d := AppendKeys(nil, "", []int{9, 9, 9, 9, 5, 6, 7, 8}, bs)
	if d[1] == a[1] {
		t.Fatal("the key of a block does not depend on its parent")
	}
}

// TestKeysAreTheirDefinition: a block's key is xxhash64 of its parent's 8
// bytes then its ids' 4 bytes each, little-endian, for every block size
// (across the chunks Next writes ids in), with the chain's root and a
// few keys pinned: keys computed by older builds stay valid.
func TestKeysAreTheirDefinition(t *testing.T) {
	ids := make([]int32, 200)
	for i := range ids {
		ids[i] = int32(i*7919 + 3)
	}
	parent := Root("")
	for n := 0; n <= len(ids); n++ {
		b := binary.LittleEndian.AppendUint64(nil, uint64(parent))
		for _, id := range ids[:n] {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
		want := Key(xxhash.Sum64(b))
		wide := make([]int, n)
		for i, id := range ids[:n] {
			wide[i] = int(id)
		}
		if got, got2 := Next(parent, ids[:n]), Next(parent, wide); got != want || got2 != want {
			t.Fatalf("a block of %d ids: keys %#x (int32) and %#x (int), want %#x", n, got, got2, want)
		}
	}
	for _, g := range []struct {
		got, want Key
	}{
		{Root(""), 0xbc9c9a42434ebe9f},
		{Root("adapter-a"), 0x62b37d80490d0b9a},
		{Next(Root(""), ids[:1]), 0x5ec21b7b67c3652b},
		{Next(Root(""), ids[:16]), 0x16667743c9c13795},
		{Next(Root(""), ids[:33]), 0xdab104b3da7161e7},
		{Next(Root(""), ids[:100]), 0xecfc7fdd1eacf90e},
	} {
		if g.got != g.want {
			t.Errorf("key %#x, pinned %#x", g.got, g.want)
		}
	}
}
