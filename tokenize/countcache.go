package tokenize

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// CountCache lets the next turn of a conversation be counted without
// tokenizing again what an earlier turn's count already tokenized.
//
// # Why it is exact
//
// The tokenizer cuts text at added tokens (special or not) before
// normalization, pre-tokenization and BPE (encoder_added.go), and matches
// them leftmost-longest looking only forward: up to the end of an added
// token the cut of a text does not depend on what follows it. So for a text
// whose raw added-token split puts a boundary at b,
//
//	count(text) = count(text[:b]) + count(text[b:])
//
// (plus the post-processor's BOS/EOS when addSpecial). A text is counted
// as the sum of the counts of the segments between its boundaries; the
// cache remembers, for each boundary, the count of the text up to it. The
// next turn's render starts with the previous turn's (the template is
// append-only for most turns): the new text's boundaries are looked up,
// last first, and counting starts at the last one whose whole prefix was
// counted before. A template that rewrites earlier turns (Qwen3 drops old
// reasoning), or a client editing an earlier message, only moves that
// boundary back; a text that shares no counted prefix is counted in full.
//
// Whether the identity holds is decided per model when it is registered
// (Register): only a *Tokenizer that cuts at raw added tokens qualifies, and
// it must pass probes of the identity over its own added tokens (an added
// token with rstrip, or a pre-tokenizer that prepends only at the start of
// the text, would fail them); any other model is counted without the cache.
//
// # What is stored
//
// No text. A node is keyed by the SHA-256 (truncated to 128 bits) of the
// model's namespace, the request's cache_salt and the text up to a
// boundary, and holds the count up to it. SHA-256 because a client chooses
// the text: with a non-cryptographic hash (even seeded), a crafted
// collision would make a count wrong, admitting a request over its budget
// or refusing one that fits. Finding two texts with the same 128-bit
// truncation costs about 2^64 SHA-256 computations; the length of the
// prefix is part of what is hashed. Hashing runs at hundreds of MB/s, a few
// percent of what tokenizing the same bytes costs.
//
// A keyed count's node (CountChatKeys, countcache_keys.go: precise
// routing) also holds the state of the prompt's block-key chain at its
// boundary, accounted in the same budget (a keyed count keeps nodes only
// at boundaries a kilobyte apart and at its last few); a model counted
// without keys keeps none.
//
// Nodes are shared by every text with the same prefix (a system prompt
// common to many conversations is one chain) and evicted least recently
// used, within a byte budget (NodeBytes per node). A hit shows in the
// door's time, so a client could learn that some text was counted before:
// a request's cache_salt (vLLM's field for the same concern in its prefix
// cache) separates the nodes of those who set different salts.
//
// # Concurrency
//
// A CountCache is safe for concurrent use. Hashing and tokenizing run
// outside its lock; the lock covers the index lookups and LRU updates.
type CountCache struct {
	maxNodes int
	// minBytes and minOffset are cacheMinBytes and nodeMinOffset (tests
	// lower them to run short goldens through the cache), keyStride
	// keyedStride (countcache_keys.go).
	minBytes, minOffset, keyStride int

	mu    sync.Mutex
	index map[nodeKey]int32
	nodes []cacheNode
	// head is the most recently used node, tail the least; -1: none.
	head, tail int32
	// free are slots evicted to make room for links (not reused yet).
	free []int32
	// links are the keyed nodes' block-key links by slot
	// (countcache_keys.go; nil until a keyed count), linkSlots the room
	// they take in nodes' units: nodes plus linkSlots stay within
	// maxNodes.
	links     map[int32]*chainLink
	linkSlots int

	hits, misses, fallbacks atomic.Uint64

	models sync.Map // *Model -> *cacheModel
	nextNS atomic.Uint64
}

// NodeBytes is the memory a cached boundary is accounted at: its node
// (key, count, list links) and its index entry.
const NodeBytes = 64

// Texts shorter than cacheMinBytes are counted without the cache: a chat
// under 16 kB (about 4k tokens) is counted whole in well under 100 µs,
// while a miss pays for hashing every boundary, looking them up and
// counting segment by segment (measured: about 28 µs on a 4.6 kB chat, a
// third of its count), so the cache earns its keep only on longer
// conversations. No node is
// kept for a boundary closer than nodeMinOffset to the start (the
// template's fixed header, shared by every conversation).
const (
	cacheMinBytes = 16 << 10
	nodeMinOffset = 1 << 10
)

type nodeKey [16]byte

type cacheNode struct {
	key nodeKey
	// count is the number of tokens of the text up to the boundary,
	// without the post-processor's.
	count int32
	// tip: the boundary was the last of a text counted in full.
	tip        bool
	prev, next int32
}

