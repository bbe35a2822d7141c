package kvevents

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// The vectors below are msgpack written out by hand from the wire
// description (docs: KVEventBatch, both encodings), byte by byte.

// arrayBatch is the array_like encoding: [ts, [events...], dp_rank].
const arrayBatch = "\x93" + // array of 3
	"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00" + // ts: float64 1.5
	"\x92" + // events: array of 2
	"\x97" + // BlockStored as an array of 7
	"\xabBlockStored" + // tag: fixstr of 11
	"\x92\x01\xcd\x01\x2c" + // block_hashes: [1, 300]
	"\xc0" + // parent_block_hash: nil
	"\x98\x01\x02\x03\x04\x05\x06\x07\x08" + // token_ids: 8 ids
	"\x04" + // block_size: 4
	"\xc0" + // lora_id: nil
	"\xa3GPU" + // medium: "GPU"
	"\x93" + // BlockRemoved as an array of 3
	"\xacBlockRemoved" + // tag: fixstr of 12
	"\x91\xcd\x01\x2c" + // block_hashes: [300]
	"\xc0" + // medium: nil
	"\xc0" // data_parallel_rank: nil

func TestDecodeArrayLike(t *testing.T) {
	b, err := Decode([]byte(arrayBatch))
	if err != nil {
		t.Fatal(err)
	}
	if b.TS != 1.5 || b.DPRank != -1 || len(b.Events) != 2 {
		t.Fatalf("batch = %+v", b)
	}
	s := b.Events[0]
	if s.Kind != BlockStored || len(s.BlockHashes) != 2 || s.BlockHashes[0] != 1 || s.BlockHashes[1] != 300 ||
		s.HasParent || s.BlockSize != 4 || s.Medium != "GPU" || s.LoraName != "" || s.ExtraKeys {
		t.Fatalf("stored = %+v", s)
	}
	for i, id := range s.TokenIDs {
		if id != int32(i+1) {
			t.Fatalf("token_ids = %v", s.TokenIDs)
		}
	}
	r := b.Events[1]
	if r.Kind != BlockRemoved || len(r.BlockHashes) != 1 || r.BlockHashes[0] != 300 || r.Medium != "" {
		t.Fatalf("removed = %+v", r)
	}
}

// hash32 is a 32-byte block hash (SHA-256 sized), as bin 8 of 32.
var hash32 = strings.Repeat("\xab", 16) + strings.Repeat("\xcd", 16)
var parent32 = strings.Repeat("\x11", 32)

// mapBatch is the map encoding of current releases: the tag under
// "type", fields at their defaults omitted, fields unknown to this
// package (group_idx, kv_cache_spec_kind) and an unknown event type.
const mapBatchHead = "\x83" + // map of 3
	"\xa2ts" + "\xcb\x40\x00\x00\x00\x00\x00\x00\x00" + // "ts": 2.0
	"\xa6events" + "\x93" // "events": array of 3

func mapBatch() string {
	return mapBatchHead +
		"\x87" + // BlockStored as a map of 7
		"\xa9token_ids" + "\x94\x0a\x0b\x0c\xcd\x7f\xff" + // token_ids first: [10, 11, 12, 32767]
		"\xa4type" + "\xabBlockStored" +
		"\xacblock_hashes" + "\x91" + "\xc4\x20" + hash32 + // [bytes(32)]
		"\xb1parent_block_hash" + "\xc4\x20" + parent32 +
		"\xaablock_size" + "\x04" +
		"\xa9group_idx" + "\x01" + // newer field: ignored
		"\xb2kv_cache_spec_kind" + "\xa4full" + // newer field: ignored
		"\x81" + "\xa4type" + "\xb0AllBlocksCleared" + // map of 1
		"\x82" + "\xa4type" + "\xa9FutureOne" + "\xa1x" + "\x91\x01" + // an unknown event type
		"\xb2data_parallel_rank" + "\x02" // after events; map of 3 counts ts, events, rank
}

