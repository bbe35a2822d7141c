package kvevents

import (
	"encoding/binary"
	"fmt"
)

// ParseSeq reads a message's sequence frame: 8 bytes, big-endian, signed
// (the replay socket's end marker is -1).
func ParseSeq(f []byte) (int64, error) {
	if len(f) != 8 {
		return 0, fmt.Errorf("kvevents: a seq frame of %d bytes, want 8", len(f))
	}
	return int64(binary.BigEndian.Uint64(f)), nil
}

// seqFrame is the 8-byte big-endian frame of seq.
func seqFrame(seq int64) []byte {
	var f [8]byte
	binary.BigEndian.PutUint64(f[:], uint64(seq))
	return f[:]
}
