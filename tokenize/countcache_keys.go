package tokenize

import (
	"slices"
	"sync"

	"github.com/maitred-dev/maitred/internal/ojson"
)

// Keyed counts: a prompt's block keys computed with its count, for
// precise routing (the gateway's routing: precise keys a request's full
// blocks of token ids as its backends' prefix caches are indexed).
//
// The ids of a text are the concatenation of the ids of its segments
// between added-token boundaries, for the same reason its count is the
// sum of theirs (CountCache): the tokenizer cuts at raw added tokens
// first and encodes each piece on its own. So the block-key chain of a
// text can continue from any boundary whose chain state is known: the key
// of the last full block before it, and the ids after that block up to
// the boundary (fewer than a block). A keyed count's node keeps that
// state (a chainLink) beside its count, and the next turn of a
// conversation tokenizes and keys only what follows its last counted
// boundary, as a plain count tokenizes only that. A keyed count keeps
// nodes at fewer boundaries than a plain one (keyedStride apart, and its
// last keyedTips), tokenizing from one kept boundary to the next at once.
//
// A link holds its trailing ids and points into a chain of chunks, the
// keys computed by each count (the keys from the boundary it continued
// from up to its last boundary); a chunk points to the chunk it
// continued, so conversations that share a prefix (a system prompt) share
// its keys. A chain is at most maxChunkDepth chunks deep: a count that
// would go deeper copies the keys into one chunk. Links are accounted in
// the cache's budget (slots of NodeBytes) and dropped with their node.
//
// Keyed nodes are keyed apart from plain ones (nodeHeader: a tag no salt
// length can take, the chain's root, the block size and whether the
// post-processor's tokens are in the ids): a model routed precisely
// counts only through them; a model that is not pays nothing.

// BlockKeyer keys a prompt's full blocks as a chain: the gateway passes
// prefixindex's keys.
type BlockKeyer interface {
	// BlockSize is the tokens a block holds (> 0).
	BlockSize() int
	// Root is the chain's start for scope ("": the base model, else a
	// LoRA adapter's name).
	Root(scope string) uint64
	// Next is the key of the block of ids that follows parent.
	Next(parent uint64, ids []int) uint64
}

// PromptKeys is a prompt's block keys, computed with its count
// (CountCache.CountChatKeys): pooled buffers (NewPromptKeys, Release).
type PromptKeys struct {
	// Keys are the keys of the prompt's full blocks, in order, chained
	// from Root(Scope).
	Keys []uint64
	// Scope is the chain's scope, BlockSize the tokens of a block.
	Scope     string
	BlockSize int
	// Tokens is the number of the prompt's ids (the count, with the
	// post-processor's tokens when the count adds them).
	Tokens int

	ids, pend []int
}

var promptKeysPool = sync.Pool{New: func() any { return new(PromptKeys) }}

// NewPromptKeys returns an empty PromptKeys from the pool.
func NewPromptKeys() *PromptKeys { return promptKeysPool.Get().(*PromptKeys) }

// Release gives pk's buffers back; pk must not be used after. A prompt far
// longer than usual does not keep its buffers.
func (pk *PromptKeys) Release() {
	if pk == nil {
		return
	}
	pk.Keys, pk.Scope, pk.BlockSize, pk.Tokens, pk.ids, pk.pend = pk.Keys[:0], "", 0, 0, pk.ids[:0], pk.pend[:0]
	if cap(pk.Keys) > 16<<10 || cap(pk.ids) > 256<<10 {
		pk.Keys, pk.ids = nil, nil
	}
	promptKeysPool.Put(pk)
}

// maxChunkDepth bounds a link's chain of chunks (the copies a lookup
// walks).
const maxChunkDepth = 16

// keyChunk is the keys one keyed count computed: the keys from index
// start of the prompt's chain on, after the chunk it continued (prev).
type keyChunk struct {
	prev  *keyChunk
	start int32
	depth int32
	keys  []uint64
}

// chainLink is a keyed node's chain state: the prompt's first nkeys keys
// (its chunk's chain), and the ids after its last full block up to the
// boundary. Immutable once in the cache.
type chainLink struct {
	chunk *keyChunk
	nkeys int32
	// slots is the room the link (and, for the last link of its count,
	// its chunk) takes in the cache, in nodes' units.
	slots int32
	tail  []int32
}

