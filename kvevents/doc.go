// Package kvevents reads vLLM's KV-cache events: the decoder of a
// KVEventBatch and the subscriber that follows one publisher. It imports
// no HTTP and knows nothing of routing; what a subscription learns goes to
// a Sink (package prefixindex implements it).
//
// # Files
//
// msgpack.go is a small msgpack reader of its own: every length read from
// the wire is checked against the bytes left before anything is sized
// from it, nesting is bounded, so garbage is an error, never a panic nor a
// large allocation (FuzzDecode; seeds in testdata/fuzz), and what a
// reference encoder writes it reads back exactly
// (FuzzDecodeMatchesMsgpackLibrary: batches encoded by
// vmihailenco/msgpack in both layouts, a test-only dependency). batch.go and
// event.go decode a batch in both of vLLM's encodings: the older
// array_like one ([ts, events, dp_rank], each event [tag, fields...]) and
// the current map one (each event a map with its class name under
// "type", fields at their defaults omitted). Fields and event types this
// package does not know are skipped. A block hash (ExternalBlockHash) is
// bytes or an integer; both become a 64-bit Hash (bytes folded by
// xxhash). frames.go reads the 8-byte big-endian seq frames (-1: the
// replay's end marker).
//
// # The subscriber
//
// subscriber.go: a Subscriber follows one publisher (one data-parallel
// rank; rank r of a server publishes on port + r): a SUB socket
// (github.com/go-zeromq/zmq4, pure Go) dialled to Endpoint with the
// Topic as filter, reading [topic, seq, payload]. Batches apply in seq
// order. A gap (seq past the next expected, including a first batch past
// 0) is filled from the replay socket (a DEALER to the publisher's
// ROUTER: ["", start] answered by ["", seq, payload]... ["", -1, ""]) from
// the first missing seq; a gap it cannot fill (no replay endpoint, the
// buffer no longer reaches back, the replay fails) clears the backend's
// index (Sink.Clear): what it holds is unknown, and what it stores from
// then on is indexed again. A seq going back is a publisher restart: the
// index is cleared and the new process's batches are asked for from 0. A
// message that cannot be read (wrong frames, a payload that does not
// decode) is counted, clears the index and marks the stream not live
// until a batch is read again. A lost connection reconnects with
// exponential backoff (MinBackoff..MaxBackoff) and the seq logic above
// decides what the reconnection missed. A stream is live once its first
// connection is up (nothing indexed yet can be stale: an idle publisher
// is usable), and after a reconnection or garbage only once a batch was
// read in sequence. Sockets are closed with their readers drained
// (closeDrained): zmq4's per-connection reader would otherwise stay
// blocked on a full queue.
//
// # Concurrency
//
// Run is one goroutine per subscription; it calls its Sink from that
// goroutine only and returns, with its sockets closed, when its context
// ends. Decode is a pure function.
package kvevents
