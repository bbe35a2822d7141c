package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// reader walks one msgpack value at a time over a byte slice. Every read
// checks the bytes it needs against what is left, and every length read
// from the wire is checked against the bytes left before anything is
// sized from it, so that garbage is an error, never a panic nor a large
// allocation.
type reader struct {
	b   []byte
	off int
}

// maxDepth bounds the nesting skip follows (an unknown field's value).
const maxDepth = 32

var errShort = errors.New("msgpack: unexpected end of data")

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) byte1() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, errShort
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) uintN(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	return r.b[r.off], nil
}

// nil reports (and consumes) a msgpack nil.
func (r *reader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// count reads a length of n bytes and checks that at least min bytes per
// element remain.
func (r *reader) count(n, per int) (int, error) {
	v, err := r.uintN(n)
	if err != nil {
		return 0, err
	}
	if v > uint64(r.left()/per) {
		return 0, fmt.Errorf("msgpack: length %d past the end of data", v)
	}
	return int(v), nil
}

// arrayLen reads an array header.
func (r *reader) arrayLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x90:
		n := int(c & 0x0f)
		if n > r.left() {
			return 0, errShort
		}
		return n, nil
	case c == 0xdc:
		return r.count(2, 1)
	case c == 0xdd:
		return r.count(4, 1)
	}
	return 0, fmt.Errorf("msgpack: expected an array, got 0x%02x", c)
}

// mapLen reads a map header.
func (r *reader) mapLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x80:
		n := int(c & 0x0f)
		if 2*n > r.left() {
			return 0, errShort
		}
		return n, nil
	case c == 0xde:
		return r.count(2, 2)
	case c == 0xdf:
		return r.count(4, 2)
	}
	return 0, fmt.Errorf("msgpack: expected a map, got 0x%02x", c)
}

// str reads a string's bytes (no copy: they alias the payload).
func (r *reader) str() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c&0xe0 == 0xa0:
		n = int(c & 0x1f)
	case c == 0xd9:
		n, err = r.count(1, 1)
	case c == 0xda:
		n, err = r.count(2, 1)
	case c == 0xdb:
		n, err = r.count(4, 1)
	default:
		return nil, fmt.Errorf("msgpack: expected a string, got 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// optStr reads a string or nil ("" for nil).
func (r *reader) optStr() (string, error) {
	if r.isNil() {
		return "", nil
	}
	s, err := r.str()
	return string(s), err
}

// bin reads a bin value's bytes (no copy).
func (r *reader) bin() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n int
	switch c {
	case 0xc4:
		n, err = r.count(1, 1)
	case 0xc5:
		n, err = r.count(2, 1)
	case 0xc6:
		n, err = r.count(4, 1)
	default:
		return nil, fmt.Errorf("msgpack: expected bytes, got 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// isInt reports whether the next value is an integer.
func (r *reader) isInt() bool {
	c, err := r.peek()
	return err == nil && (c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3))
}

// int reads an integer as int64 bits: a uint64 above MaxInt64 keeps its
// bits (a hash), signed values their sign.
func (r *reader) int() (int64, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xcc && c <= 0xcf:
		v, err := r.uintN(1 << (c - 0xcc))
		return int64(v), err
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		v, err := r.uintN(n)
		if err != nil {
			return 0, err
		}
		shift := 64 - 8*n
		return int64(v<<shift) >> shift, nil
	}
	return 0, fmt.Errorf("msgpack: expected an integer, got 0x%02x", c)
}

// float reads a float (or an integer, which msgspec may write for a whole
// float).
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.off++
		v, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.off++
		v, err := r.uintN(8)
		return math.Float64frombits(v), err
	}
	v, err := r.int()
	return float64(v), err
}

// skip passes over one value of any type.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("msgpack: nested too deep")
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c >= 0xcc && c <= 0xd3:
		_, err = r.int()
		return err
	case c == 0xca || c == 0xcb:
		_, err = r.float()
		return err
	case c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb):
		_, err = r.str()
		return err
	case c >= 0xc4 && c <= 0xc6:
		_, err = r.bin()
		return err
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
		n, err := r.arrayLen()
		for i := 0; i < n && err == nil; i++ {
			err = r.skip(depth + 1)
		}
		return err
	case c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		n, err := r.mapLen()
		for i := 0; i < 2*n && err == nil; i++ {
			err = r.skip(depth + 1)
		}
		return err
	case c >= 0xd4 && c <= 0xd8: // fixext: type byte + 1..16 bytes
		r.off++
		_, err = r.take(1 + 1<<(c-0xd4))
		return err
	case c >= 0xc7 && c <= 0xc9: // ext 8/16/32
		r.off++
		n, err := r.count(1<<(c-0xc7), 1)
		if err != nil {
			return err
		}
		_, err = r.take(1 + n)
		return err
	}
	return fmt.Errorf("msgpack: invalid type byte 0x%02x", c)
}
