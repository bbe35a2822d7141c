package tokenize

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"math/bits"
)

const noRank = math.MaxInt32

// bpeScratch is reusable working memory for one BPE call.
type bpeScratch struct {
	pos     []int32 // part ids
	rk      []int32
	next    []int32
	prev    []int32
	heap    []uint64
	pc      pieceCache
	short   *[shortCacheSize]shortSlot // recent whole-piece lookups up to 7 bytes
	mid     *[midCacheSize]midSlot     // recent counts of pieces of 8 to 16 bytes
	cacheOf *rankBPE                   // the model short and mid hold lookups of
	ids     []int                      // count's ids of a piece no cache answered
}

// pieceCache remembers the ids of pieces of 2 to cacheMaxPiece bytes that
// the short-token lookup did not answer: multi-token pieces and whole tokens
// over 7 bytes. It lives in a pooled scratch, so it is per goroutine and
// needs no lock. It is a fixed-size open-addressing table over maphash
// hashes of the piece bytes; keys and ids are copied into fixed-size arenas
// (the caller's text is never retained), and a single id is kept in the
// slot itself. It never evicts: once the table or an arena is full it
// takes only new pieces that still fit, as Hugging Face's BPE word cache
// (10,000 words) stops taking words when full: the
// pieces it already holds are the ones that came first, which in running
// text are mostly the frequent ones, and hits do not depend on the working
// set fitting (dropping the cache when full, or evicting the oldest
// pieces, misses on nearly every piece once a text cycles through more
// pieces than fit). The cache is renewed with its scratch, which the
// sync.Pool drops across garbage collections. About 580 KB, allocated on
// first use.
type pieceCache struct {
	slots []cacheSlot // nil until first use
	keys  []byte      // fixed capacity: never reallocated
	ids   []int32     // fixed capacity
	n     int         // pieces held
	long  int         // bytes of keys over cacheLongPiece
	seed  maphash.Seed
}

// cacheSlot is one piece: tag is the high half of its hash, never 0 (0 is
// an empty slot); key is offset<<8 | length in keys; val is id<<8 | 1 for a
// one-token piece, else offset<<8 | count in ids.
type cacheSlot struct{ tag, key, val uint32 }

const (
	// cacheMaxPiece is the longest piece cached, as HF caches words
	// shorter than 256 bytes: the few long pieces of running text
	// (indentation, rules, encoded blobs) cost the most to merge. Pieces
	// over cacheLongPiece bytes share cacheLongBytes of the key arena, so
	// that text made of them cannot fill it.
	cacheMaxPiece  = 255
	cacheLongPiece = 48
	cacheLongBytes = 32 << 10
	cacheSlots     = 1 << 14
	cacheMaxN      = cacheSlots * 3 / 4 // 12,288 pieces
	cacheKeyBytes  = 192 << 10
	cacheIDs       = 48 << 10
)

// get appends the cached ids of piece to dst. It also returns the piece's
// hash, for put.
func (c *pieceCache) get(dst []int, piece string) ([]int, uint64, bool) {
	if c.slots == nil {
		c.slots = make([]cacheSlot, cacheSlots)
		c.keys = make([]byte, 0, cacheKeyBytes)
		c.ids = make([]int32, 0, cacheIDs)
		c.seed = maphash.MakeSeed()
	}
	h := maphash.String(c.seed, piece)
	tag := uint32(h>>32) | 1
	for i := uint32(h) & (cacheSlots - 1); ; i = (i + 1) & (cacheSlots - 1) {
		e := &c.slots[i]
		if e.tag == 0 {
			return dst, h, false
		}
		if e.tag != tag || int(e.key&0xff) != len(piece) {
			continue
		}
		off := int(e.key >> 8)
		if string(c.keys[off:off+len(piece)]) != piece {
			continue
		}
		if n := e.val & 0xff; n == 1 {
			dst = append(dst, int(e.val>>8))
		} else {
			for _, id := range c.ids[e.val>>8 : e.val>>8+n] {
				dst = append(dst, int(id))
			}
		}
		return dst, h, true
	}
}