// appendKeys writes the link's keys to dst[:l.nkeys] (dst long enough).
func (l *chainLink) appendKeys(dst []uint64) []uint64 {
	dst = dst[:l.nkeys]
	end := l.nkeys
	for ch := l.chunk; ch != nil && end > 0; ch = ch.prev {
		if end > ch.start {
			copy(dst[ch.start:end], ch.keys[:end-ch.start])
			end = ch.start
		}
	}
	return dst
}

// keyedTag is a node header's tag for keyed nodes: no salt is that long.
const keyedTag = ^uint64(0)

func keyedHeader(root uint64, blockSize int, addSpecial bool) nodeHeader {
	var b [17]byte
	for i := range 8 {
		b[i] = byte(root >> (8 * i))
		b[8+i] = byte(uint64(blockSize) >> (8 * i))
	}
	if addSpecial {
		b[16] = 1
	}
	return nodeHeader{tag: keyedTag, s: string(b[:])}
}

// CountChatKeys is CountChat that also keys the prompt's full blocks
// with kr, chained from kr.Root(scope), into pk (Count.Keys is pk then).
// The keys are those of the whole render tokenized as vLLM does; through
// the cache, a later turn tokenizes and keys only what follows the last
// boundary it shares with a text keyed before. Count.Keys is nil (pk
// untouched but for its buffers) when the count is not exact, is over
// limit, or the request sets cache_salt (vLLM's blocks of a salted
// request are not named by their ids alone): the count is then what
// CountChat returns.
func (c *CountCache) CountChatKeys(m *Model, body *ojson.Value, limit int, kr BlockKeyer, scope string, pk *PromptKeys) (cnt Count, err error) {
	cm := c.model(m)
	if cm == nil || kr == nil || kr.BlockSize() <= 0 {
		return c.CountChat(m, body, limit)
	}
	if v := body.Get("cache_salt"); v != nil {
		return c.CountChat(m, body, limit)
	}
	defer countPanicked(&cnt, &err)
	text, addSpecial, err := m.renderChat(body)
	if err != nil {
		return notExact(err)
	}
	pk.Keys, pk.Scope, pk.BlockSize, pk.Tokens, pk.pend = pk.Keys[:0], scope, kr.BlockSize(), 0, pk.pend[:0]
	n, exact, keyed := c.countKeys(cm, text, addSpecial, limit, kr, pk)
	cnt = Count{Tokens: n, Exact: true, Truncated: !exact, Rendered: text}
	if keyed && exact {
		pk.Tokens, cnt.Keys = n, pk
	}
	return cnt, nil
}

// chainState is a keyed count's chain as it goes: pk.Keys, the last key
// (parent) and the ids after it (pk.pend).
type chainState struct {
	kr     BlockKeyer
	bs     int
	parent uint64
	pk     *PromptKeys
}

// feed adds ids to the chain, keying each block they complete.
func (s *chainState) feed(ids []int) {
	pk := s.pk
	for len(ids) > 0 {
		if len(pk.pend) == 0 && len(ids) >= s.bs {
			s.parent = s.kr.Next(s.parent, ids[:s.bs])
			pk.Keys = append(pk.Keys, s.parent)
			ids = ids[s.bs:]
			continue
		}
		k := min(s.bs-len(pk.pend), len(ids))
		pk.pend = append(pk.pend, ids[:k]...)
		ids = ids[k:]
		if len(pk.pend) == s.bs {
			s.parent = s.kr.Next(s.parent, pk.pend)
			pk.Keys = append(pk.Keys, s.parent)
			pk.pend = pk.pend[:0]
		}
	}
}

// A keyed count keeps nodes at fewer boundaries than a plain one: a
// prompt of short messages has a boundary every few dozen tokens (two an
// added-token-delimited message), and a node with its chain state at each
// cost a cold prompt more in inserts, links and evictions than keying its
// blocks did. It keeps the first boundary at least keyedStride bytes
// after the last one it kept, counted from the text's start (so every
// text sharing a prefix keeps the same boundaries in it), and the text's
// last keyedTips boundaries (the next turn of a conversation continues
// from one of those: the previous render's end, or a few added tokens
// before it when the template rewrites its last turn). A count that
// diverges from a text keyed before continues from the last kept boundary
// they share: at most keyedStride bytes are tokenized again.
const (
	keyedStride = 1 << 10
	keyedTips   = 4
)

