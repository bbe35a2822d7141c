// Package admission decides, before any GPU work, what happens to a
// request: forward it (with its exact prompt token count) or reject it with
// a typed reason that the HTTP edge renders.
//
// # The door
//
// Door.Check is one pipeline that reads top to bottom, each step returning
// either nothing (go on) or a *Rejection. What differs between APIs is the
// endpoint's spec (an Endpoint is a pointer to its EndpointSpec,
// endpoints.go): which check runs after step 1, whether the input is
// chat messages or a completions prompt, the default max_tokens, whether
// it generates, the pooling rules (encoding fields, top_n, score and
// rerank pairs, vLLM's word for the work); no step compares endpoint
// names. The Decision names the spec it checked the request as
// (Decision.Endpoint).
//
//  1. the body is a strict JSON object (valid UTF-8, nesting <= 64, no
//     duplicate keys, no case variants of the keys that decide routing and
//     counting);
//  2. "model" names a configured model;
//  3. chat messages (roles, content, parts, tool calls) or the completions
//     prompt have a shape vLLM accepts;
//  4. max_tokens / max_completion_tokens, n and stream are well-typed;
//  5. the model's chat template renders (a raise_exception is the client's
//     error, in the template's own words);
//  6. prompt + max_tokens fits max_model_len, or the model clamps; each
//     prompt of a batch (a completions list prompt, which vLLM runs as
//     that many requests) on its own. The Decision carries the number of
//     prompts and the sum of their counts, for the queue's reservation.
//
// The pooling endpoints (Embeddings, Pooling, Classify, Score, Rerank)
// run steps 1 and 2, then their own: the typed fields
// (truncate_prompt_tokens, encoding_format, dimensions, top_n), the input
// (a string, strings, token ids, lists of ids, or chat messages; score and
// rerank pairs; token ids, as a completions prompt's, each held to the
// model's vocabulary, Model.Vocab: CheckTokenIDs in tokenids.go, the one
// token-id check of every endpoint that takes ids), and for the text and
// chat forms each input counted on its
// own and refused when it alone passes max_model_len (P > L, vLLM's
// pooling rule and wording). They request no output (Decision.MaxTokens 0;
// Endpoint.Generates is false). An input vLLM truncates
// (truncate_prompt_tokens) and score and rerank pairs (tokenized by the
// model's own cross-encoder rules) are forwarded uncounted.
//
// The audio endpoints (Transcriptions, Translations) take a multipart
// form: CheckForm runs step 2 and the typed fields (stream,
// max_completion_tokens) on the fields the gateway read; the audio is not
// counted (NotCounted) and the reservation is Whisper's one window
// (Decision.PromptEstimate).
// Anthropic Messages (Messages; anthropic.go) runs the chat steps on
// Anthropic's shape: max_tokens required, messages and system checked as
// vLLM's schema reads them, the conversation converted as vLLM converts it
// and counted by the chat counter, the same context rule and clamp.
// Door.CountMessages is the same check for count_tokens, without
// max_tokens. Blocks other than text, and fields that change the
// rendering (tools, thinking), forward the request uncounted.
// A Responses request (responses.go) has its own steps after the model
// (which it may leave out when one is configured, as vLLM allows): the
// typed fields, the input (a string or items; message items need a role
// vLLM accepts and string or list content), the conversation vLLM builds
// (instructions as the system message) counted through the chat template,
// and the context rule with max_output_tokens as the requested output.
// What it cannot reproduce (previous_response_id, non-message items,
// non-text parts, tools, reasoning, a harmony template: gpt-oss) is
// forwarded uncounted (NotExact).
//
// Where the count cannot be exact (no tokenizer, multimodal parts, a
// template feature reproduced only approximately, an unknown context
// length) the request is forwarded, and the Decision says why it is
// uncounted: zero false rejections. Only max_tokens >= max_model_len is
// refused uncounted: a prompt vLLM accepts is at least one token, so it
// can never fit.
//
// # The queue
//
// Pool is one model's admission queue in front of its backends, its slots,
// each named by its backend (host:port): SetSlots adds, updates and removes
// them at runtime, keeping the state (leases, gauges, failures, ejection)
// of those that stay; a removed slot gets nothing new and its leases still
// release; Idle tells a draining backend's caller when none is out. Close
// answers a removed model's waiting requests (ModelRemoved). A request
// (a Ticket: its token reservation, class and prefix hash) is granted a
// backend (a Lease) when one has room in requests in flight, in its token
// budget (KV capacity from cache_config_info, or kv_tokens) and by its
// scraped saturation; otherwise it waits within its priority class,
// bounded in number (QueueFull) and time (QueueTimeout), and leaves at once
// when its client does (ClientGone). Within a class the model's Fairness
// decides the order: FIFO, or Tokens: the requests wait per flow (the
// Ticket's Flow, an API key's name), each flow's own in arrival order, and
// a grant goes to the flow with the least virtual token counter (its
// weighted token service over its Weight) whose head fits a backend, so a
// flow whose head fits nowhere does not idle a backend another's would
// fill; a flow becoming active is lifted to the least counter of the
// active ones (VTC). The input is charged at the grant (Ticket.Prompt),
// the output as it streams (Lease.Charge), both corrected to the usage at
// the end (Lease.SettleInput, SettleOutput); SyncFlows shares the flows'
// service with other replicas through a FlowSync (package store), and
// their claims (each replica's active flows and counters, the service
// the counters counted, how long each flow's first request has waited):
// a grant is held back, for at most the hold SyncFlows is given, while
// another replica has a flow waiting whose counter there (plus the
// service this replica knows of that the claim had not counted) is lower
// than the granted flow's by more than the largest weighted prompt
// granted, or a request of the granted flow itself that has waited
// longer there (by flowOrderSlack); a grant being confirmed in the
// Shared account counts as waiting (pool_fair_confirm.go); a flow waiting
// on another replica keeps its lag there rather than being lifted, and
// a request the Shared account refused goes back without a lift.
// Routing is power of two choices on outstanding tokens (past 16 slots
// the two are drawn at random among the slots that can take the request
// instead of listing them: a grant costs the same at 512 backends as at
// 8; pool_select.go), or prefix affinity by consistent hashing with a load
// bound; backends failing EjectAfter times in a row are ejected for
// EjectFor, at most MaxEjectionPercent of the ready ones at once (at least
// one) and never the last ready backend in rotation: an ejection that would
// leave none ends at once. OnEvent hears every ejection, its end, an
// ejection held back by that bound, and gauges-state changes, so none is
// silent. Blocked says what holds the backends back when a request timed
// out. Advice turns the observed release rate into Retry-After while it
// is recent (the last release within twice the mean gap), else the
// capacity (requests running, the mean time a lease is held), and caps it
// at QueueTimeout.
//
// The pool's files, by concept: pool.go the type, its config and
// lifecycle (NewPool, SetSlots, SetConfig, Kick, Drain, Close, Flush);
// pool_queue.go the queue (Ticket, Lease, Outcome, Acquire, the FIFO
// classes, Release); pool_fair.go the Tokens fairness (flows, their
// counters, the grant among them, Lease.Charge and Settle);
// pool_fair_sync.go the flows' service shared between replicas;
// pool_fair_confirm.go a flow's grants in confirmation; pool_select.go the choice of a backend (eligible,
// fits, power of two choices); pool_affinity.go the prefix-affinity ring;
// pool_eject.go outlier ejection and its bound; pool_gauges.go the scraped
// gauges and their states; pool_shared.go the pool's side of the Shared
// account (confirm, SharedFreed, SharedRecheck); pool_advice.go the drain
// rate and Advice; pool_events.go the events and their delivery after
// the lock; pool_stats.go Stats and Blocked; pool_prefix.go the precise
// pick (routing: precise): a ticket with a PrefixMatcher goes to the
// candidate maximizing Cache x cached share of the prompt - Load x load,
// or, when the matcher cannot answer for every candidate or none holds
// any of the prompt, as without (affinity, power of two choices), the
// fallback counted by its reason (PoolStats.PreciseFallbacks).
//
// A backend's gauges are fresh (checked against the saturation levels),
// stale when the last good scrape is older than StaleAfter (held back: a
// scrape missed under load says nothing good), or unavailable when scrapes
// fail and never succeeded, or UnreadableScrapes answers in a row could
// not be read (an error status, not vLLM's page), or they have failed for
// GaugesUnavailableAfter whatever the error: unavailable gauges are not
// checked, and the backend is admitted on its in-flight and token-budget
// limits alone, rather than held back for ever. StaleAfter and
// GaugesUnavailableAfter are set for PoolConfig.ScrapeInterval; a backend
// scraped less often (a large fleet past its scrape budget: Gauges.Every)
// has both grown by the same factor, so gauges read on the longer
// interval are not stale between their scrapes.
//
// Replicas of the gateway share each backend's limits through a Shared
// account (shared.go; package store keeps it in Redis or Valkey). The
// pool still picks locally, under its lock; the pick is then confirmed in
// the account outside the lock. A backend the account refuses (its room
// held by other replicas) is not picked again until SharedFreed (another
// replica released on it) or SharedRecheck (the store's heartbeat, or a
// change in its standing), and the request goes back to the head of its
// class. While the account cannot be reached (or settles after coming
// back: SharedState.Settling), the pool admits on its allowance, or, with
// RejectWhenStoreDown, refuses with StoreDown: for a backend's
// max_in_flight the room this replica held there at the account's last
// answer (Shared.Seen) plus its even share of the room nobody held, so the
// replicas together stay within the limit (downMaxIn); for the token
// budget, and a backend never answered about, its share of the limit (the
// limit divided by the live replicas last counted, at least 1).
//
// Reasons, Uncounted and Outcomes are small closed enums that double as
// metric labels. CountRejection is the one mapping from a tokenizer's
// error to a rejection, shared by the door and the gateway's /tokenize. The package imports no HTTP: statuses are plain numbers.
//
// # Concurrency
//
// A Door holds only its Catalog and is safe for concurrent use; the
// tokenizers it calls are too. A Pool guards its queue and slots with one
// mutex; waiters block on their own channel (and their context's), never
// under the lock; a waiter's queue_timeout is a callback timer that takes
// it out of the queue under the lock and wakes it (pool_queue.go: expire).
// A waiter parks in Acquire itself, so that the frames above it fit a
// goroutine's first stack.
package admission