// cacheModel is a registered model: its tokenizer and namespace.
type cacheModel struct {
	tok *Tokenizer
	ns  [8]byte
	// pre, suf are the post-processor's token counts (addSpecial).
	pre, suf int
}

// NewCountCache returns a cache holding at most maxBytes of nodes
// (NodeBytes each); nil when maxBytes < NodeBytes (no cache: a nil
// *CountCache counts as Model.CountChat does).
func NewCountCache(maxBytes int64) *CountCache {
	if maxBytes < NodeBytes {
		return nil
	}
	return &CountCache{maxNodes: int(min(maxBytes/NodeBytes, 1<<31-1)), minBytes: cacheMinBytes, minOffset: nodeMinOffset, keyStride: keyedStride,
		index: map[nodeKey]int32{}, head: -1, tail: -1}
}

// CacheStats is a snapshot of a CountCache.
type CacheStats struct {
	// Hits: counts that continued a text counted before (only what
	// follows its last boundary was tokenized).
	Hits uint64
	// Fallbacks: counts whose text diverged before the end of every
	// text counted before (an earlier message changed, or the template
	// rewrote an earlier turn): only what follows the last boundary they
	// share was tokenized.
	Fallbacks uint64
	// Misses: counts that found no counted prefix and tokenized the whole
	// text.
	Misses uint64
	// Entries is the number of boundaries held, Bytes their accounted
	// memory (Entries × NodeBytes, plus the block-key links of keyed
	// counts), MaxBytes the budget.
	Entries         int
	Bytes, MaxBytes int64
}

// Stats returns the cache's counters and size; the zero value for a nil
// cache.
func (c *CountCache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	n, links := len(c.index), c.linkSlots
	c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Fallbacks: c.fallbacks.Load(), Misses: c.misses.Load(),
		Entries: n, Bytes: int64(n+links) * NodeBytes, MaxBytes: int64(c.maxNodes) * NodeBytes}
}

// Register decides whether m's counts can go through the cache and, if so,
// gives it its own namespace. It returns a nil error when they can, and
// the reason otherwise; m is then counted without the cache. Registering
// a model twice keeps the first decision.
func (c *CountCache) Register(m *Model) error {
	if c == nil {
		return fmt.Errorf("no count cache")
	}
	if v, ok := c.models.Load(m); ok {
		if v == nil {
			return fmt.Errorf("not cacheable")
		}
		return nil
	}
	tok, ok := m.enc.(*Tokenizer)
	if !ok {
		c.models.Store(m, (*cacheModel)(nil))
		return fmt.Errorf("the tokenizer is not a tokenizer.json or tiktoken encoding")
	}
	if err := tok.splitsAtAddedTokens(); err != nil {
		c.models.Store(m, (*cacheModel)(nil))
		return err
	}
	cm := &cacheModel{tok: tok, pre: len(tok.prefix), suf: len(tok.suffix)}
	binary.LittleEndian.PutUint64(cm.ns[:], c.nextNS.Add(1))
	c.models.Store(m, cm)
	return nil
}

func (c *CountCache) model(m *Model) *cacheModel {
	if c == nil {
		return nil
	}
	v, _ := c.models.Load(m)
	cm, _ := v.(*cacheModel)
	return cm
}

// splitsAtAddedTokens checks count(a+T+b) = count(a+T) + count(b) for
// added tokens T matched on the raw text, on probes built from t's own
// added tokens, and that addSpecial adds exactly the post-processor's
// tokens. It costs a few hundred counts of short strings.
func (t *Tokenizer) splitsAtAddedTokens() error {
	if t.raw == nil {
		return fmt.Errorf("the tokenizer has no added tokens matched before normalization")
	}
	var toks []string
	for s := range t.added {
		if n, _ := t.raw.longest(s, 0); n == len(s) {
			toks = append(toks, s)
		}
	}
	if len(toks) == 0 {
		return fmt.Errorf("the tokenizer has no added tokens matched before normalization")
	}
	// The most used are the lowest ids (and the chat template's); probe a
	// bounded number of them.
	sort.Slice(toks, func(i, j int) bool { return t.added[toks[i]] < t.added[toks[j]] })
	if len(toks) > 8 {
		toks = toks[:8]
	}
	heads := []string{"", "Hi ", " x\n", "数字 12▁"}
	tails := []string{" y", "\n\nz", "▁w 'll", "1234", "  \né"}
	pp := len(t.prefix) + len(t.suffix)
	for _, tk := range toks {
		for _, a := range heads {
			for _, b := range tails {
				whole, _ := t.Count(a+tk+b, false, 0)
				left, _ := t.Count(a+tk, false, 0)
				right, _ := t.Count(b, false, 0)
				if whole != left+right {
					return fmt.Errorf("counts do not add up at added token %q (%d != %d + %d)", tk, whole, left, right)
				}
				if n, _ := t.Count(a+tk+b, true, 0); n != whole+pp {
					return fmt.Errorf("add_special_tokens adds %d tokens to %q, not the post-processor's %d", n-whole, a+tk+b, pp)
				}
			}
		}
	}
	return nil
}

