package kvevents

import (
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Kind is the type of a KV-cache event (the msgspec tag: its class name).
type Kind uint8

const (
	// Unknown is an event type this package does not know (a newer
	// release's): decoded and ignored.
	Unknown Kind = iota
	// BlockStored: blocks entered the prefix cache.
	BlockStored
	// BlockRemoved: blocks left it.
	BlockRemoved
	// AllBlocksCleared: the whole cache was reset.
	AllBlocksCleared
)

var kindNames = [...]string{"unknown", "BlockStored", "BlockRemoved", "AllBlocksCleared"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Hash is a vLLM block hash (ExternalBlockHash) as a 64-bit value: an
// integer hash keeps its bits; a bytes hash (32 bytes of SHA-256, or
// another algorithm's digest) is folded by xxhash. vLLM's hashes are only
// ever compared with other hashes of the same backend, which uses one form.
type Hash uint64

// Event is one KV-cache event. Fields a kind does not have are zero.
type Event struct {
	Kind Kind
	// BlockHashes: the blocks stored or removed, in order.
	BlockHashes []Hash
	// Parent is the hash of the first stored block's parent; HasParent is
	// false for the first block of a sequence (nil on the wire).
	Parent    Hash
	HasParent bool
	// TokenIDs are the stored blocks' tokens, BlockSize per block.
	TokenIDs  []int32
	BlockSize int
	// LoraName names the LoRA adapter the blocks were computed with (""
	// for the base model); LoraID is the deprecated numeric id (0: none).
	LoraName string
	LoraID   int64
	// Medium is where the blocks live ("GPU", "CPU"...; "" when nil).
	Medium string
	// ExtraKeys: some block's hash covers more than its token ids
	// (multimodal inputs, a cache_salt...): the ids alone do not name it.
	ExtraKeys bool
}

// Batch is one KVEventBatch: one publisher message's payload.
type Batch struct {
	// TS is the publisher's time of the batch, in seconds.
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank that published it; -1 when nil.
	DPRank int
}

// maxTokenID bounds the token ids a BlockStored may carry.
const maxTokenID = 1<<31 - 1

// Decode reads a KVEventBatch in either of vLLM's encodings: the older
// array_like form ([ts, events, dp_rank], each event [tag, fields...]) or
// the map form ({"ts":..., "events":[...]}, each event a map with its tag
// under "type" and fields at their defaults omitted). Unknown fields and
// event types are ignored; anything malformed is an error.
func Decode(payload []byte) (Batch, error) {
	r := &reader{b: payload}
	c, err := r.peek()
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	if c&0xf0 == 0x80 || c == 0xde || c == 0xdf {
		b, err = decodeBatchMap(r)
	} else {
		b, err = decodeBatchArray(r)
	}
	if err != nil {
		return Batch{}, err
	}
	if r.left() != 0 {
		return Batch{}, fmt.Errorf("kvevents: %d bytes after the batch", r.left())
	}
	return b, nil
}

func decodeBatchArray(r *reader) (Batch, error) {
	n, err := r.arrayLen()
	if err != nil {
		return Batch{}, err
	}
	if n < 2 {
		return Batch{}, fmt.Errorf("kvevents: a batch array has %d fields, want at least 2", n)
	}
	b := Batch{DPRank: -1}
	if b.TS, err = r.float(); err != nil {
		return Batch{}, fmt.Errorf("kvevents: ts: %w", err)
	}
	if b.Events, err = decodeEvents(r); err != nil {
		return Batch{}, err
	}
	if n > 2 {
		if b.DPRank, err = dpRank(r); err != nil {
			return Batch{}, err
		}
	}
	for i := 3; i < n; i++ {
		if err := r.skip(0); err != nil {
			return Batch{}, err
		}
	}
	return b, nil
}

func decodeBatchMap(r *reader) (Batch, error) {
	n, err := r.mapLen()
	if err != nil {
		return Batch{}, err
	}
	b := Batch{DPRank: -1}
	seen := false
	for range n {
		k, err := r.str()
		if err != nil {
			return Batch{}, fmt.Errorf("kvevents: batch key: %w", err)
		}
		switch string(k) {
		case "ts":
			b.TS, err = r.float()
		case "events":
			b.Events, err = decodeEvents(r)
			seen = true
		case "data_parallel_rank":
			b.DPRank, err = dpRank(r)
		default:
			err = r.skip(0)
		}
		if err != nil {
			return Batch{}, fmt.Errorf("kvevents: batch %s: %w", k, err)
		}
	}
	if !seen {
		return Batch{}, errors.New("kvevents: a batch without events")
	}
	return b, nil
}

func dpRank(r *reader) (int, error) {
	if r.isNil() {
		return -1, nil
	}
	v, err := r.int()
	if err != nil {
		return 0, fmt.Errorf("kvevents: data_parallel_rank: %w", err)
	}
	if v < 0 || v > 1<<16 {
		return 0, fmt.Errorf("kvevents: data_parallel_rank %d out of range", v)
	}
	return int(v), nil
}

func decodeEvents(r *reader) ([]Event, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("kvevents: events: %w", err)
	}
	evs := make([]Event, 0, n)
	for i := range n {
		c, err := r.peek()
		if err != nil {
			return nil, err
		}
		var e Event
		if c&0xf0 == 0x80 || c == 0xde || c == 0xdf {
			e, err = decodeEventMap(r)
		} else {
			e, err = decodeEventArray(r)
		}
		if err != nil {
			return nil, fmt.Errorf("kvevents: events[%d]: %w", i, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	}
	return Unknown
}

// hashValue reads an ExternalBlockHash: bytes or an integer.
func hashValue(r *reader) (Hash, error) {
	if r.isInt() {
		v, err := r.int()
		return Hash(v), err
	}
	s, err := r.bin()
	if err != nil {
		return 0, fmt.Errorf("a block hash must be bytes or an integer: %w", err)
	}
	return Hash(xxhash.Sum64(s)), nil
}

func hashList(r *reader) ([]Hash, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	hs := make([]Hash, n)
	for i := range hs {
		if hs[i], err = hashValue(r); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func tokenList(r *reader) ([]int32, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	ids := make([]int32, n)
	for i := range ids {
		v, err := r.int()
		if err != nil {
			return nil, err
		}
		if v < 0 || v > maxTokenID {
			return nil, fmt.Errorf("token id %d out of range", v)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}
