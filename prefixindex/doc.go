// Package prefixindex keeps, per model, which backends hold which blocks
// of their prefix caches, from their KV events (package kvevents), and
// answers how much of a request's prompt each backend holds.
//
// # Model
//
// A block is keyed by maitred's own chained key (chain.go): xxhash over
// the parent block's key and the block's token ids, starting from a root
// per scope (the base model, or a LoRA adapter by name). It never depends
// on vLLM's block hash (seeded per process, algorithm set by a flag); the
// door computes the same keys from a request's token ids (AppendKeys).
// Blocks whose vLLM hash covers more than the ids (extra keys: multimodal
// inputs, a cache_salt), of another block size than the index's, on
// another medium than the GPU, or whose parent the index never saw, are
// not indexed (counted as Skipped): a request could not be matched to
// them by its ids alone.
//
// An Index (index.go) holds one bit per backend (at most MaxBackends) for
// each block key, and per backend the map from vLLM's hash to the key
// (BlockStored names its parent and BlockRemoved its blocks by vLLM's
// hash), with a count per key: the data-parallel ranks of one server are
// one backend, and a block two ranks hold stays until both removed it
// (apply.go). A backend's blocks are cleared on AllBlocksCleared, on a
// gap its subscriber could not replay, on a publisher restart, on
// garbage, and when they pass its capacity in blocks (its KV cache, or
// the index's cap, whichever is smaller: removals were lost); Remove
// drops a backend that left. Memory is thus bounded by the backends'
// capacities.
//
// Match (query.go) reports, for each backend asked about, how many of a
// request's block keys it holds in a row from the first: its cached
// prefix. A key is chained over every block before it, and vLLM keeps
// what it holds prefix-closed (a parent outlives its children), so while
// no backend asked about holds an orphan (a block whose parent it does
// not hold: counted on every store and removal, apply.go) the prefix is
// found by bisection, a few lookups per backend whatever the prompt's
// length; otherwise Match walks the keys from the first. It answers false
// when one of them is not Live (every rank's stream in sequence): the
// caller then routes as without events. sink.go is the index's
// kvevents.Sink for one backend.
//
// # Concurrency
//
// An Index is safe for concurrent use: events take its write lock, Match
// and Status its read lock. Match allocates nothing.
package prefixindex