// put stores the ids of piece (hash h from get, which missed), if it fits.
func (c *pieceCache) put(piece string, h uint64, ids []int) {
	long := 0
	if len(piece) > cacheLongPiece {
		long = len(piece)
	}
	multi := 0
	if len(ids) > 1 {
		multi = len(ids)
	}
	if c.n >= cacheMaxN || len(ids) == 0 || len(ids) > 0xff ||
		len(c.keys)+len(piece) > cacheKeyBytes || c.long+long > cacheLongBytes ||
		len(c.ids)+multi > cacheIDs {
		return // full
	}
	val := uint32(ids[0])<<8 | 1
	if multi > 0 {
		val = uint32(len(c.ids))<<8 | uint32(len(ids))
		for _, id := range ids {
			c.ids = append(c.ids, int32(id))
		}
	}
	key := uint32(len(c.keys))<<8 | uint32(len(piece))
	c.keys = append(c.keys, piece...)
	c.long += long
	i := uint32(h) & (cacheSlots - 1)
	for c.slots[i].tag != 0 {
		i = (i + 1) & (cacheSlots - 1)
	}
	c.slots[i] = cacheSlot{uint32(h>>32) | 1, key, val}
	c.n++
}

// cachesOf makes the scratch's short and mid caches b's: emptied when
// they last held another model's lookups (a scratch outside a tokenizer's
// pool, in the loader or a test, may serve several). Each is allocated on
// its first use.
func (sc *bpeScratch) cachesOf(b *rankBPE) {
	if sc.cacheOf == b {
		return
	}
	if sc.short != nil {
		clear(sc.short[:])
	}
	if sc.mid != nil {
		clear(sc.mid[:])
	}
	sc.cacheOf = b
}

// shortCacheSize is the number of entries of a scratch's direct-mapped
// cache of whole-piece lookups (16 bytes each). Short pieces of running
// text are mostly a few thousand frequent words; this keeps them out of the
// megabytes of shortTable.
const shortCacheSize = 1 << 12

// shortRank is b.rank(piece) for a piece of at most 7 bytes, through the
// scratch's cache.
func (sc *bpeScratch) shortRank(b *rankBPE, piece string) int32 {
	sc.cachesOf(b)
	if sc.short == nil {
		sc.short = new([shortCacheSize]shortSlot)
	}
	k := packShort(piece)
	e := &sc.short[hashShort(k)&(shortCacheSize-1)]
	if e.key == k {
		return e.val
	}
	r := b.short.get(piece)
	e.key, e.val = k, r
	return r
}

// midCacheSize is the number of entries of a scratch's direct-mapped
// cache of the token counts of pieces of 8 to 16 bytes (24 bytes each),
// for counting only. Most pieces of running text that the short-token
// lookup does not answer are words of this length (" buffering"); the
// piece cache holds them too, but its lookup hashes and compares the
// bytes, where here the piece is two words compared in place and, with
// no probing, colliding pieces only evict each other.
const midCacheSize = 1 << 12

// midSlot is one piece of 8 to 16 bytes: its first and last eight bytes
// (which together hold every byte), its length (0: empty) and its count.
type midSlot struct {
	lo, hi uint64
	len, n uint32
}

// count returns len(b.encode(nil, piece, sc)), through caches that keep
// counts where they can.
func (b *rankBPE) count(piece string, sc *bpeScratch) int {
	switch n := len(piece); {
	case n <= 1:
		return n
	case n <= 7:
		if sc.shortRank(b, piece) != noRank {
			return 1
		}
	case n <= 16:
		return sc.midCount(b, piece)
	}
	sc.ids = b.encode(sc.ids[:0], piece, sc)
	return len(sc.ids)
}

// midCount is count for a piece of 8 to 16 bytes.
func (sc *bpeScratch) midCount(b *rankBPE, piece string) int {
	sc.cachesOf(b)
	if sc.mid == nil {
		sc.mid = new([midCacheSize]midSlot)
	}
	lo, hi := le64(piece), le64(piece[len(piece)-8:])
	e := &sc.mid[hashShort(lo^bits.RotateLeft64(hi, 29)^uint64(len(piece)))&(midCacheSize-1)]
	if e.lo == lo && e.hi == hi && int(e.len) == len(piece) {
		return int(e.n)
	}
	sc.ids = b.encode(sc.ids[:0], piece, sc)
	*e = midSlot{lo, hi, uint32(len(piece)), uint32(len(sc.ids))}
	return len(sc.ids)
}

