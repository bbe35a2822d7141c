package tokenize

import (
	"math"
	"unsafe"
)

const noRank = math.MaxInt32

// bpeScratch is reusable working memory for one BPE call.
type bpeScratch struct {
	pos  []int32
	rk   []int32
	next []int32
	prev []int32
	heap []uint64
	pc   pieceCache
}

// pieceCache remembers the ids of recently merged short pieces. It lives in
// a pooled scratch, so it is per goroutine and needs no lock. Keys and ids
// are copied into fixed-size arenas (the caller's text is never retained);
// when an arena is full the whole cache is dropped and refilled.
type pieceCache struct {
	m    map[string]uint32 // piece -> offset<<8 | count in ids
	keys []byte
	ids  []int32
}

const (
	cacheMaxPiece = 48
	cacheKeyBytes = 64 << 10
	cacheIDs      = 16 << 10
)

func (c *pieceCache) get(dst []int, piece string) ([]int, bool) {
	v, ok := c.m[piece]
	if !ok {
		return dst, false
	}
	for _, id := range c.ids[v>>8 : v>>8+v&0xff] {
		dst = append(dst, int(id))
	}
	return dst, true
}

func (c *pieceCache) put(piece string, ids []int) {
	if len(ids) > 0xff {
		return
	}
	if c.m == nil || len(c.keys)+len(piece) > cacheKeyBytes || len(c.ids)+len(ids) > cacheIDs {
		if c.m == nil {
			c.m = make(map[string]uint32, 1024)
			c.keys = make([]byte, 0, cacheKeyBytes)
			c.ids = make([]int32, 0, cacheIDs)
		}
		clear(c.m)
		c.keys, c.ids = c.keys[:0], c.ids[:0]
	}
	start := len(c.keys)
	c.keys = append(c.keys, piece...) // never reallocates: capacity is fixed
	key := unsafe.String(&c.keys[start], len(piece))
	off := len(c.ids)
	for _, id := range ids {
		c.ids = append(c.ids, int32(id))
	}
	c.m[key] = uint32(off)<<8 | uint32(len(ids))
}

func grow32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/4)
	}
	return s[:n]
}

// rankBPE is tiktoken-style byte-level BPE: the pieces are raw bytes, a
// token's rank is its id, and the adjacent pair whose concatenation has the
// lowest rank merges first (leftmost on ties). For HF byte-level
// vocabularies this equals merges-order BPE when ids grow along the merges
// list; the loader checks that before building one.
type rankBPE struct {
	ranks  map[string]int32
	short  *shortTable // the ranks of tokens up to 7 bytes
	byteID [256]int32
	maxLen int // longest token in bytes
	reach  *reachTable
}

// scanLimit is the piece length up to which the quadratic scan (fast for
// short pieces: no heap, tight loops) is used; longer pieces use the heap.
const scanLimit = 96

func (b *rankBPE) rank(s string) int32 {
	if len(s) <= 7 {
		return b.short.get(s)
	}
	if len(s) > b.maxLen {
		return noRank
	}
	if r, ok := b.ranks[s]; ok {
		return r
	}
	return noRank
}

func (b *rankBPE) encode(dst []int, piece string, sc *bpeScratch) []int {
	switch {
	case len(piece) == 0:
		return dst
	case len(piece) == 1:
		return append(dst, int(b.byteID[piece[0]]))
	}
	if r := b.rank(piece); r != noRank {
		return append(dst, int(r))
	}
	if len(piece) <= cacheMaxPiece {
		if out, ok := sc.pc.get(dst, piece); ok {
			return out
		}
		n := len(dst)
		dst = b.scan(dst, piece, sc)
		sc.pc.put(piece, dst[n:])
		return dst
	}
	if len(piece) <= scanLimit {
		return b.scan(dst, piece, sc)
	}
	return b.heapMerge(dst, piece, sc)
}

// scan is tiktoken's byte_pair_merge: O(n²) but with tiny constants.
func (b *rankBPE) scan(dst []int, piece string, sc *bpeScratch) []int {
	n := len(piece)
	pos := grow32(sc.pos, n+1)
	rk := grow32(sc.rk, n+1)
	sc.pos, sc.rk = pos, rk
	for i := 0; i <= n; i++ {
		pos[i] = int32(i)
		rk[i] = noRank
	}
	for i := 0; i+2 <= n; i++ {
		rk[i] = b.rank(piece[i : i+2])
	}
	m := n + 1 // live entries in pos/rk
	for m > 2 {
		minR, minI := int32(noRank), -1
		for i := 0; i < m-1; i++ {
			if rk[i] < minR {
				minR, minI = rk[i], i
			}
		}
		if minI < 0 {
			break
		}
		i := minI
		// parts i and i+1 merge: recompute the ranks that span them.
		if i > 0 {
			if i+2 < m {
				rk[i-1] = b.rank(piece[pos[i-1]:pos[i+2]])
			} else {
				rk[i-1] = noRank
			}
		}
		if i+3 < m {
			rk[i] = b.rank(piece[pos[i]:pos[i+3]])
		} else {
			rk[i] = noRank
		}
		copy(pos[i+1:m-1], pos[i+2:m])
		copy(rk[i+1:m-1], rk[i+2:m])
		m--
	}
	for i := 0; i+1 < m; i++ {
		dst = append(dst, int(b.rank(piece[pos[i]:pos[i+1]])))
	}
	return dst
}

