package tokenize

import "iter"

// A lower bound on the tokens of one long pre-token, from its bytes alone.
//
// Counting stops once the count passes the limit, but a single pre-token
// is merged whole: a 7 MB "aaaa…" is one piece, and BPE over it costs
// seconds and hundreds of MB before the first token is known. Whatever
// the merge order, the model's output for a piece is a sequence of
// vocabulary tokens that covers the piece's bytes left to right, each
// token covering the bytes it stands for. So if a token starting at byte i
// covers at most reach(i) bytes, the piece needs at least as many tokens
// as the fewest jumps from 0 to len(piece) when each jump from i goes at
// most reach(i) bytes: a "jump game" solved greedily in one pass.
//
// reach(i) comes from a table of the longest token starting with each
// pair of bytes (one lookup a byte: a 7 MB piece is bounded in about ten
// milliseconds); a token of one byte covers one byte. The bound is exact
// arithmetic, never a guess: it only lets counting stop early, never
// reports a count below the truth (TestPieceBoundNeverExceedsCount checks
// it against the real count on every fixture tokenizer).

// reachTable maps the first two bytes of a token to the longest token
// (in bytes) with that prefix.
type reachTable struct {
	pair [1 << 16]uint16
	// floor is the fewest bytes any output token covers where no listed
	// token starts: 1 for byte-level and byte-fallback models; 4 where an
	// unknown character becomes one <unk> (a character is at most 4 bytes).
	floor int
}

// newReachTable builds the table from every token's bytes. It returns nil
// (no bound) if a token is too long to fit the table's counters.
func newReachTable(tokens iter.Seq[string], floor int) *reachTable {
	r := &reachTable{floor: floor}
	ok := true
	tokens(func(s string) bool {
		if len(s) < 2 {
			return true
		}
		if len(s) > 0xffff {
			ok = false
			return false
		}
		k := uint16(s[0])<<8 | uint16(s[1])
		r.pair[k] = max(r.pair[k], uint16(len(s)))
		return true
	})
	if !ok {
		return nil
	}
	return r
}

// bound returns a lower bound on the number of tokens the model emits for
// piece. It stops once the bound reaches stop: a bound of stop tokens is
// all a caller with stop-1 tokens left before its limit needs to know.
func (r *reachTable) bound(piece string, stop int) int {
	n := len(piece)
	jumps, end, far := 0, 0, 0
	for i := 0; end < n && jumps < stop; jumps++ {
		// Every position of this layer (reached in exactly `jumps` tokens)
		// extends the next one.
		for ; i <= end; i++ {
			reach := r.floor
			if i+1 < n {
				reach = max(reach, int(r.pair[uint16(piece[i])<<8|uint16(piece[i+1])]))
			}
			far = max(far, i+reach)
		}
		end = far
	}
	return jumps
}

// boundMin is the piece length above which counting against a limit takes
// the bound first and the exact count only if the limit is still in reach:
// the pieces that go through the heap merge (shorter ones are cheap and
// mostly cached).
const boundMin = scanLimit

// pieceBound is the lower bound for one pre-token piece, computed up to
// stop (see reachTable.bound), or -1 when the model has no bound.
func (t *Tokenizer) pieceBound(piece string, stop int) int {
	var r *reachTable
	if t.bl != nil {
		r = t.bl.reach
	} else if t.spm != nil {
		r = t.spm.reach
	}
	if r == nil {
		return -1
	}
	return r.bound(piece, stop)
}