// CountChat is Model.CountChat through the cache: the same result, with the
// part of the rendered text counted before taken from the cache. A nil
// cache, or a model not registered (or not cacheable), counts as
// m.CountChat does.
func (c *CountCache) CountChat(m *Model, body *ojson.Value, limit int) (cnt Count, err error) {
	cm := c.model(m)
	if cm == nil {
		return m.CountChat(body, limit)
	}
	defer countPanicked(&cnt, &err)
	text, addSpecial, err := m.renderChat(body)
	if err != nil {
		return notExact(err)
	}
	salt := ""
	if v := body.Get("cache_salt"); v != nil && v.Kind == ojson.String {
		salt = v.Str
	}
	n, exact := c.count(cm, text, salt, addSpecial, limit)
	return Count{Tokens: n, Exact: true, Truncated: !exact, Rendered: text}, nil
}

// countScratch is a count's working memory, pooled.
type countScratch struct {
	bounds []int
	keys   []nodeKey
	counts []int32
	ends   []int
	// kept, ins and tails are a keyed count's (countcache_keys.go): the
	// boundaries it keeps, their keys and their links' trailing ids.
	kept  []int32
	ins   []nodeKey
	tails []int32
	sum   []byte
	h     hash.Hash
}

var countScratchPool = sync.Pool{New: func() any { return &countScratch{h: sha256.New(), sum: make([]byte, 0, sha256.Size)} }}

// count returns what cm.tok.Count(text, addSpecial, limit) returns.
func (c *CountCache) count(cm *cacheModel, text, salt string, addSpecial bool, limit int) (int, bool) {
	if len(text) < c.minBytes || len(text) > 1<<31-1 {
		return cm.tok.Count(text, addSpecial, limit)
	}
	sc := countScratchPool.Get().(*countScratch)
	defer countScratchPool.Put(sc)

	if !sc.boundaries(cm, text, c.minOffset) {
		return cm.tok.Count(text, addSpecial, limit)
	}
	sc.nodeKeys(cm, text, plainHeader(salt))

	// The last boundary whose prefix was counted before.
	from, base, _ := c.lookup(sc.keys)

	// Count the rest, segment by segment (boundary to boundary), against
	// what remains of the limit.
	fixed := 0
	if addSpecial {
		fixed = cm.pre
	}
	total := fixed + base
	over := func() bool { return limit > 0 && total > limit }
	// rest is the limit left for one segment (0: none).
	rest := func() int {
		if limit <= 0 {
			return 0
		}
		return max(limit-total, 1)
	}
	start := 0
	if from >= 0 {
		start = sc.bounds[from]
	}
	sc.counts = sc.counts[:0]
	for i := from + 1; i < len(sc.bounds) && !over(); i++ {
		n, _ := cm.tok.Count(text[start:sc.bounds[i]], false, rest())
		total += n
		if over() {
			break
		}
		sc.counts = append(sc.counts, int32(total-fixed))
		start = sc.bounds[i]
	}
	complete := false
	if !over() {
		if start < len(text) {
			n, _ := cm.tok.Count(text[start:], false, rest())
			total += n
		}
		if addSpecial && !over() {
			total += cm.suf
		}
		complete = !over()
	}
	if len(sc.counts) > 0 {
		c.insert(sc.keys[from+1:from+1+len(sc.counts)], sc.counts, complete && from+len(sc.counts) == len(sc.bounds)-1, nil)
	}
	return total, !over()
}

