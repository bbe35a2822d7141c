package sim

import (
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// blockHash is the simulator's own hash of a KV block: sha256 over the
// parent block's hash, the block's extra keys and its token ids (see
// hashBlocks). It is independent of vLLM's and of the gateway's hashing.
type blockHash [32]byte

// cachedBlock is one full block held by the prefix cache.
type cachedBlock struct {
	hash    blockHash
	refs    int           // running requests using it
	lru     *list.Element // its place in prefixCache.free while refs == 0
	dropped bool          // removed by a reset while still referenced
}

// prefixCache is the per-server prefix cache: full blocks keyed by their
// chained hash, with the unreferenced ones in LRU order. Its capacity is
// the server's KV capacity in blocks minus the blocks that running requests
// hold outside it (their partial last block and generated tokens). All of it
// is guarded by Server.mu.
type prefixCache struct {
	blocks map[blockHash]*cachedBlock
	free   *list.List // unreferenced blocks, front evicted first
	none   blockHash  // the parent of a sequence's first block
	cached int        // tokens of cached blocks referenced by running tickets
}

func newPrefixCache(seed string) *prefixCache {
	if seed == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		seed = hex.EncodeToString(b[:])
	}
	return &prefixCache{
		blocks: make(map[blockHash]*cachedBlock),
		free:   list.New(),
		none:   sha256.Sum256([]byte("maitred-sim/none-hash/" + seed)),
	}
}

// prefixPrompt is one prompt of a request, as the prefix cache sees it:
// its token ids, the hashes of its full blocks, and what it got.
type prefixPrompt struct {
	ids    []int
	hashes []blockHash
}

// prefixReq is a request's share of the prefix cache, carried by its
// ticket: computed before admission (hashing happens outside the lock),
// filled at admission.
type prefixReq struct {
	prompts  []prefixPrompt
	loraID   *int
	loraName *string
	blocks   []*cachedBlock // referenced while running, in prompt order
	hit      int            // prompt tokens found in the cache
	queries  int            // prompt tokens looked up
}

// hashBlocks returns the chained hashes of ids' full blocks. Each block's
// hash is sha256 of: the parent's hash (none for the first block), a tag
// byte, the LoRA name's length and bytes, the cache salt's length and bytes
// (first block only), then each token id as 8 bytes big-endian.
func (c *prefixCache) hashBlocks(ids []int, blockSize int, lora, salt string) []blockHash {
	n := len(ids) / blockSize
	out := make([]blockHash, n)
	parent := c.none
	buf := make([]byte, 0, 32+1+8+len(lora)+8+len(salt)+8*blockSize)
	for i := range n {
		buf = append(buf[:0], parent[:]...)
		buf = append(buf, 's')
		buf = binary.BigEndian.AppendUint64(buf, uint64(len(lora)))
		buf = append(buf, lora...)
		if i == 0 {
			buf = binary.BigEndian.AppendUint64(buf, uint64(len(salt)))
			buf = append(buf, salt...)
		}
		for _, t := range ids[i*blockSize : (i+1)*blockSize] {
			buf = binary.BigEndian.AppendUint64(buf, uint64(t))
		}
		out[i] = sha256.Sum256(buf)
		parent = out[i]
	}
	return out
}

// ref marks b used by one more running request.
func (c *prefixCache) ref(b *cachedBlock) {
	if b.refs == 0 && b.lru != nil {
		c.free.Remove(b.lru)
		b.lru = nil
	}
	b.refs++
}