func le64(s string) uint64 { return binary.LittleEndian.Uint64([]byte(s[:8])) }

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
//
// Every part of a piece being merged is a token, so the rank of two
// adjacent parts' concatenation depends only on their two ids: the merge
// loops look pairs up by id (pairs), never by bytes.
type rankBPE struct {
	// ranks holds every token while the tables are built; release drops
	// it (see longTable).
	ranks  map[string]int32
	short  *shortTable // the ranks of tokens up to 7 bytes
	long   *longTable  // and of the longer ones
	pairs  *idPairTable
	byteID [256]int32
	// bytePair[a<<8|b] is the rank of the two-byte token a b, or noRank:
	// the first pair lookups of a merge, from a 256 KB table that stays
	// in cache rather than the 4 MB pair table.
	bytePair *[1 << 16]int32
	maxLen   int // longest token in bytes
	reach    *reachTable
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
	return b.long.get(s)
}

// release drops the build-time ranks map once every table is built.
func (b *rankBPE) release() { b.ranks = nil }

// finish builds the lookup tables derived from ranks and byteID.
func (b *rankBPE) finish() error {
	b.short = newShortTable(b.ranks)
	long, err := newLongTable(b.ranks)
	if err != nil {
		return err
	}
	b.long = long
	b.bytePair = new([1 << 16]int32)
	for k := range b.bytePair {
		b.bytePair[k] = b.short.get(string([]byte{byte(k >> 8), byte(k)}))
	}
	p, err := newIDPairTable(b.ranks)
	if err != nil {
		return err
	}
	b.pairs = p
	b.reach = newReachTable(maps.Keys(b.ranks), 1)
	return nil
}

func (b *rankBPE) encode(dst []int, piece string, sc *bpeScratch) []int {
	switch {
	case len(piece) == 0:
		return dst
	case len(piece) == 1:
		return append(dst, int(b.byteID[piece[0]]))
	}
	if len(piece) <= 7 {
		if r := sc.shortRank(b, piece); r != noRank {
			return append(dst, int(r))
		}
	}
	if len(piece) <= cacheMaxPiece {
		out, h, ok := sc.pc.get(dst, piece)
		if ok {
			return out
		}
		n := len(dst)
		dst = b.merge(dst, piece, sc)
		sc.pc.put(piece, h, dst[n:])
		return dst
	}
	return b.merge(dst, piece, sc)
}

// merge encodes a piece of at least 2 bytes that is not a token of up to 7
// bytes: a whole-token lookup, then the scan or the heap.
func (b *rankBPE) merge(dst []int, piece string, sc *bpeScratch) []int {
	if len(piece) > 7 {
		if r := b.rank(piece); r != noRank {
			return append(dst, int(r))
		}
	}
	if len(piece) <= scanLimit {
		return b.scan(dst, piece, sc)
	}
	return b.heapMerge(dst, piece, sc)
}

// scan is tiktoken's byte_pair_merge over ids: O(n²) but with tiny
// constants. id[i] is part i's token, rk[i] the rank of parts i and i+1
// merged.
func (b *rankBPE) scan(dst []int, piece string, sc *bpeScratch) []int {
	n := len(piece)
	if n < 2 {
		return b.encode(dst, piece, sc)
	}
	id := grow32(sc.pos, n)
	rk := grow32(sc.rk, n)
	sc.pos, sc.rk = id, rk
	bp := b.bytePair
	for i := 0; i+1 < n; i++ {
		id[i] = b.byteID[piece[i]]
		rk[i] = bp[uint16(piece[i])<<8|uint16(piece[i+1])]
	}
	id[n-1] = b.byteID[piece[n-1]]
	rk[n-1] = noRank
	pt := b.pairs
	m := n // live parts
	for m > 1 {
		minR, minI := rk[0], 0
		for i := 1; i < m-1; i++ {
			if rk[i] < minR {
				minR, minI = rk[i], i
			}
		}
		if minR == noRank {
			break
		}
		i := minI
		// parts i and i+1 merge into minR: recompute the ranks that
		// span them.
		id[i] = minR
		copy(id[i+1:m-1], id[i+2:m])
		copy(rk[i+1:m-1], rk[i+2:m])
		m--
		if i > 0 {
			rk[i-1] = pt.get(id[i-1], minR)
		}
		if i+1 < m {
			rk[i] = pt.get(minR, id[i+1])
		} else {
			rk[i] = noRank
		}
	}
	for _, v := range id[:m] {
		dst = append(dst, int(v))
	}
	return dst
}