// keepKeyed sets sc.kept to the indexes, after from, of the boundaries a
// keyed count keeps (every boundary when stride is 0).
func (sc *countScratch) keepKeyed(from, stride int) {
	sc.kept = sc.kept[:0]
	last, tips := 0, len(sc.bounds)-keyedTips
	for j, b := range sc.bounds {
		keep := j >= tips || b-last >= stride
		if b-last >= stride {
			last = b
		}
		if keep && j > from {
			sc.kept = append(sc.kept, int32(j))
		}
	}
}

// countKeys returns what cm.tok.Count(text, addSpecial, limit) returns,
// and whether pk holds the text's block keys (false past the limit).
func (c *CountCache) countKeys(cm *cacheModel, text string, addSpecial bool, limit int, kr BlockKeyer, pk *PromptKeys) (int, bool, bool) {
	st := chainState{kr: kr, bs: kr.BlockSize(), parent: kr.Root(pk.Scope), pk: pk}
	if len(text) > 1<<31-1 {
		n, exact := cm.tok.Count(text, addSpecial, limit)
		return n, exact, false
	}
	if len(text) < c.minBytes {
		return c.encodeWhole(cm, text, addSpecial, limit, &st)
	}
	sc := countScratchPool.Get().(*countScratch)
	defer countScratchPool.Put(sc)
	if !sc.boundaries(cm, text, c.minOffset) {
		return c.encodeWhole(cm, text, addSpecial, limit, &st)
	}
	sc.nodeKeys(cm, text, keyedHeader(st.parent, st.bs, addSpecial))

	// Continue from the last boundary keyed before, with its chain state.
	from, base, slot := c.lookup(sc.keys)
	var fromLink *chainLink
	if from >= 0 {
		if fromLink = c.linkOf(slot, sc.keys[from]); fromLink == nil {
			from, base = -1, 0 // keyed nodes have links; be safe
		}
	}
	fixed := 0
	if addSpecial {
		fixed = cm.pre
	}
	total := fixed + base
	start := 0
	if from >= 0 {
		pk.Keys = fromLink.appendKeys(growKeys(pk.Keys, int(fromLink.nkeys)))
		if len(pk.Keys) > 0 {
			st.parent = pk.Keys[len(pk.Keys)-1]
		}
		for _, id := range fromLink.tail {
			pk.pend = append(pk.pend, int(id))
		}
		start = sc.bounds[from]
	} else if addSpecial {
		st.feed(cm.tok.prefix)
	}
	fromKeys := len(pk.Keys)
	// Room for the keys to come: the rest of the text holds at most a
	// token a byte, and rarely fewer than two bytes a token.
	pk.Keys = slices.Grow(pk.Keys, (len(text)-start)/(2*st.bs)+1)

	sc.keepKeyed(from, c.keyStride)
	links, total, ok := c.keySegments(cm, text, start, total, fixed, limit, &st, sc)
	if !ok {
		n, exact := cm.tok.Count(text, addSpecial, limit)
		return n, exact, false
	}
	if addSpecial {
		total += cm.suf
		st.feed(cm.tok.suffix)
	}
	if limit > 0 && total > limit {
		n, exact := cm.tok.Count(text, addSpecial, limit)
		return n, exact, false
	}
	if len(links) > 0 {
		c.chain(links, fromLink, pk.Keys[:links[len(links)-1].nkeys], fromKeys)
		c.insert(sc.ins, sc.counts, true, links)
	}
	return total, true, true
}