// admitLocked looks t's prompts up when it is admitted: the leading full
// blocks found (at most the prompt's length minus one token, as vLLM always
// computes the last token) are hits; the prompt's other full blocks are
// stored, evicting unreferenced blocks (least recently used first) to make
// room. It returns the events this produced, in order.
func (s *Server) admitPrefixLocked(t *ticket) []kvEvent {
	c, p := s.cache, t.prefix
	if c == nil || p == nil {
		return nil
	}
	bs := s.cfg.BlockSize
	// Every full block of the prompts ends up referenced (hit, found or
	// stored): count them as cached from the start, so that eviction sees
	// only what the request holds outside the cache.
	for _, pr := range p.prompts {
		c.cached += len(pr.hashes) * bs
	}
	var events []kvEvent
	for _, pr := range p.prompts {
		p.queries += len(pr.ids)
		hits := 0
		for hits < len(pr.hashes) && (hits+1)*bs <= len(pr.ids)-1 {
			b, ok := c.blocks[pr.hashes[hits]]
			if !ok {
				break
			}
			c.ref(b)
			p.blocks = append(p.blocks, b)
			hits++
		}
		p.hit += hits * bs
		// Room for the new blocks: evict before storing, as vLLM allocates
		// before it caches.
		var fresh int
		for _, h := range pr.hashes[hits:] {
			if _, ok := c.blocks[h]; !ok {
				fresh++
			}
		}
		events = s.evictLocked(fresh, events)
		run := -1 // the BlockStored event of the current run of new blocks
		for i := hits; i < len(pr.hashes); i++ {
			h := pr.hashes[i]
			if b, ok := c.blocks[h]; ok { // cached already (its parent was evicted)
				c.ref(b)
				p.blocks = append(p.blocks, b)
				run = -1
				continue
			}
			b := &cachedBlock{hash: h}
			c.blocks[h] = b
			c.ref(b)
			p.blocks = append(p.blocks, b)
			if run < 0 {
				ev := kvEvent{kind: kvStored, blockSize: bs, loraID: p.loraID, loraName: p.loraName}
				if i > 0 {
					parent := pr.hashes[i-1]
					ev.parent = &parent
				}
				events = append(events, ev)
				run = len(events) - 1
			}
			events[run].hashes = append(events[run].hashes, h)
			events[run].tokens = append(events[run].tokens, pr.ids[i*bs:(i+1)*bs]...)
		}
	}
	s.m.prefixQueries.WithLabelValues(s.cfg.Model, "0").Add(float64(p.queries))
	s.m.prefixHits.WithLabelValues(s.cfg.Model, "0").Add(float64(p.hit))
	return events
}

// evictLocked removes unreferenced blocks, least recently used first, until
// the cache plus need more blocks plus what running requests hold outside
// the cache fit in the KV capacity. It appends one BlockRemoved per block, as
// vLLM does.
func (s *Server) evictLocked(need int, events []kvEvent) []kvEvent {
	c := s.cache
	bs := s.cfg.BlockSize
	outside := (max(s.kvUsed-c.cached, 0) + bs - 1) / bs
	for len(c.blocks)+need+outside > s.cfg.kvBlocks() && c.free.Len() > 0 {
		b := c.free.Remove(c.free.Front()).(*cachedBlock)
		b.lru = nil
		delete(c.blocks, b.hash)
		events = append(events, kvEvent{kind: kvRemoved, hashes: []blockHash{b.hash}})
	}
	return events
}

// releasePrefixLocked returns a finished request's blocks to the LRU list,
// last block first so that a sequence's tail is evicted before its head
// (vLLM frees a request's blocks in reverse order).
func (s *Server) releasePrefixLocked(t *ticket) {
	c, p := s.cache, t.prefix
	if c == nil || p == nil || p.blocks == nil {
		return
	}
	for i := len(p.blocks) - 1; i >= 0; i-- {
		b := p.blocks[i]
		b.refs--
		if b.refs == 0 && !b.dropped {
			b.lru = c.free.PushBack(b)
		}
	}
	c.cached -= len(p.blocks) * s.cfg.BlockSize
	p.blocks = nil
}

// ResetPrefixCache empties the prefix cache and publishes AllBlocksCleared,
// as vLLM's reset_prefix_cache does. Unless running is true it fails (false)
// while running requests hold cached blocks; with running, their blocks
// leave the cache at once (vLLM preempts those requests; here they run on).
// Without PrefixCaching it reports false.
func (s *Server) ResetPrefixCache(running bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cache
	if c == nil {
		return false
	}
	if !running && c.free.Len() != len(c.blocks) {
		return false
	}
	for _, b := range c.blocks {
		b.dropped = b.refs > 0
		b.lru = nil
	}
	clear(c.blocks)
	c.free.Init()
	s.publishLocked([]kvEvent{{kind: kvCleared}})
	return true
}

// PrefixCacheBlocks is the number of blocks the prefix cache holds.
func (s *Server) PrefixCacheBlocks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cache == nil {
		return 0
	}
	return len(s.cache.blocks)
}