// heapMerge is the same merge order with a min-heap keyed by (rank, start)
// over a linked list of parts: O(n log n), for long pieces (a 1 MB "word"
// is a few hundred milliseconds instead of minutes).
func (b *rankBPE) heapMerge(dst []int, piece string, sc *bpeScratch) []int {
	n := int32(len(piece))
	next := grow32(sc.next, int(n))
	prev := grow32(sc.prev, int(n))
	rk := grow32(sc.rk, int(n))
	id := grow32(sc.pos, int(n))
	sc.next, sc.prev, sc.rk, sc.pos = next, prev, rk, id
	pt := b.pairs
	h := sc.heap[:0]
	pairRank := func(i int32) int32 {
		j := next[i]
		if j >= n {
			return noRank
		}
		return pt.get(id[i], id[j])
	}
	for i := int32(0); i < n; i++ {
		next[i] = i + 1
		prev[i] = i - 1
		id[i] = b.byteID[piece[i]]
	}
	bp := b.bytePair
	for i := int32(0); i < n; i++ {
		rk[i] = noRank
		if i+1 < n {
			rk[i] = bp[uint16(piece[i])<<8|uint16(piece[i+1])]
		}
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
		id[i] = r
		next[i] = next[j]
		if next[j] < n {
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
	for i := int32(0); i < n; i = next[i] {
		dst = append(dst, int(id[i]))
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
	// Two overlapping loads instead of a loop: the overlap holds the same
	// bytes in both, so OR puts each byte at 8*i.
	var k uint64
	switch n := len(s); {
	case n >= 4:
		k = uint64(le32(s)) | uint64(le32(s[n-4:]))<<(8*(n-4))
	case n >= 2:
		k = uint64(le16(s)) | uint64(le16(s[n-2:]))<<(8*(n-2))
	case n == 1:
		k = uint64(s[0])
	}
	return k | uint64(len(s))<<56
}

func le32(s string) uint32 { return binary.LittleEndian.Uint32([]byte(s[:4])) }
func le16(s string) uint16 { return binary.LittleEndian.Uint16([]byte(s[:2])) }

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

// idPairTable maps two adjacent tokens to the rank of their concatenation,
// for every pair of tokens whose concatenation is a token: an
// open-addressing table of single words, used: 1 | rank: 21 | left: 21 |
// right: 21 bits.
type idPairTable struct {
	slots []uint64
	shift uint // 64 - log2(len(slots))
}

const (
	pairIDBits = 21
	pairIDMask = 1<<pairIDBits - 1
	pairKeyLen = 2 * pairIDBits
	idPairUsed = 1 << 63
)

func pairKey(a, b int32) uint64 { return uint64(a)<<pairIDBits | uint64(b) }

func (t *idPairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// newIDPairTable finds, for every token, each split into two tokens.
func newIDPairTable(ranks map[string]int32) (*idPairTable, error) {
	type entry struct{ a, b, r int32 }
	var es []entry
	for s, r := range ranks {
		if r < 0 || r > pairIDMask {
			return nil, fmt.Errorf("token id %d does not fit the pair table", r)
		}
		for k := 1; k < len(s); k++ {
			a, ok := ranks[s[:k]]
			if !ok {
				continue
			}
			if b, ok := ranks[s[k:]]; ok {
				es = append(es, entry{a, b, r})
			}
		}
	}
	bits := uint(4)
	for 1<<bits < len(es)+len(es)/2 {
		bits++
	}
	t := &idPairTable{slots: make([]uint64, 1<<bits), shift: 64 - bits}
	mask := uint64(len(t.slots) - 1)
	for _, e := range es {
		k := pairKey(e.a, e.b)
		for i := t.slot(k); ; i = (i + 1) & mask {
			if t.slots[i] == 0 {
				t.slots[i] = idPairUsed | uint64(e.r)<<pairKeyLen | k
				break
			}
		}
	}
	return t, nil
}

// get returns the rank of the concatenation of tokens a and b, or noRank.
func (t *idPairTable) get(a, b int32) int32 {
	k := pairKey(a, b)
	mask := uint64(len(t.slots) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return noRank
		}
		if s&(1<<pairKeyLen-1) == k {
			return int32(s>>pairKeyLen) & pairIDMask
		}
	}
}