// write hashes s in place, without copying it: an io.Writer neither
// modifies nor retains what it is given.
func (sc *countScratch) write(s string) {
	if s != "" {
		sc.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
}

// boundaries sets sc.bounds to the ends of the added tokens the raw pass
// matches in text, from minOffset on; false when there are none.
func (sc *countScratch) boundaries(cm *cacheModel, text string, minOffset int) bool {
	sc.bounds = sc.bounds[:0]
	off := 0
	cm.tok.raw.split(text, func(seg string, id int) bool {
		off += len(seg)
		if id >= 0 && off >= minOffset {
			sc.bounds = append(sc.bounds, off)
		}
		return true
	})
	return len(sc.bounds) > 0
}

// nodeKeys sets sc.keys to the key of each boundary: SHA-256 of the
// model's namespace, hdr (what else separates the nodes: the salt; for
// keyed counts, the chain's scope too) and the text up to it.
func (sc *countScratch) nodeKeys(cm *cacheModel, text string, hdr nodeHeader) {
	sc.h.Reset()
	sc.h.Write(cm.ns[:])
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], hdr.tag)
	sc.h.Write(l[:])
	sc.write(hdr.s)
	sc.keys = sc.keys[:0]
	prev := 0
	for _, b := range sc.bounds {
		sc.write(text[prev:b])
		prev = b
		sc.sum = sc.h.Sum(sc.sum[:0])
		sc.keys = append(sc.keys, nodeKey(sc.sum[:16]))
	}
}

// nodeHeader is what a node's key hashes after the model's namespace and
// before the text: tag (8 bytes, little-endian) then s.
type nodeHeader struct {
	tag uint64
	s   string
}

// plainHeader separates counts by cache_salt: its length, then the salt.
func plainHeader(salt string) nodeHeader { return nodeHeader{tag: uint64(len(salt)), s: salt} }

// lookup finds the last of keys held, marks it used and returns its index
// (-1: none), its count and its slot; it counts the result in the
// cache's hits, fallbacks or misses.
func (c *CountCache) lookup(keys []nodeKey) (int, int, int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j := len(keys) - 1; j >= 0; j-- {
		if i, ok := c.index[keys[j]]; ok {
			c.touch(i)
			if c.nodes[i].tip {
				c.hits.Add(1)
			} else {
				c.fallbacks.Add(1)
			}
			return j, int(c.nodes[i].count), i
		}
	}
	c.misses.Add(1)
	return -1, 0, -1
}

// insert adds nodes for keys with their counts, in order; lastTip marks the
// last as the end of a text counted in full. links, when not nil, are the
// nodes' block-key links (keyed counts, countcache_keys.go), one a key.
func (c *CountCache) insert(keys []nodeKey, counts []int32, lastTip bool, links []chainLink) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, key := range keys {
		tip := lastTip && k == len(keys)-1
		if i, ok := c.index[key]; ok { // counted meanwhile
			c.nodes[i].tip = c.nodes[i].tip || tip
			c.touch(i)
			continue
		}
		i := c.slot()
		c.nodes[i] = cacheNode{key: key, count: counts[k], tip: tip, prev: -1, next: -1}
		c.index[key] = i
		c.pushFront(i)
		if links != nil {
			c.setLink(i, &links[k])
		}
	}
	// Links take room too: evict until nodes and links fit the budget.
	for len(c.index)+c.linkSlots > c.maxNodes && c.tail >= 0 {
		i := c.tail
		c.evict(i)
		c.free = append(c.free, i)
	}
}

// slot is a node's slot for a new key: a free one, a new one while the
// budget allows, else the least recently used one's.
func (c *CountCache) slot() int32 {
	if n := len(c.free); n > 0 {
		i := c.free[n-1]
		c.free = c.free[:n-1]
		return i
	}
	if len(c.nodes)+c.linkSlots < c.maxNodes || c.tail < 0 {
		if len(c.nodes) == cap(c.nodes) { // grow, never past the budget
			grown := make([]cacheNode, len(c.nodes), min(max(2*cap(c.nodes), 256), max(c.maxNodes, len(c.nodes)+1)))
			copy(grown, c.nodes)
			c.nodes = grown
		}
		c.nodes = append(c.nodes, cacheNode{})
		return int32(len(c.nodes) - 1)
	}
	i := c.tail
	c.evict(i)
	return i
}

// evict drops the node in slot i (and its link).
func (c *CountCache) evict(i int32) {
	c.unlink(i)
	delete(c.index, c.nodes[i].key)
	if c.links != nil {
		if l := c.links[i]; l != nil {
			c.linkSlots -= int(l.slots)
			delete(c.links, i)
		}
	}
}

func (c *CountCache) touch(i int32) {
	if c.head == i {
		return
	}
	c.unlink(i)
	c.pushFront(i)
}

func (c *CountCache) unlink(i int32) {
	n := &c.nodes[i]
	if n.prev >= 0 {
		c.nodes[n.prev].next = n.next
	} else {
		c.head = n.next
	}
	if n.next >= 0 {
		c.nodes[n.next].prev = n.prev
	} else {
		c.tail = n.prev
	}
	n.prev, n.next = -1, -1
}

func (c *CountCache) pushFront(i int32) {
	n := &c.nodes[i]
	n.prev, n.next = -1, c.head
	if c.head >= 0 {
		c.nodes[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}