// heapMerge is the same merge order with a min-heap keyed by (rank, start)
// over a linked list of parts: O(n log n), for long pieces (a 1 MB "word"
// is a few hundred milliseconds instead of minutes).
func (b *rankBPE) heapMerge(dst []int, piece string, sc *bpeScratch) []int {
	n := len(piece)
	next := grow32(sc.next, n)
	prev := grow32(sc.prev, n)
	rk := grow32(sc.rk, n)
	sc.next, sc.prev, sc.rk = next, prev, rk
	h := sc.heap[:0]
	end := func(i int32) int32 { // end offset of part i
		if j := next[i]; j < int32(n) {
			return j
		}
		return int32(n)
	}
	pairRank := func(i int32) int32 {
		j := next[i]
		if j >= int32(n) {
			return noRank
		}
		return b.rank(piece[i:end(j)])
	}
	for i := int32(0); i < int32(n); i++ {
		next[i] = i + 1
		prev[i] = i - 1
	}
	for i := int32(0); i < int32(n); i++ {
		rk[i] = pairRank(i)
		if rk[i] != noRank {
			h = append(h, uint64(rk[i])<<32|uint64(i))
		}
	}
	heapInit(h)
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		r, i := int32(top>>32), int32(uint32(top))
		if rk[i] != r {
			continue // stale: i died or its pair changed
		}
		j := next[i]
		rk[j] = -1 // dead
		next[i] = next[j]
		if next[j] < int32(n) {
			prev[next[j]] = i
		}
		if rk[i] = pairRank(i); rk[i] != noRank {
			h = heapPush(h, uint64(rk[i])<<32|uint64(i))
		}
		if p := prev[i]; p >= 0 {
			if rk[p] = pairRank(p); rk[p] != noRank {
				h = heapPush(h, uint64(rk[p])<<32|uint64(p))
			}
		}
	}
	sc.heap = h
	for i := int32(0); i < int32(n); i = next[i] {
		dst = append(dst, int(b.rank(piece[i:end(i)])))
	}
	return dst
}

// A binary min-heap of uint64 keys (rank<<32 | position).

func heapInit(h []uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapDown(h []uint64, i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r] < h[l] {
			m = r
		}
		if h[i] <= h[m] {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= h[i] {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []uint64) []uint64 {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	if n > 0 {
		heapDown(h, 0)
	}
	return h
}

// shortTable is an open-addressing hash table for tokens of at most 7
// bytes, packed with their length into one uint64 key: most BPE lookups
// are short pairs, and hashing one word beats hashing and comparing a
// string in a large Go map.
type shortTable struct {
	slots []shortSlot
	mask  uint64
}

// shortSlot keeps key and value together: one cache line per probe.
type shortSlot struct {
	key uint64 // 0: empty (a packed key always has a non-zero length byte)
	val int32
}

func packShort(s string) uint64 {
	k := uint64(len(s)) << 56
	for i := 0; i < len(s); i++ {
		k |= uint64(s[i]) << (8 * i)
	}
	return k
}

func hashShort(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

func newShortTable(ranks map[string]int32) *shortTable {
	n := 0
	for s := range ranks {
		if len(s) <= 7 {
			n++
		}
	}
	size := 1
	for size < 2*n+16 {
		size <<= 1
	}
	t := &shortTable{slots: make([]shortSlot, size), mask: uint64(size - 1)}
	for s, r := range ranks {
		if len(s) > 7 || len(s) == 0 {
			continue
		}
		k := packShort(s)
		for i := hashShort(k) & t.mask; ; i = (i + 1) & t.mask {
			if t.slots[i].key == 0 {
				t.slots[i] = shortSlot{k, r}
				break
			}
		}
	}
	return t
}

func (t *shortTable) get(s string) int32 {
	k := packShort(s)
	for i := hashShort(k) & t.mask; ; i = (i + 1) & t.mask {
		switch sl := &t.slots[i]; sl.key {
		case k:
			return sl.val
		case 0:
			return noRank
		}
	}
}
