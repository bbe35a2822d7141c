package ojson

import (
	"math"
	"strconv"
	"strings"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The JSON kinds.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

var kindNames = [...]string{"invalid", "null", "boolean", "number", "string", "array", "object"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Value is one node of a parsed document.
type Value struct {
	Kind Kind
	// Bool holds the value of a Bool.
	Bool bool
	// Str holds the unescaped text of a String, or the literal text of a
	// Number exactly as written ("1", "1.0", "-2e5").
	Str string
	// Items holds the elements of an Array.
	Items []*Value
	// Members holds the members of an Object in document order.
	Members []Member
	// Start and End delimit the value in the parsed input: input[Start:End].
	Start, End int
}

// Member is one key/value pair of an object.
type Member struct {
	Key string
	// KeyStart is the offset of the key's opening quote in the input.
	KeyStart int
	Value    *Value
}

// Get returns the member value for key (exact, case-sensitive match), or nil.
func (v *Value) Get(key string) *Value {
	if v == nil || v.Kind != Object {
		return nil
	}
	for i := range v.Members {
		if v.Members[i].Key == key {
			return v.Members[i].Value
		}
	}
	return nil
}

// Has reports whether the object has the key, even with a null value.
func (v *Value) Has(key string) bool { return v.Get(key) != nil }

// IsNull reports whether v is absent or JSON null.
func (v *Value) IsNull() bool { return v == nil || v.Kind == Null }

// IsInt reports whether a Number was written without a fraction or
// exponent, which is how Python's json module decides between int and float.
func (v *Value) IsInt() bool {
	return v != nil && v.Kind == Number && !strings.ContainsAny(v.Str, ".eE")
}

// Int returns the value of an integer Number that fits in int64.
func (v *Value) Int() (int64, bool) {
	if !v.IsInt() {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Str, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Integral reports whether a Number is an integer as pydantic's lax int
// reads JSON: written as one (IsInt), or a float with no fractional part
// (1.0, 2e3), which pydantic takes as that integer.
func (v *Value) Integral() bool {
	if v.IsInt() {
		return true
	}
	if v == nil || v.Kind != Number {
		return false
	}
	f := v.Float()
	return !math.IsInf(f, 0) && f == math.Trunc(f)
}

// LaxInt returns the value of an Integral Number that fits in int64.
func (v *Value) LaxInt() (int64, bool) {
	if v.IsInt() {
		return v.Int()
	}
	if !v.Integral() {
		return 0, false
	}
	if f := v.Float(); f >= -(1<<63) && f < 1<<63 {
		return int64(f), true
	}
	return 0, false
}

// Float returns a Number as float64 (±Inf when out of range).
func (v *Value) Float() float64 {
	if v == nil || v.Kind != Number {
		return 0
	}
	f, _ := strconv.ParseFloat(v.Str, 64)
	return f
}

// Raw returns the value's bytes in the input it was parsed from.
func (v *Value) Raw(input []byte) []byte { return input[v.Start:v.End] }