// keySegments tokenizes and keys text from start (total tokens before it,
// fixed of them the post-processor's), segment by segment between the
// kept boundaries (sc.kept), and returns the kept boundaries' links
// (their keys sc.ins, their counts sc.counts) and the total; false when
// the text might pass limit.
func (c *CountCache) keySegments(cm *cacheModel, text string, start, total, fixed, limit int, st *chainState, sc *countScratch) ([]chainLink, int, bool) {
	pk := st.pk
	sc.counts, sc.ins, sc.ends, sc.tails = sc.counts[:0], sc.ins[:0], sc.ends[:0], sc.tails[:0]
	// The kept boundaries' links: one allocation for them, one for their
	// trailing ids (sc.ends: where each link's end in sc.tails).
	var links []chainLink
	if len(sc.kept) > 0 {
		links = make([]chainLink, 0, len(sc.kept))
	}
	for k := 0; k <= len(sc.kept); k++ {
		end := len(text)
		if k < len(sc.kept) {
			end = sc.bounds[sc.kept[k]]
		}
		seg := text[start:end]
		if limit > 0 && len(seg) > limit-total {
			// Might pass the limit: count it first, with counting's early stop.
			if n, _ := cm.tok.Count(seg, false, max(limit-total, 1)); total+n > limit {
				return nil, 0, false
			}
		}
		pk.ids = pk.ids[:0]
		cm.tok.run(seg, false, 0, &pk.ids) // AppendEncode, its slice not moved to the heap
		total += len(pk.ids)
		st.feed(pk.ids)
		start = end
		if k == len(sc.kept) {
			break
		}
		sc.counts = append(sc.counts, int32(total-fixed))
		sc.ins = append(sc.ins, sc.keys[sc.kept[k]])
		links = append(links, chainLink{nkeys: int32(len(pk.Keys))})
		for _, id := range pk.pend {
			sc.tails = append(sc.tails, int32(id))
		}
		sc.ends = append(sc.ends, len(sc.tails))
	}
	if len(links) > 0 {
		tails := make([]int32, len(sc.tails))
		copy(tails, sc.tails)
		prev := 0
		for k, end := range sc.ends {
			links[k].tail = tails[prev:end:end]
			prev = end
		}
	}
	return links, total, true
}

// encodeWhole counts and keys text in one pass, without the cache.
func (c *CountCache) encodeWhole(cm *cacheModel, text string, addSpecial bool, limit int, st *chainState) (int, bool, bool) {
	if limit > 0 && len(text) >= c.minBytes {
		// A long text: the limit's early stop first.
		if n, exact := cm.tok.Count(text, addSpecial, limit); !exact {
			return n, exact, false
		}
	}
	pk := st.pk
	pk.ids = pk.ids[:0]
	cm.tok.run(text, addSpecial, 0, &pk.ids)
	if n := len(pk.ids); limit > 0 && n > limit {
		n, exact := cm.tok.Count(text, addSpecial, limit) // the count's own lower bound
		return n, exact, false
	}
	st.feed(pk.ids)
	return len(pk.ids), true, true
}

// chain makes the chunk of a count's new keys (all keys from fromKeys on,
// keys holding the prompt's keys up to its last new boundary) and points
// links to it; the last link is charged for it.
func (c *CountCache) chain(links []chainLink, from *chainLink, keys []uint64, fromKeys int) {
	ch := &keyChunk{start: int32(fromKeys), depth: 1}
	if from != nil && from.chunk != nil {
		ch.prev, ch.depth = from.chunk, from.chunk.depth+1
	}
	if ch.depth > maxChunkDepth {
		ch.prev, ch.start, ch.depth, fromKeys = nil, 0, 1, 0
	}
	ch.keys = append([]uint64(nil), keys[fromKeys:]...)
	for k := range links {
		links[k].chunk = ch
		links[k].slots = int32(linkSlots(48 + 4*len(links[k].tail)))
	}
	links[len(links)-1].slots += int32(linkSlots(48 + 8*len(ch.keys)))
}

// linkSlots is the room of n bytes in nodes' units.
func linkSlots(n int) int { return (n + NodeBytes - 1) / NodeBytes }

// linkOf is the link of the node in slot (nil when the slot no longer
// holds key: evicted meanwhile).
func (c *CountCache) linkOf(slot int32, key nodeKey) *chainLink {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slot < 0 || int(slot) >= len(c.nodes) || c.nodes[slot].key != key || c.links == nil {
		return nil
	}
	return c.links[slot]
}

// setLink gives slot i its link (the lock held).
func (c *CountCache) setLink(i int32, l *chainLink) {
	if c.links == nil {
		c.links = map[int32]*chainLink{}
	}
	c.links[i] = l
	c.linkSlots += int(l.slots)
}

func growKeys(keys []uint64, n int) []uint64 {
	if cap(keys) < n {
		return make([]uint64, n, n+n/4)
	}
	return keys[:n]
}
