package sim

import (
	"encoding/binary"
	"math"
)

// kvEventKind is a KV event's tag (msgspec's tag: the class name).
type kvEventKind int

const (
	kvStored kvEventKind = iota
	kvRemoved
	kvCleared
)

// kvEvent is one event of a batch, in the simulator's terms.
type kvEvent struct {
	kind      kvEventKind
	hashes    []blockHash
	parent    *blockHash
	tokens    []int
	blockSize int
	loraID    *int
	loraName  *string
}

// mediumGPU is the medium vLLM reports for its GPU block pool.
const mediumGPU = "GPU"

// kvEncoder writes KVEventBatch payloads in msgpack, as vLLM's msgspec
// encoder does, in one of its two forms:
//
//   - map (vLLM main): the batch {"ts", "events", "data_parallel_rank"};
//     each event a map whose first key is "type" (the tag), then its fields
//     in declaration order; fields at their default (extra_keys, group_idx,
//     the cache-spec fields) omitted.
//   - array (older releases' array_like structs): the batch
//     [ts, events, data_parallel_rank]; each event an array starting with
//     its tag: ["BlockStored", block_hashes, parent_block_hash, token_ids,
//     block_size, lora_id, medium, lora_name], ["BlockRemoved",
//     block_hashes, medium], ["AllBlocksCleared"].
//
// Block hashes are 32-byte bin values, or with intHash the unsigned integer
// of their last 8 bytes (big-endian), as vLLM's maybe_convert_block_hash.
type kvEncoder struct {
	array   bool
	intHash bool
}

func (e kvEncoder) batch(ts float64, rank int, events []kvEvent) []byte {
	b := make([]byte, 0, 64)
	if e.array {
		b = mpArray(b, 3)
		b = mpFloat(b, ts)
		b = e.events(b, events)
		return mpInt(b, int64(rank))
	}
	b = mpMap(b, 3)
	b = mpStr(b, "ts")
	b = mpFloat(b, ts)
	b = mpStr(b, "events")
	b = e.events(b, events)
	b = mpStr(b, "data_parallel_rank")
	return mpInt(b, int64(rank))
}

func (e kvEncoder) events(b []byte, events []kvEvent) []byte {
	b = mpArray(b, len(events))
	for i := range events {
		b = e.event(b, &events[i])
	}
	return b
}

func (e kvEncoder) event(b []byte, ev *kvEvent) []byte {
	field := func(name string) {
		if !e.array {
			b = mpStr(b, name)
		}
	}
	head := func(tag string, fields int) {
		if e.array {
			b = mpArray(b, fields+1)
		} else {
			b = mpMap(b, fields+1)
			b = mpStr(b, "type")
		}
		b = mpStr(b, tag)
	}
	switch ev.kind {
	case kvStored:
		head("BlockStored", 7)
		field("block_hashes")
		b = e.hashes(b, ev.hashes)
		field("parent_block_hash")
		if ev.parent == nil {
			b = mpNil(b)
		} else {
			b = e.hash(b, *ev.parent)
		}
		field("token_ids")
		b = mpArray(b, len(ev.tokens))
		for _, t := range ev.tokens {
			b = mpInt(b, int64(t))
		}
		field("block_size")
		b = mpInt(b, int64(ev.blockSize))
		field("lora_id")
		if ev.loraID == nil {
			b = mpNil(b)
		} else {
			b = mpInt(b, int64(*ev.loraID))
		}
		field("medium")
		b = mpStr(b, mediumGPU)
		field("lora_name")
		if ev.loraName == nil {
			b = mpNil(b)
		} else {
			b = mpStr(b, *ev.loraName)
		}
	case kvRemoved:
		head("BlockRemoved", 2)
		field("block_hashes")
		b = e.hashes(b, ev.hashes)
		field("medium")
		b = mpStr(b, mediumGPU)
	case kvCleared:
		head("AllBlocksCleared", 0)
	}
	return b
}

func (e kvEncoder) hashes(b []byte, hs []blockHash) []byte {
	b = mpArray(b, len(hs))
	for _, h := range hs {
		b = e.hash(b, h)
	}
	return b
}

func (e kvEncoder) hash(b []byte, h blockHash) []byte {
	if e.intHash {
		return mpUint(b, binary.BigEndian.Uint64(h[24:]))
	}
	b = append(b, 0xc4, byte(len(h))) // bin 8
	return append(b, h[:]...)
}

// --- msgpack, smallest forms, as msgspec writes them -----------------------

func mpNil(b []byte) []byte { return append(b, 0xc0) }

func mpFloat(b []byte, f float64) []byte {
	b = append(b, 0xcb)
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<7:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v < 1<<32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func mpInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

func mpStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func mpMap(b []byte, n int) []byte {
	if n < 16 {
		return append(b, 0x80|byte(n))
	}
	return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
}
