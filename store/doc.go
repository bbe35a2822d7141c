// Package store keeps what the replicas of one maitred fleet share, in a
// Redis 7 or Valkey server (config keys store, on_store_error,
// store_lease, store_heartbeat, store_timeout): each backend's admitted
// work, so that three replicas do not each send a backend its whole
// max_in_flight and token budget, and the keys' quotas (Quotas, a
// quota.Store with package quota's semantics: quota_scripts.go), so that
// a key's tokens_per_minute is the fleet's, not each replica's; and the
// owners of stored Responses API responses (responses.go: id -> key name,
// model, backend, one string each with ResponseTTL), so that any replica
// forwards a key's request by id to the backend holding it and refuses
// other keys'; and the flows' service under fairness tokens (flows.go), so
// that a key's share is the fleet's.
//
// # Model
//
// A request the admission pool placed on a backend is confirmed here before
// it is sent (admission.Shared): Take runs one script that counts the
// backend's live holdings of every replica against its max_in_flight and
// token budget and, when the request fits, adds its holding ("replica/seq"
// -> tokens in the backend's hash), all in one round trip. Release deletes
// the holding and publishes the backend's name on a channel; every replica
// listens, and its pool looks at that backend again (a replica whose
// candidates are all held elsewhere waits in its own queue, fair and
// deadline-aware as without a store, and is woken by that message, not by
// polling).
//
// # Leases and heartbeats
//
// Holdings carry no expiry of their own: they count while their replica is
// live, a member of the replicas set whose lease end (the store's clock)
// has not passed. Each replica renews its lease every store_heartbeat;
// that heartbeat also deletes the replica's holdings it no longer has (a
// release that did not reach the store) and counts the live replicas
// (maitred_store_replicas). A replica that dies
// (kill -9, a lost node) frees everything it held when its lease ends,
// store_lease after its last heartbeat; the next Take or heartbeat of any
// replica drops those holdings and announces the room. Each heartbeat is
// also every replica's safety re-check of the backends it found held
// elsewhere, since a lease that ends is announced only when someone looks.
//
// # When the store is down
//
// An operation that fails or takes longer than store_timeout marks the
// store down (logged once, maitred_store_up 0, shown in /readyz, /debug and
// on the status page); Take then answers at once, without a round trip,
// and the pool applies on_store_error: local admits on this replica's
// allowance (see package admission: the room it held on each backend at
// the store's last answer about it, Seen, plus its share of the room
// nobody held; takes and releases answer with the backend's count, this
// replica's part and a version that orders answers arriving out of order),
// reject refuses with 503. Heartbeats go on
// (every second at most while down), and the first that reaches the store
// again marks it up: it writes every holding the replica has, those taken
// while the store was down included, each under its own field, so nothing
// is counted twice. Only a heartbeat sent while the store was taken as up
// ends the write-back (one sent while down and answered late misses the
// holdings taken meanwhile), and only such a one records its time in the
// beats hash; the replica settles (State().Settling: the pool keeps to its
// allowance as well) until every live replica's recorded beat is later
// than its return by store_timeout, since until then the store's counts
// may lack what other replicas took while it was down; holdings of requests still running can exceed a
// backend's limit for as long as they run, which holds new takes back
// until they end (never past them). A store that restarted empty is
// refilled the same way: the store keeps a random epoch, and a heartbeat
// that finds another than the replica last saw writes everything back.
//
// # Keys' quotas
//
// Quotas keeps package quota's windows in the store, on its clock: per
// key, a hash per window (requests and tokens per minute, tokens per day)
// whose fields are expiry instants rounded up to the window's granularity
// and whose values are what expires then, and a hash of the reservations
// in flight, each a holding under its replica's lease. Reserve is one
// script (the same checks, denials, RetryAfter and Status as quota.Local);
// Settle another. A reservation of a replica whose lease ended is counted
// as used (as reserved) by the key's next reserve. While the store is
// down, reservations are made in a quota.Local on this replica's share of
// each limit (on_store_error local; their usage is not written to the
// store afterwards), or refused with admission.ErrStoreDown (reject); a
// settlement the store could not take keeps its reservation in flight
// (written back by the heartbeats) and is retried after each heartbeat
// that reaches it.
//
// # Flows' service
//
// Under a model's fairness tokens, each replica's pools push the weighted
// token service they charged each flow (API key) and read every flow's
// total back (SyncFlows, flows.go: admission.FlowSync), every
// gateway.FlowSyncInterval (FlowSyncContended while flows wait): one
// script on a hash per model of totals (flow -> service, a float;
// HINCRBYFLOAT, EXPIRE FlowsTTL) and a hash per model of claims (replica
// -> its end on the store's clock and its active flows as JSON: each
// flow's counter, the service it counted, whether it waits and how long
// its first request has waited (admission.FlowClaim), each ending FlowClaimsTTL after its replica's last sync, dropped by the
// next sync that finds it ended), answering the totals and the other
// replicas' live claims. While the store is down a pool keeps its deltas
// for the next sync and schedules on its own service meanwhile.
//
// # Concurrency
//
// A Store is safe for concurrent use. Its local record of holdings is
// guarded by one mutex held only in memory, never across a round trip; the
// heartbeat takes a snapshot with the highest sequence number handed out,
// so that a holding asked for after the snapshot is never deleted by it.
// Only a write-back (a new epoch, or after the store was down) can revive
// a holding released while it ran, for one heartbeat (counted too long,
// never too short).
package store
