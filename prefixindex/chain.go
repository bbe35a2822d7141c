package prefixindex

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Key is maitred's own key of a block: a hash chained over the scope
// (LoRA adapter name), every earlier block and the block's own token ids.
// It never depends on vLLM's block hash (seeded per process, algorithm
// chosen by a flag); both sides compute it from token ids alone.
type Key uint64

// Root is the chain's start for a scope: "" is the base model, else the
// LoRA adapter's name.
func Root(lora string) Key {
	var d xxhash.Digest
	d.Reset()
	d.WriteString("maitred-prefix\x00")
	d.WriteString(lora)
	return Key(d.Sum64())
}

// chunk is how many ids one hashing step writes at once.
const chunk = 32

// Next is the key of the block of ids after parent. ids are written as
// 4-byte little-endian values after the parent's 8 bytes.
func Next[T int | int32](parent Key, ids []T) Key {
	var d xxhash.Digest
	d.Reset()
	var buf [8 + 4*chunk]byte
	binary.LittleEndian.PutUint64(buf[:8], uint64(parent))
	n := 8
	for _, id := range ids {
		if n == len(buf) {
			d.Write(buf[:n])
			n = 0
		}
		binary.LittleEndian.PutUint32(buf[n:], uint32(id))
		n += 4
	}
	d.Write(buf[:n])
	return Key(d.Sum64())
}

// AppendKeys appends the keys of ids' full blocks of blockSize tokens,
// chained from Root(lora), to dst: the tail that does not fill a block is
// not keyed (vLLM caches full blocks only).
func AppendKeys[T int | int32](dst []Key, lora string, ids []T, blockSize int) []Key {
	if blockSize <= 0 {
		return dst
	}
	k := Root(lora)
	for i := 0; i+blockSize <= len(ids); i += blockSize {
		k = Next(k, ids[i:i+blockSize])
		dst = append(dst, k)
	}
	return dst
}
