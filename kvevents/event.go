package kvevents

import "fmt"

// The fields of each event type in the array_like encoding, in order
// after the tag. Later releases append fields; those past this list are
// skipped.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"}
	removedFields = []string{"block_hashes", "medium"}
)

func fieldsOf(k Kind) []string {
	switch k {
	case BlockStored:
		return storedFields
	case BlockRemoved:
		return removedFields
	}
	return nil
}

// decodeEventArray reads [tag, fields...].
func decodeEventArray(r *reader) (Event, error) {
	n, err := r.arrayLen()
	if err != nil {
		return Event{}, err
	}
	if n < 1 {
		return Event{}, fmt.Errorf("an event array without its tag")
	}
	tag, err := r.str()
	if err != nil {
		return Event{}, fmt.Errorf("tag: %w", err)
	}
	e := Event{Kind: kindOf(tag)}
	names := fieldsOf(e.Kind)
	for i := 1; i < n; i++ {
		if i-1 < len(names) {
			err = field(r, &e, names[i-1])
		} else {
			err = r.skip(0)
		}
		if err != nil {
			return Event{}, err
		}
	}
	return e, nil
}

// decodeEventMap reads {"type": tag, field: value...}, in any order.
func decodeEventMap(r *reader) (Event, error) {
	n, err := r.mapLen()
	if err != nil {
		return Event{}, err
	}
	// The tag may come after fields: remember where the map starts and
	// read the fields once the kind is known.
	start := r.off
	var e Event
	tagged := false
	for range n {
		k, err := r.str()
		if err != nil {
			return Event{}, fmt.Errorf("event key: %w", err)
		}
		if string(k) == "type" {
			tag, err := r.str()
			if err != nil {
				return Event{}, fmt.Errorf("type: %w", err)
			}
			e.Kind, tagged = kindOf(tag), true
			continue
		}
		if err := r.skip(0); err != nil {
			return Event{}, err
		}
	}
	if !tagged {
		return Event{}, fmt.Errorf("an event map without its type")
	}
	end := r.off
	r.off = start
	for range n {
		k, _ := r.str()
		if err := field(r, &e, string(k)); err != nil {
			return Event{}, err
		}
	}
	r.off = end
	return e, nil
}

// field reads the value of the field named name into e; a field e's kind
// does not have, or that this package does not know, is skipped.
func field(r *reader, e *Event, name string) error {
	var err error
	known := e.Kind == BlockStored || (e.Kind == BlockRemoved && (name == "block_hashes" || name == "medium"))
	if !known {
		return r.skip(0)
	}
	switch name {
	case "block_hashes":
		e.BlockHashes, err = hashList(r)
	case "parent_block_hash":
		if !r.isNil() {
			e.Parent, err = hashValue(r)
			e.HasParent = true
		}
	case "token_ids":
		e.TokenIDs, err = tokenList(r)
	case "block_size":
		var v int64
		v, err = r.int()
		if err == nil && (v < 0 || v > 1<<20) {
			err = fmt.Errorf("block_size %d out of range", v)
		}
		e.BlockSize = int(v)
	case "lora_id":
		if !r.isNil() {
			e.LoraID, err = r.int()
		}
	case "medium":
		e.Medium, err = r.optStr()
	case "lora_name":
		e.LoraName, err = r.optStr()
	case "extra_keys":
		e.ExtraKeys, err = extraKeys(r)
	default:
		err = r.skip(0)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// extraKeys reads extra_keys (nil, or one entry per block, each nil or
// the block's extra keys) and reports whether any block has some.
func extraKeys(r *reader) (bool, error) {
	if r.isNil() {
		return false, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return false, err
	}
	any := false
	for range n {
		if r.isNil() {
			continue
		}
		c, err := r.peek()
		if err != nil {
			return false, err
		}
		// An empty list or tuple is no extra key.
		if c != 0x90 {
			any = true
		}
		if err := r.skip(1); err != nil {
			return false, err
		}
	}
	return any, nil
}
