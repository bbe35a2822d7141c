package prefixindex

import "math/bits"

// Query is one request's prompt as block keys, to be matched against an
// index: it is the admission.PrefixMatcher of a request (the pool calls
// Match under its lock). Keys and IDs are buffers a caller may keep and
// reuse across requests (Reset).
type Query struct {
	Index *Index
	// Keys are the prompt's full blocks' keys, in order (AppendKeys).
	Keys []Key
	// IDs is scratch room for the prompt's token ids.
	IDs []int
}

// Reset empties q for another request, keeping its buffers.
func (q *Query) Reset() {
	q.Index, q.Keys, q.IDs = nil, q.Keys[:0], q.IDs[:0]
}

// Match writes each named backend's cached prefix in tokens to cached;
// false when one of them is not Live in the index.
func (q *Query) Match(names []string, cached []int) bool {
	if q.Index == nil || !q.Index.Match(q.Keys, names, cached) {
		return false
	}
	for i := range cached {
		cached[i] *= q.Index.blockSize
	}
	return true
}

// Match finds, for each of names, how many of keys (a request's block
// keys, in order) it holds from the first: the cached prefix in blocks,
// written to blocks[i]. It returns false, and the caller routes as
// without an index, when some name is not a Live backend of the index.
//
// A key is chained over every block before it, so a backend holding the
// j-th key holds a block with the prompt's whole prefix up to it; it
// holds the blocks before as well as long as its blocks are
// prefix-closed, which vLLM keeps (a request holding a block holds its
// parent, and a freed request's blocks are queued for eviction last block
// first, so a parent outlives its children). While every backend asked
// about is closed (no orphans: a held block whose parent is not), the
// longest prefix each holds is found by bisection, a few lookups per
// backend whatever the prompt's length; otherwise by walking the keys
// from the first, stopping where no backend holds one.
func (x *Index) Match(keys []Key, names []string, blocks []int) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var live uint64
	var bitOf [MaxBackends]int8
	closed := true
	for i, n := range names {
		b := x.backends[n]
		if b == nil || b.st.State != Live {
			return false
		}
		live |= b.bit
		bitOf[bitIndex(b.bit)] = int8(i)
		blocks[i] = 0
		closed = closed && b.orphans == 0
	}
	if closed {
		x.bisect(keys, 0, len(keys), live, &bitOf, blocks)
		return true
	}
	for j, k := range keys {
		h := x.blocks[k] & live
		for gone := live &^ h; gone != 0; gone &= gone - 1 {
			blocks[bitOf[bitIndex(gone&-gone)]] = j
		}
		if live = h; live == 0 {
			return true
		}
	}
	for ; live != 0; live &= live - 1 {
		blocks[bitOf[bitIndex(live&-live)]] = len(keys)
	}
	return true
}

// bisect writes the prefix length, in [lo, hi], of each backend of set,
// all of which hold the first lo keys (prefix-closed: a backend holds the
// first n keys iff it holds key n-1).
func (x *Index) bisect(keys []Key, lo, hi int, set uint64, bitOf *[MaxBackends]int8, blocks []int) {
	for set != 0 {
		if lo == hi {
			for ; set != 0; set &= set - 1 {
				blocks[bitOf[bitIndex(set&-set)]] = lo
			}
			return
		}
		mid := lo + (hi-lo+1)/2
		in := x.blocks[keys[mid-1]] & set
		// Those holding the first mid keys end in [mid, hi]; the others
		// in [lo, mid-1].
		x.bisect(keys, mid, hi, in, bitOf, blocks)
		set &^= in
		hi = mid - 1
	}
}

func bitIndex(bit uint64) int { return bits.TrailingZeros64(bit) }
