package prefixindex

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
