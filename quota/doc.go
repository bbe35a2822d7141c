// Package quota keeps the per-key limits of maitred's API keys: requests
// per minute, tokens per minute (prompt + completion), tokens per day and
// requests in flight. It is pure logic: no HTTP, no goroutines, no timers;
// the gateway names the key, passes its limits and renders the answers
// (429, Retry-After, the x-ratelimit-* headers).
//
// # Model
//
// A request first reserves: one request, one concurrency slot, and its
// tokens, prompt + requested output (Store.Reserve), all or nothing. When
// it ends it settles with its real usage (Reservation.Settle), which gives
// back what it did not use, or adds debt when it used more.
//
// Tokens per minute is a sliding window, not a token bucket. What counts
// against the limit T is the sum of
//
//   - the tokens reserved by requests still in flight, counted from their
//     Reserve, and
//   - the usage of requests that ended, each counted from its Settle for
//     the next 60 s (the end of the request, not its start);
//
// and a Reserve is admitted only if that sum, with what it asks, stays
// within T. A token bucket that starts full would let 2T through in one
// minute (a full bucket spent, then refilled); the window does not:
//
// Take any 60 s interval [t, t+60s) and the requests whose processing
// overlaps it: each of them started before t+60s and ended at or after t.
// Let r be the one that reserved last. At r's Reserve every other request
// of the set had already reserved, and had either not ended (its
// reservation in flight) or ended at or after t, so that its usage counts
// until at least t+60s, after r's Reserve. So all of them were in the sum
// when r was admitted: their reservations (or settled usage) plus r's ask
// were within T. The tokens the backends process for a key in any 60 s
// interval are therefore at most T, plus the debt of those requests (usage
// beyond their reservation, which the gateway cannot know in advance). The
// gateway reserves exactly (it knows the prompt's count and the requested
// output), so the debt is what the count could not know.
//
// Requests per minute counts each request for 60 s from its Reserve,
// whether it has ended or not. Tokens per day is the tokens window over 24
// hours; it counts only reservations made while the key had a day limit (a
// day limit added by a reload starts empty; memory is not spent on keys
// without one). Max concurrent is the number of reservations not settled.
//
// Settled usage is kept in per-second buckets (per-minute for the day
// window) by expiry time, rounded up, never down: a usage can outlive its
// 60 s by up to a second (a minute for the day), never expire early. A
// key's memory is therefore bounded: at most 61 buckets per minute window
// and 1,441 for the day, whatever its traffic; requests in flight are
// sums.
//
// # Denials
//
// A refused Reserve returns *Denied: the limit (Kind), its value, what the
// window holds, what was asked, and RetryAfter. When several limits refuse,
// the one that frees last is reported, so that RetryAfter is when all of
// them fit. RetryAfter is exact when waiting for settled usage to expire is
// enough: a retry at exactly RetryAfter is admitted if nothing else arrived
// meanwhile, and not a nanosecond earlier. A key is thus never refused
// longer than its usage (debt included) takes to expire. When requests in
// flight must end first (a concurrency slot, or their reservations), when
// they end cannot be known: RetryAfter is a short guess, one second, or the
// expiry that must come as well if later, and Denied.Estimated says so.
//
// A request that asks for more tokens than the limit (per minute or per
// day) can never fit: Denied.Never, RetryAfter 0, reported before any other
// refusal, and its message says that retrying cannot help.
//
// Status is what OpenAI's headers report, for the per-minute limits:
// Remaining = max(0, limit − in use); ResetRequests the time until the
// request window is empty (the last counted request expires);
// ResetTokens the time until the token window would be empty if the
// requests in flight ended now: the last settled usage's expiry, and a
// minute (rounded up) while tokens are reserved in flight. That is OpenAI's
// "time until the limit resets to its initial state".
//
// Limits are passed with every call, not stored: a reload that changes a
// key's limits applies to its next Reserve, against what its window
// already holds. Zero means no limit of that kind (and Status reports
// zero for it: no header).
//
// # Ownership
//
// A Reservation belongs to the request that made it, which must Settle it
// exactly once when it ends, whatever the outcome (refused by the queue,
// failed, cancelled, finished): an unsettled reservation holds its slot
// and its tokens for ever. Further calls of Settle are ignored, so a
// deferred Settle(-1) after the real one is safe. Settle(-1) (usage
// unknown) keeps what was reserved.
//
// Local owns the counters. The state of a key that holds nothing (nothing
// in flight, every window expired) is dropped: when Settle or Status finds
// it so, and by a sweep of each shard at most once a minute on Reserve.
//
// # Concurrency
//
// Local is safe for concurrent use. Keys are spread over 64 shards, each a
// map behind its own mutex; a Reserve or Settle locks one shard for a few
// hundred nanoseconds of arithmetic, with no global lock and no
// allocation but the Reservation. Time is read inside the lock, from the
// clock given to NewLocal, as a duration since the first reading (the
// monotonic clock with time.Now), so the order of operations on a key and
// the order of their times agree, and a wall-clock step changes nothing.
//
// # A shared store
//
// Several gateways sharing a key's limits need the same semantics in a
// shared store (issue 14): per key, a Redis/Valkey hash per window whose
// fields are expiry seconds (minutes for the day) and values the settled
// usage, plus counters of what is in flight, all under one hash tag
// ({key}) so that they share a cluster slot. Reserve is one Lua script
// (atomic on the server): read the server's clock (TIME), drop the expired
// fields, sum, compare with the limits passed as arguments, and either
// take (increment the in-flight counters, add the request's field) or
// return the same Denied figures; Settle is another: decrement in flight,
// add the usage under its expiry field, and set the key's expiry past its
// last field so idle keys vanish on their own. What a shared store adds is
// the holds of a gateway that dies mid-request: each in-flight hold must
// be recorded under its reservation id with a lease that the gateway
// renews, so that an expired lease releases its slot and counts its tokens
// as used.
package quota
