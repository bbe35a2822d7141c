package tokenize

import (
	"fmt"
	"hash/maphash"
)

// longTable maps the tokens of more than 7 bytes (the shortTable has the
// others) to their ranks. It holds no Go pointer but its one key string,
// so the garbage collector has nothing in it to scan: the map it replaces
// (map[string]int32 over every token) was some 7 MB of pointers that each
// collection scanned again for as long as the tokenizer lived, and with
// the id -> token table most of a 20 MB tokenizer's scan work; the door's
// allocations start a collection every thousand or so requests.
type longTable struct {
	keys  string // the tokens, one after the other
	slots []longSlot
	mask  uint64
	seed  maphash.Seed
}

// longSlot is one token: keys[off:off+n]; n is 0 in an empty slot (every
// key has more than 7 bytes). tag is the high half of the key's hash, so
// that most probes of another key end without comparing bytes.
type longSlot struct {
	off, n    uint32
	tag, rank uint32
}

// newLongTable builds the table of the tokens over 7 bytes in ranks.
func newLongTable(ranks map[string]int32) (*longTable, error) {
	count, size := 0, 0
	for s := range ranks {
		if len(s) > 7 {
			count++
			size += len(s)
		}
	}
	if size >= 1<<32 {
		return nil, fmt.Errorf("%d bytes of tokens do not fit the token table", size)
	}
	slots := 16
	for slots < 2*count {
		slots <<= 1
	}
	t := &longTable{slots: make([]longSlot, slots), mask: uint64(slots - 1), seed: maphash.MakeSeed()}
	keys := make([]byte, 0, size)
	for s, r := range ranks {
		if len(s) <= 7 {
			continue
		}
		h := maphash.String(t.seed, s)
		i := h & t.mask
		for t.slots[i].n != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = longSlot{off: uint32(len(keys)), n: uint32(len(s)), tag: uint32(h >> 32), rank: uint32(r)}
		keys = append(keys, s...)
	}
	t.keys = string(keys)
	return t, nil
}

// get returns the rank of s (more than 7 bytes), or noRank.
func (t *longTable) get(s string) int32 {
	h := maphash.String(t.seed, s)
	tag := uint32(h >> 32)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.n == 0 {
			return noRank
		}
		if sl.tag == tag && int(sl.n) == len(s) && t.keys[sl.off:sl.off+sl.n] == s {
			return int32(sl.rank)
		}
	}
}