func TestDecodeMapForm(t *testing.T) {
	// The map header says 3 entries: ts, events, data_parallel_rank.
	b, err := Decode([]byte(mapBatch()))
	if err != nil {
		t.Fatal(err)
	}
	if b.TS != 2 || b.DPRank != 2 || len(b.Events) != 3 {
		t.Fatalf("batch = %+v", b)
	}
	s := b.Events[0]
	want := Hash(xxhash.Sum64String(hash32))
	if s.Kind != BlockStored || len(s.BlockHashes) != 1 || s.BlockHashes[0] != want || !s.HasParent ||
		s.Parent != Hash(xxhash.Sum64String(parent32)) || s.BlockSize != 4 || len(s.TokenIDs) != 4 || s.TokenIDs[3] != 32767 {
		t.Fatalf("stored = %+v", s)
	}
	if b.Events[1].Kind != AllBlocksCleared || b.Events[2].Kind != Unknown {
		t.Fatalf("events = %+v", b.Events[1:])
	}
}

// The newer array form: lora_name and extra_keys after medium, and a
// field past those this package knows; an int64 negative hash (Python's
// hash()) as a parent.
func TestDecodeArrayNewerFields(t *testing.T) {
	v := "\x92" + // [ts, events]: dp_rank left out
		"\x00" + // ts as the integer 0
		"\x91" +
		"\x9a" + // array of 10
		"\xabBlockStored" +
		"\x91\xcf\xff\xff\xff\xff\xff\xff\xff\xfe" + // [uint64 max-1]
		"\xd3\xff\xff\xff\xff\xff\xff\xff\xfb" + // parent: int64 -5
		"\x92\x07\x08" + // token_ids
		"\x02" + // block_size 2
		"\x05" + // lora_id 5
		"\xc0" + // medium nil
		"\xa5sql-a" + // lora_name
		"\x91" + "\x92\xa4salt\x01" + // extra_keys: [["salt", 1]]
		"\x00" // group_idx: unknown to this package
	b, err := Decode([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	s := b.Events[0]
	if s.BlockHashes[0] != Hash(1<<64-2) || s.Parent != Hash(^uint64(4)) || !s.HasParent || s.LoraID != 5 ||
		s.LoraName != "sql-a" || !s.ExtraKeys || b.DPRank != -1 {
		t.Fatalf("stored = %+v", s)
	}
}

func TestDecodeGarbage(t *testing.T) {
	for name, v := range map[string]string{
		"empty":              "",
		"not a container":    "\xc3",
		"short float":        "\x92\xcb\x3f",
		"huge array":         "\x92\x00\xdd\xff\xff\xff\xff",
		"events not list":    "\x92\x00\x01",
		"tag not string":     "\x92\x00\x91\x91\x01",
		"hash a string":      "\x92\x00\x91\x92\xacBlockRemoved\x91\xa1x",
		"negative token id":  "\x92\x00\x91\x95\xabBlockStored\x91\x01\xc0\x91\xff\x01",
		"trailing bytes":     "\x92\x00\x90\x00",
		"map without type":   "\x81\xa6events\x91\x80",
		"map without events": "\x81\xa2ts\x00",
		"bad rank":           "\x93\x00\x90\xa1x",
		"invalid byte":       "\x92\x00\x91\x92\xabBlockStored\xc1",
		"deep nesting":       "\x92\x00\x91\x92\xa1Z" + strings.Repeat("\x91", 40) + "\x00",
	} {
		if b, err := Decode([]byte(v)); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, b)
		}
	}
}

func TestSeqFrames(t *testing.T) {
	var f [8]byte
	binary.BigEndian.PutUint64(f[:], 258)
	if s, err := ParseSeq(f[:]); err != nil || s != 258 {
		t.Fatalf("seq = %d, %v", s, err)
	}
	// The replay end marker: -1 as 8 signed big-endian bytes.
	if s, err := ParseSeq([]byte("\xff\xff\xff\xff\xff\xff\xff\xff")); err != nil || s != -1 {
		t.Fatalf("end marker = %d, %v", s, err)
	}
	if _, err := ParseSeq([]byte{1, 2, 3}); err == nil {
		t.Fatal("a 3-byte seq was read")
	}
}
