package tokenize

import "unicode/utf8"

// mergeBPE is HF's BPE model driven by the merges list, as used by
// SentencePiece conversions (Llama 2, Gemma): a word starts as Unicode
// characters (a character missing from the vocabulary becomes its UTF-8
// bytes as <0xXX> tokens with byte_fallback, else unk), then the adjacent
// pair with the lowest merge rank merges first, leftmost on ties, until no
// listed pair remains. A min-heap over a linked list keeps it O(n log n):
// without a pre-tokenizer a whole message is one word.
type mergeBPE struct {
	vocab map[string]int32
	// bmp[r] is the id of the single-rune token r (BMP only), or -1.
	bmp []int32
	// merges maps a<<32|b to rank<<32|merged id.
	merges       *pairTable
	byteID       [256]int32 // <0xXX> ids, -1 when absent
	hasBytes     bool       // byte_fallback and all 256 <0xXX> exist
	unk          int32      // -1: none
	fuseUnk      bool
	ignoreMerges bool
	reach        *reachTable // nil: no byte bound (see encoder_bound.go)
}

func (m *mergeBPE) pair(a, b int32) (rank, id int32, ok bool) {
	v, ok := m.merges.get(uint64(uint32(a))<<32 | uint64(uint32(b)))
	return int32(v >> 32), int32(uint32(v)), ok
}

// pairTable is an open-addressing hash table from a pair of ids to
// rank<<32|merged id: one probe is one cache line, unlike a Go map of this
// size (Gemma 3 has 514,906 merges).
type pairTable struct {
	slots []pairSlot
	mask  uint64
}

type pairSlot struct{ key, val uint64 } // key has bit 63 set when used

const pairUsed = 1 << 63

func newPairTable(n int) *pairTable {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	return &pairTable{slots: make([]pairSlot, size), mask: uint64(size - 1)}
}

// put stores v for k unless k is present (the first merge of a pair wins).
func (t *pairTable) put(k, v uint64) {
	k |= pairUsed
	for i := hashShort(k) & t.mask; ; i = (i + 1) & t.mask {
		switch t.slots[i].key {
		case k:
			return
		case 0:
			t.slots[i] = pairSlot{k, v}
			return
		}
	}
}

func (t *pairTable) get(k uint64) (uint64, bool) {
	k |= pairUsed
	for i := hashShort(k) & t.mask; ; i = (i + 1) & t.mask {
		switch sl := &t.slots[i]; sl.key {
		case k:
			return sl.val, true
		case 0:
			return 0, false
		}
	}
}

// symbols appends word's initial symbols to ids: each character's id, or
// its bytes' ids (byte fallback), or unk (fused when asked).
func (m *mergeBPE) symbols(ids []int32, word string) []int32 {
	lastUnk := false
	for i := 0; i < len(word); {
		r, w := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+w]
		i += w
		if r < 1<<16 && (r != utf8.RuneError || w == 3) {
			if id := m.bmp[r]; id >= 0 {
				ids = append(ids, id)
				lastUnk = false
				continue
			}
		} else if id, ok := m.vocab[ch]; ok {
			ids = append(ids, id)
			lastUnk = false
			continue
		}
		if m.hasBytes {
			for k := 0; k < len(ch); k++ {
				ids = append(ids, m.byteID[ch[k]])
			}
			lastUnk = false
			continue
		}
		if m.unk < 0 {
			continue
		}
		if m.fuseUnk && lastUnk {
			continue
		}
		ids = append(ids, m.unk)
		lastUnk = true
	}
	return ids
}

func (m *mergeBPE) encode(dst []int, word string, sc *bpeScratch) []int {
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, int(id))
		}
	}
	// Symbols: ids in sc.pos, linked by next/prev.
	ids := m.symbols(sc.pos[:0], word)
	sc.pos = ids
	n := len(ids)
	if n <= 1 {
		for _, id := range ids {
			dst = append(dst, int(id))
		}
		return dst
	}
	next := grow32(sc.next, n)
	prev := grow32(sc.prev, n)
	rk := grow32(sc.rk, n)
	sc.next, sc.prev, sc.rk = next, prev, rk
	h := sc.heap[:0]
	pairAt := func(i int32) (int32, int32) {
		j := next[i]
		if j >= int32(n) {
			return noRank, 0
		}
		r, id, ok := m.pair(ids[i], ids[j])
		if !ok {
			return noRank, 0
		}
		return r, id
	}
	for i := int32(0); i < int32(n); i++ {
		next[i] = i + 1
		prev[i] = i - 1
	}
	for i := int32(0); i < int32(n); i++ {
		r, _ := pairAt(i)
		rk[i] = r
		if r != noRank {
			h = append(h, uint64(r)<<32|uint64(i))
		}
	}
	heapInit(h)
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		r, i := int32(top>>32), int32(uint32(top))
		if rk[i] != r {
			continue
		}
		_, nid := pairAt(i)
		j := next[i]
		ids[i] = nid
		rk[j] = -1
		next[i] = next[j]
		if next[j] < int32(n) {
			prev[next[j]] = i
		}
		if rk[i], _ = pairAt(i); rk[i] != noRank {
			h = heapPush(h, uint64(rk[i])<<32|uint64(i))
		}
		if p := prev[i]; p >= 0 {
			if rk[p], _ = pairAt(p); rk[p] != noRank {
				h = heapPush(h, uint64(rk[p])<<32|uint64(p))
			}
		}
	}
	sc.heap = h
	for i := int32(0); i < int32(n); i = next[i] {
		dst = append(dst, int(ids[i]))
	}
	return dst
}
