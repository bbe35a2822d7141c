// Package ojson is a strict, order-preserving JSON reader.
//
// # Why not encoding/json
//
// maitred reads a request body once and must read it exactly as vLLM's
// Python parser will, because it counts tokens for the request vLLM is going
// to run. encoding/json (v1) disagrees with Python on the inputs an attacker
// or a buggy client would send: it matches object keys case-insensitively
// (`"MODEL"` fills `model`), keeps the last of duplicate keys, replaces
// invalid UTF-8 with U+FFFD and turns every number into float64. Chat
// templates also see key order (tojson of tool schemas) and the difference
// between 1 and 1.0. So this package:
//
//   - keeps object members in document order;
//   - rejects duplicate keys, invalid UTF-8, nesting beyond a limit, trailing
//     data and anything that is not RFC 8259 JSON, with the byte offset and the
//     path (`messages[2].role`) of the problem;
//   - keeps each number's literal text, so integers stay integers and floats
//     keep the form Python would print after json.loads;
//   - records the byte span of every value, so a caller can splice a new value
//     into the original body without re-serialising the rest (the body is
//     otherwise forwarded byte for byte).
//
// # Ownership and concurrency
//
// A parsed tree is immutable once Parse returns and may be shared between
// goroutines. Values hold no reference to the input slice except through the
// spans, which are offsets: each string is copied out (one with escapes
// into a buffer of its escaped length; common keys and roles not at all),
// and the nodes, members and elements come from a few blocks per document.
//
// # Cost
//
// Strings, a request's bulk, are scanned eight bytes at a time; one with
// escapes is unescaped in a single pass that also checks it, and only a
// string found wrong is read again byte by byte, so that every error is the
// first a byte-by-byte reading meets (parse_diff_test.go holds the previous,
// simpler string reader, which Parse must match on every input).
//
// # Files
//
// parse.go reads values (the parser, its blocks, numbers, arrays,
// objects); parse_string.go reads strings (the eight-byte scan, unescaping,
// the byte-by-byte path for errors); value.go is the tree's accessors.
package ojson
