package prefixindex

import (
	"math/bits"

	"github.com/maitred-dev/maitred/kvevents"
)

// Apply puts one batch of the backend's events into the index.
func (x *Index) Apply(name string, batch kvevents.Batch) {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := x.backends[name]
	if b == nil {
		return
	}
	for i := range batch.Events {
		e := &batch.Events[i]
		b.st.Events++
		switch e.Kind {
		case kvevents.AllBlocksCleared:
			x.clearLocked(b)
		case kvevents.BlockStored:
			x.storeLocked(b, e)
		case kvevents.BlockRemoved:
			if onGPU(e.Medium) {
				for _, h := range e.BlockHashes {
					x.removeLocked(b, h)
				}
			}
		}
	}
}

// onGPU: the events of other tiers (CPU offload, disk) do not say what
// the GPU's prefix cache holds.
func onGPU(medium string) bool { return medium == "" || medium == "GPU" }

func (x *Index) storeLocked(b *backend, e *kvevents.Event) {
	n := len(e.BlockHashes)
	if e.ExtraKeys || e.BlockSize != x.blockSize || len(e.TokenIDs) != n*e.BlockSize || !onGPU(e.Medium) {
		b.st.Skipped += uint64(n)
		return
	}
	k := Root(e.LoraName)
	if e.HasParent {
		p, ok := b.vllm[e.Parent]
		if !ok {
			// A parent never seen (evicted, or before the subscription):
			// its children are unreachable from a request's first block.
			b.st.Skipped += uint64(n)
			return
		}
		k = p
	}
	for i, h := range e.BlockHashes {
		k = Next(k, e.TokenIDs[i*e.BlockSize:(i+1)*e.BlockSize])
		if old, ok := b.vllm[h]; ok {
			if old == k {
				continue
			}
			x.removeLocked(b, h)
		}
		b.vllm[h] = k
		if b.held[k]++; b.held[k] == 1 {
			x.blocks[k] |= b.bit
		}
	}
	if c := x.capLocked(b); c > 0 && len(b.vllm) > c {
		// More blocks than the backend can hold: removals were lost, so
		// what it holds is unknown. Start again from its next events.
		x.clearLocked(b)
		b.st.LastClear = "index over the backend's capacity (removals lost)"
	}
}

func (x *Index) capLocked(b *backend) int {
	c := x.maxBlocks
	if b.capacity > 0 && (c == 0 || b.capacity < c) {
		c = b.capacity
	}
	return c
}

func (x *Index) removeLocked(b *backend, h kvevents.Hash) {
	k, ok := b.vllm[h]
	if !ok {
		return
	}
	delete(b.vllm, h)
	if b.held[k]--; b.held[k] <= 0 {
		delete(b.held, k)
		x.dropBitLocked(k, b.bit)
	}
}

// Match finds, for each of names, how many of keys (a request's block
// keys, in order) it holds from the first: the cached prefix in blocks,
// written to blocks[i]. It returns false, and the caller routes as
// without an index, when some name is not a Live backend of the index.
func (x *Index) Match(keys []Key, names []string, blocks []int) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var live uint64
	var bitOf [MaxBackends]int8
	for i, n := range names {
		b := x.backends[n]
		if b == nil || b.st.State != Live {
			return false
		}
		live |= b.bit
		bitOf[bitIndex(b.bit)] = int8(i)
		blocks[i] = 0
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

func bitIndex(bit uint64) int { return bits.TrailingZeros64(bit) }
