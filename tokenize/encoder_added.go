package tokenize

import "strings"

// addedMatcher finds added tokens leftmost-longest, like the Aho-Corasick
// (MatchKind::LeftmostLongest) automaton in HF's AddedVocabulary: at the
// first position where any token starts, the longest token starting there
// wins. It is a byte trie; positions whose byte starts no token are skipped
// with strings.IndexByte when every token starts with the same byte (text
// without '<' costs a vectorised search for typical vocabularies), else
// through a table, one lookup per byte. The trie's nodes are rows of a
// dense table over the bytes the tokens use (one load per byte of a
// match), unless that table would be large; then they are a map.
type addedMatcher struct {
	first [256]bool
	// only is the one byte every token starts with, or -1: then the
	// text is searched with strings.IndexByte (Qwen's and Llama 3's
	// added tokens all start with '<').
	only int
	// edges maps node<<8|byte to the child node; node 0 is the root.
	edges map[uint32]uint32
	// ids[node] is the token id ending at node, or -1.
	ids []int32
	// When next is set, it replaces edges and ids. Each node is a row of
	// classes entries starting at node*classes (the root's at 0): the
	// entry for class[c] is the row of the node's child on byte c (0:
	// none; the root is no child), and the entry for class 0, which no
	// byte of a token has (class[c] is 0 for a byte no token holds), is
	// the id of the token ending at the node plus one (0: none). Rows
	// rather than node numbers, and the id in the row, make a step of a
	// match two dependent loads, with no multiplication.
	class   [256]uint8
	classes int
	next    []int32
}

// maxDenseTrie bounds the dense table's entries (4 bytes each).
const maxDenseTrie = 1 << 18

func newAddedMatcher(tokens map[string]int) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{edges: make(map[uint32]uint32), ids: []int32{-1}}
	for s, id := range tokens {
		if s == "" {
			continue
		}
		node := uint32(0)
		for i := 0; i < len(s); i++ {
			k := node<<8 | uint32(s[i])
			next, ok := m.edges[k]
			if !ok {
				next = uint32(len(m.ids))
				m.ids = append(m.ids, -1)
				m.edges[k] = next
			}
			node = next
		}
		m.ids[node] = int32(id)
		m.first[s[0]] = true
	}
	m.dense(tokens)
	m.only = -1
	for c, ok := range m.first {
		if ok && m.only == -1 {
			m.only = c
		} else if ok {
			m.only = -1
			break
		}
	}
	return m
}

// dense builds next from edges when the table is small enough.
func (m *addedMatcher) dense(tokens map[string]int) {
	classes := 1
	for s := range tokens {
		for i := 0; i < len(s); i++ {
			if m.class[s[i]] == 0 {
				if classes == 256 {
					m.class = [256]uint8{}
					return
				}
				m.class[s[i]] = uint8(classes)
				classes++
			}
		}
	}
	if len(m.ids)*classes > maxDenseTrie {
		m.class = [256]uint8{}
		return
	}
	m.classes = classes
	m.next = make([]int32, len(m.ids)*classes)
	for k, child := range m.edges {
		m.next[int(k>>8)*classes+int(m.class[k&0xff])] = int32(int(child) * classes)
	}
	for node, id := range m.ids {
		m.next[node*classes] = id + 1
	}
	m.edges, m.ids = nil, nil
}

// longest returns the length and id of the longest token that starts at
// s[i:], or 0, -1.
func (m *addedMatcher) longest(s string, i int) (int, int) {
	if m.next != nil {
		bestLen, bestID := 0, -1
		row := 0
		for j := i; j < len(s); j++ {
			c := m.class[s[j]]
			if c == 0 {
				break
			}
			row = int(m.next[row+int(c)])
			if row == 0 {
				break
			}
			if id := m.next[row]; id > 0 {
				bestLen, bestID = j+1-i, int(id-1)
			}
		}
		return bestLen, bestID
	}
	node := uint32(0)
	bestLen, bestID := 0, -1
	for j := i; j < len(s); j++ {
		next, ok := m.edges[node<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = next
		if id := m.ids[node]; id >= 0 {
			bestLen, bestID = j+1-i, int(id)
		}
	}
	return bestLen, bestID
}

// split calls f for each maximal stretch of text without added tokens (id
// -1) and for each added token (its id), in order. Empty stretches are not
// reported. It stops early when f returns false and then returns false.
func (m *addedMatcher) split(text string, f func(seg string, id int) bool) bool {
	if m == nil {
		if text == "" {
			return true
		}
		return f(text, -1)
	}
	start := 0
	for i := 0; i < len(text); i++ {
		if m.only >= 0 {
			j := strings.IndexByte(text[i:], byte(m.only))
			if j < 0 {
				break
			}
			i += j
		} else if !m.first[text[i]] {
			continue
		}
		n, id := m.longest(text, i)
		if n == 0 {
			continue
		}
		if i > start && !f(text[start:i], -1) {
			return false
		}
		if !f(text[i:i+n], id) {
			return false
		}
		start = i + n
		i = start - 1
	}
	if start < len(text) {
		return f(text[start:], -1)
	}
	return true
}
