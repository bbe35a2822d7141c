package prefixindex

import "github.com/maitred-dev/maitred/kvevents"

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
	top := !e.HasParent
	for i, h := range e.BlockHashes {
		parent := k
		k = Next(k, e.TokenIDs[i*e.BlockSize:(i+1)*e.BlockSize])
		if old, ok := b.vllm[h]; ok {
			if old == k {
				continue
			}
			x.removeLocked(b, h)
		}
		b.vllm[h] = k
		x.holdLocked(b, k, parent, top && i == 0)
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
	hb := b.held[k]
	if hb.n--; hb.n > 0 {
		b.held[k] = hb
		return
	}
	delete(b.held, k)
	x.dropBitLocked(k, b.bit)
	if b.children[hb.parent]--; b.children[hb.parent] <= 0 {
		delete(b.children, hb.parent)
	}
	if _, ok := b.held[hb.parent]; !ok && !hb.top {
		b.orphans-- // its parent was gone before it
	}
	b.orphans += int(b.children[k]) // its children lose their parent
}

// heldBlock is a block the backend holds: how many of its stored blocks
// (ranks) are it, its parent's key, and whether that is the chain's root.
type heldBlock struct {
	n      int32
	top    bool
	parent Key
}

// holdLocked records one more stored block k (parent's child) of b.
func (x *Index) holdLocked(b *backend, k, parent Key, top bool) {
	hb, ok := b.held[k]
	hb.n++
	if ok {
		b.held[k] = hb
		return
	}
	hb.parent, hb.top = parent, top
	b.held[k] = hb
	x.blocks[k] |= b.bit
	b.children[parent]++
	b.orphans -= int(b.children[k]) // its children, if any, have their parent again
}
