// Package gateway is maitred's HTTP edge: the chi router, the handlers, the
// reverse proxy with SSE streaming, and the one place where errors become
// responses.
//
// # Model
//
// Every endpoint is one spec in one list (endpointList, endpoints.go): its
// paths and methods, the listener(s) it is on, its error envelope, whether
// it needs an API key, its handler (a model API's api value for the
// shared pipeline, or a local handler), its gen_ai operation name for
// tracing, whether triage observes it, whether its access-log line is
// quiet, and whether vLLM serves the same path. The router (routes) is a
// loop over that list; tracing, triage and the access log read a
// request's spec by its endpoint label (specOf); nothing compares
// endpoint names or paths (internal/archtest TestNoEndpointComparisons),
// every route has a spec and every vLLM spec a simulator route (the
// tests in endpoints_test.go).
//
// Every route is a handlerFunc wrapped by serve, the edge adapter. A handler
// either writes its success itself (the proxy streams the backend's answer
// straight to the client) or returns an error; serve renders a returned
// *Error in the route's error envelope (OpenAI's; Anthropic's for
// /v1/messages, anthropic.go), assigns the X-Request-Id, and writes the one
// access-log line and the request metrics. Nothing else in maitred writes an
// HTTP response. A failure is named where it is built, by its row of the
// failure table (failures.go: code, the client's wire code, HTTP status,
// layer, whether another backend may take the request, envelope type),
// which holds every failure the gateway produces, door, queue, quota,
// store, backend and client alike: an *Error carries its outcome (a door
// rejection's is its admission.Reason) and the layer where the request
// stopped. When the request ends, conclude (result.go) turns it into one
// Result (status, code, layer, usage, phases, retries); the first failure
// recorded stands, and the access log, the request metrics, the span and
// the triage sample are all written from that Result, so they name a
// request alike (TestFailureTableVocabulary checks every row).
//
// # One request's chain
//
// listenerHandler (routes.go: the framing check; a route without a
// parameter, every model API's, from a table of its own, the others
// from chi) -> serveIn (serve.go: the edge; begin, and wrapUp or
// recovered at the end) -> pipeline (pipeline.go: the API key, keyIn;
// admit reads the body, runs the door and takes the key's limits,
// leaving the ticket and its holds in x.q; waitTurn, queue.go, waits in
// the model's queue for the first lease; unqueue gives them back, and
// keyOut) -> queueAndForward (attempt.go: granted takes that lease, or
// waits again for a retry, tried applies the retry rule, retry.go) -> try (one
// attempt at one backend, holding the lease and the backend's in-flight
// count: its timers, startAttempt/endAttempt) -> the relay
// (proxy_relay.go: sendHead, copyAnswer, bodyRelayed; how it ended is the
// attempt's a.res) -> back up to serveIn, which concludes the request
// (finish, conclude). The work before and after the relay runs in calls
// of its own, so that the frames live while an answer streams are small
// (under a quarter of 16 KiB with net/http's over h2c: the runtime then
// halves an open stream's handler stack to 8 KiB;
// TestOpenStreamHandlerStackIsShallow). The request value (exchange.request) holds what was
// decided up to the door and is only read after it; the edge's per-request
// bookkeeping (phase stamps, how the client took the answer, the body
// budget and the key's reservation) is exchange.requestState; each try at
// a backend is an attempt of its own, with its own clock. "settle" means
// quota settlement only (limits.go).
//
// Below the router, Gateway.Listener wraps the client listener: it caps
// open connections (max_connections) and follows each connection's byte
// stream with a framing scanner (conn.go), because net/http drops the
// Content-Length of a request that also says Transfer-Encoding and a
// handler could not otherwise refuse such a request. With h2c the server
// (Gateway.Server) also takes HTTP/2 cleartext with prior knowledge on the
// same listener (net/http's own HTTP/2 server; it never honours Upgrade:
// h2c); the scanner stops at HTTP/2's preface, whose frames carry their
// own lengths, and each HTTP/2 stream is a request like any other: the
// backend is reached over HTTP/1.1 either way. A request body is
// read into a buffer that grows with the bytes received (never a declared
// length), within read_body_timeout and the gateway-wide body budget
// (max_body_bytes_in_flight), held until serve ends the request.
//
// The model APIs (every spec with a door: chat, completions, embeddings,
// /pooling, /classify, score, rerank, Responses, Anthropic's /v1/messages,
// ...; endpointList has them all) share one pipeline,
// pipeline (pipeline.go), and differ only by their spec's api value: how the
// body is read (readJSON), which admission.Endpoint (the door's spec of
// the API) the door checks it as (how the model is found, the input
// checked and counted, the output it requests: none for the pooling
// families; the decision names the spec it checked the request as, whose
// properties the reservation, the ticket, affinity and the tokenizer check
// read), the envelope the gateway's own errors are written in
// (openAIErrors, anthropicErrors), how its stream ends (streamShape: data
// [DONE], Anthropic's message_stop, a Responses stream's
// response.completed), and whether prefix affinity (a Messages request
// hashed as the chat conversation the door converted it to) and the
// sampled tokenizer check apply. Each endpoint is one entry of the spec
// list. The audio APIs (transcriptions, translations; audio.go) read a
// multipart upload instead (readUpload): never held in memory, it is read
// whole into a temporary file (the spool) before it takes a backend slot,
// within max_audio_body_bytes, read_audio_body_timeout and the body budget
// (the spool's bytes count in max_body_bytes_in_flight), so a client that
// drips its upload holds no backend. Its form is read strictly as it
// arrives (multipart.go), every part to the last, as vLLM's
// python-multipart reads it: a second `model` field, or anything the two
// parsers could read differently (a repeated or RFC 2231 Content-Disposition
// parameter, a second Content-Disposition, a malformed part header, a
// padded boundary, a charset other than UTF-8), is refused 400
// invalid_form before any backend. The `model` and small fields are checked
// by the door's CheckForm, and the spool, the client's own bytes, is
// forwarded with its length and read again for another backend when the
// first could not be connected to. GET /v1/responses/{id} and its cancel (responses.go)
// name no model: they go to the backend that holds the id. A create's
// answer names the id (its usage meter sees it before the client does):
// id -> (key name, model, backend) is recorded in a bounded table and, with
// a shared store, in the store (admission.ResponseOwners). With API keys
// only the creating key's requests by id reach that backend; any other id
// gets vLLM's unknown-id 404 from the gateway, no backend asked. Without
// keys an unrecorded id is found by asking every ready backend at once.
//
// A JSON request is read once (within max_body_bytes) and goes
// through the door (admission.Door: strict parse, shape, chat template,
// exact context check; chat counts go through the count cache,
// count_cache_bytes, countcache.go, which a reload keeps; with routing:
// precise a chat's count also keys its prompt's blocks as the model's
// index does, a later turn keying only its new tail, and those keys, in
// pooled buffers, are the ticket's prefix matcher, prefix.go; other
// requests' renders are tokenized and keyed there; while requests are
// queued the steps before the queue, the body's reading and the door
// with them, and a traced request's trace's beginning (the sampler's
// calls), run on a goroutine of their own, admitAside in pipeline.go,
// so that a handler that then parks does not keep the stack they grew:
// it parks on the 4 KiB it started with, traced or not), then waits in
// its model's admission.Pool for a backend with room, and its original bytes are forwarded unchanged by
// the gateway's own reverse proxy (the relay, proxy_relay.go: sendHead, copyAnswer, bodyRelayed; one request value
// built per attempt, the body the door read sent with its headers in one
// write, each write to the client flushed; the body is let go once an
// answer's headers came, so an open stream holds no copy of its request,
// nor, unless it was sampled for the tokenizer check, its decision). GET /version (to a ready
// backend that answered /version at its warm-up, of any model; version.go)
// and the uncountable /tokenize pass through to a ready backend outside
// the queue (passthrough.go). A
// connection failure before anything reached a backend goes back to the
// pool for another one (the retry rule, retry.go: retryable, neverSent). The proxy drops hop-by-hop headers both ways, drops
// the client's Authorization and cookies and its X-Forwarded-* claims (it
// states the hop it saw), and sends the backend's own key; two
// differential fuzz targets hold both directions' headers to what
// httputil.ReverseProxy sends, less those deliberate drops. A request sent
// on a reused keep-alive connection that ends before the answer's first
// byte is taken as never sent (the backend closed it as the request went
// out) and may go to another backend. Requests to http:// backends go
// through maitred's own HTTP/1.1 client (internal/upstream, built by
// NewTransport): the request is written and its answer read on the
// handler's goroutine, so an open stream is its handler and its socket,
// with no goroutine of the connection's; https backends go through
// net/http's transport.
// Backend answers, errors included, pass through byte for byte. A streaming
// answer is wrapped in a streamGuard that passes each complete SSE event on
// at once (the proxy flushes every write) and, if the backend stream ends
// without its family's last event (data exactly [DONE]; for Anthropic
// Messages event: message_stop or vLLM's event: error), ends the client's
// stream with the family's error event (data: {"error": ...}; Anthropic's
// event: error) naming why (backend_disconnected, backend_stalled,
// server_shutting_down) and nothing after it, then fails the copy, and the
// proxy aborts the response as it does a short body: no [DONE] or
// message_stop, no terminating chunk (HTTP/1.1 closes the connection,
// HTTP/2 resets the stream), so that a client reading only the text sees
// a failure too. Its idle clock runs only while it
// waits on the backend for a complete event. An open stream waiting for
// its next event holds no relay buffer: the guard waits for the backend's
// next byte with none and the copy gives its own back first (awaitData);
// both buffers are pooled and taken while an event passes through. Any other answer is wrapped in
// a bodyGuard that bounds each read the same way and aborts the client's
// connection when the body stalls or ends short. Each write to the client
// gets stream_idle_timeout too: a client that stops reading ends its own
// request (499 client_stalled), never counted against the backend. A
// stream's bound is a timer of the request's own (recorder, serve.go),
// not a write deadline set per write: over HTTP/2 each deadline is a
// message to the connection's serve goroutine, and every event would
// pay it; any other answer's writes set their deadline.
//
// A cut answer travels back from the relay as the attempt's result (errAnswerCut),
// and serveIn, after concluding the request, raises http.ErrAbortHandler,
// the one panic net/http takes to drop a connection; nothing else in the
// gateway panics for control flow. The SSE guard is proxy_sse.go.
//
// Each attempt's answer also passes through its usageMeter (proxy_usage.go) on
// the way to the client: it keeps nothing of the answer but the usage
// it reports (a non-streamed answer's top-level "usage", found by a
// scanner, which also keeps its top-level "model"; a stream's usage
// events, read by the family's streamShape.meter) and the streamed text
// not yet counted, in bounded pieces. Every stream event of the shapes
// vLLM sends (an OpenAI chat, completions or audio chunk; a Responses
// event; an Anthropic Messages event), and a usage object that is an
// object of integers or null beside members of any value, is read in one
// pass without allocating by one parser (proxy_usage_parse.go; each
// family's objects in proxy_usage_chunk.go and proxy_usage_events.go,
// the usage object's in proxy_usage_decode.go), exactly as encoding/json
// reads it into the family's struct. Anything else (a member named twice
// or only under case folding, an escaped or non-ASCII member name, a
// member of another type, an escaped event type, a fractional or
// overflowing count, too many texts or too deep a value, invalid JSON)
// is read by encoding/json, the fallback and the reference the tests
// and fuzz targets hold the parser to. It is the one reader of an
// answer's usage: the quota, the access log and the trace read it.
// exchange.used is the request's prompt + completion tokens at
// its end: the reported usage, else the door's prompt count and the
// streamed text counted with the model's tokenizer (what was streamed,
// for a stream cut short); the access log's used_tokens.
//
// With an auth section, every model API route (the families and the
// local handlers that read a model: tokenizer endpoints, render,
// /v1/models, /version, Responses by id, owned by the key that created
// the response) runs behind keyed (keys.go; the model pipeline checks
// its key itself, with the same keyIn and keyOut, one frame fewer under
// a request that waits): the
// key is found by the SHA-256 digest of what the client presents, in a
// table swapped atomically when the keys_file changes (WatchKeys,
// keys_watch.go; the table is built off the request path from the
// config.KeySet the file is read into, a slice of small keys sharing
// profiles of models, priority, limits and weight, indexed by digest (the
// set's index, taken over), the reading yielding every
// config.KeyYieldEvery keys; a JSON
// keys_file read while it is written is read again at the next poll
// rather than parsed), and the
// request carries its *apiKey from then on. A key's allow-list is the
// door's catalog as the key sees it (keyCatalog), so a model it may not
// use is answered with the unknown model's very 404, before any counting.
// After the door, a keyed request reserves its tokens against its key's
// limits (limits.go, package quota) before it queues, and settles with
// exchange.used when it ends; a keyed local handler takes one request
// and one concurrency slot of the key's request limits before it reads
// its body (reserveLocal: no tokens, nothing is generated); every answer
// to it carries OpenAI's x-ratelimit-* headers. The probes need no key.
// /metrics, /debug/* and the status page name every tenant, so they are the admin listener's
// (AdminHandler, ServeAdmin: config admin_listen) and answer 404 on the API
// listener; an open gateway without admin_listen serves them on its one
// listener, one with auth and no admin_listen nowhere (routes,
// adminOnAPI). /readyz gives its models' and backends' detail only where
// the admin pages are served.
//
// Tokenizer endpoints are answered locally, never queued (they hold no
// KV): POST /tokenize (tokenize.go), POST /detokenize (detokenize.go:
// tokenize.Model.Detokenize), the render endpoints (render.go: the
// door's checks and ids, vLLM's GenerateRequest) and Anthropic's POST
// /v1/messages/count_tokens (anthropic.go: the door's Messages count).
// Their work is bounded (localwork.go): per request by the door's rules
// (/tokenize counts a prompt against max_model_len with the door's early
// stop and byte bounds before it builds ids, and refuses one over it, as
// vLLM's renderer does; /detokenize takes at most max_model_len ids of
// the model's vocabulary and parses no more values than the longest
// context's ids need), and at once by a gate of one running request per
// core (GOMAXPROCS) with a small waiting room, past which it answers 429
// queue_full. Token ids anywhere (the door's prompts and inputs,
// /detokenize) are held to the model's vocabulary size
// (tokenize.Model.VocabSize, admission.TokenIDError).
// What the gateway cannot reproduce exactly goes to a ready backend of the model at once, outside
// the queue, avoiding ejected backends (forwardOutsideQueue, passthrough.go).
//
// A model whose chat template did not compile (tokenize.Model.
// TemplateProblems: the model still loads) is served uncounted: its chat
// requests are not exact at the door and forwarded; each runtime build
// logs a warning naming the template's line and the reason, and the
// runtime keeps why (modelRuntime.uncounted), which maitred_model_uncounted
// (read from the runtimes in force at scrape time), /debug/backends and
// the status page show.
//
// Under a model's fairness: tokens (fairness.go) a keyed request's ticket
// names its flow (the key's name) and weight; the pool charges the flow
// the prompt at the grant, the attempt charges each streamed event as
// output (clockEvents) and, before the lease goes back, settles both to
// the answer's usage (settleFlow). The access line names the flow; the
// flows' shares are exported (maitred_flow_*), listed in /debug/fairness
// and on the status page. With a shared store each model's flows'
// service is synced with the other replicas (syncFlows).
//
// A request's model name is resolved once (catalog.resolve, runtime.go),
// by the door or by a tokenizer endpoint: a configured model, or else a
// LoRA adapter that some of a configured model's ready backends list
// (fleet.Backend.Adapters). An adapter resolves to its base model's
// runtime (tokenizer, max_model_len, limits, queue, metric label) and the
// slots of those backends (admission.Model.Only, carried by the Decision
// into the Ticket's Only and the exchange), the only ones the pool grants
// or a pass-through picks. A configured name wins over an adapter's. A
// backend's 404 to an adapter request passes through and asks the fleet
// to list that backend's adapters again at once. /v1/load_lora_adapter
// and /v1/unload_lora_adapter are not served: an operator loads adapters
// on each backend; maitred follows.
//
// Tracing (tracing.go) is off unless Options.Tracing is set; the gateway
// touches no OpenTelemetry global. On, every request on every route but
// /metrics is traced (serve marks it): its trace (telemetry.Trace) begins
// in admit, aside with it while requests are queued, or at its first use
// on a route without one, its SERVER span starting at the request's
// arrival, the child of a valid incoming traceparent; the pipeline adds
// the door's span (from the phase clock, when the request ends), each
// queue wait and each attempt's CLIENT span; the proxy sends the
// attempt's context to the backend in traceparent and tracestate, so
// vLLM's span is the attempt's child. The GenAI token attributes are the
// attempt's usageMeter's (usageMeter.parts: reported, else counted, said
// by maitred.usage.from). Off, a client's traceparent passes through
// untouched. Spans carry no prompt or completion text and no key:
// maitred.key is the key's configured name. A trace is plain data the
// request's goroutine fills (attributes once, at each span's end) and
// hands to the provider whole when the request ends; an unsampled trace
// records no attributes, but its context still goes to the backend,
// flagged unsampled.
//
// Each request carries a phase clock (phases.go: read, door, queue,
// connect, prefill, decode, tail) whose phases add up to its duration; they go to the access
// log, maitred_phase_seconds, Server-Timing and the triage engine, with the
// layer where a failed request stopped. Serve owns the drain timeline:
// readiness fails at once, new requests are served for drain_delay, then
// in-flight work gets drain_timeout before it is ended on purpose.
//
// The config in force is one state (reload.go): the config and the
// models' runtimes, catalog and door built from it, swapped whole by
// Reload (SIGHUP or the config file changing; cmd/maitred). A request
// reads it where it needs it and keeps the runtime its door found; a
// model that stays keeps its pool and fleet model across reloads; a
// removed model's queue is closed (its waiting requests get 404). A
// model's pool follows its fleet backends as they join and leave
// (OnMembers), and a draining backend is forgotten only when the pool has
// no lease out on it (HoldDrain). Settings that need a restart keep their
// running values and are logged.
//
// # Concurrency
//
// A Gateway is immutable after New except for its config state (atomic,
// reload.go), its lifecycle phase (atomic),
// its pools and triage engine (each with its own lock), its body budget
// (atomic) and its metrics; a framedConn's scanner runs in net/http's reads
// of that connection, one at a time, and hands its verdict to the handler
// through atomics;
// each request's state lives in its exchange (the request's scope) and each
// try at a backend in an attempt (and its span), both owned by the request's goroutine and
// read by the proxy hooks of that same request; the timers that cancel an
// upstream request only set the attempt's atomic flags and cancel. A
// model's runtime (pool, tokenizer, timeouts, metric children) is built in
// New and again at each Reload; the door's verdict carries it back (the
// runtime is admission.Model.Ref, an admission.Runtime: no table of
// runtimes, no lock) and the request carries it. The
// adapters a lookup reads are the fleet's, read under each backend's lock. A
// client that disconnects cancels the request context, which cancels the
// backend request, so vLLM aborts it and frees its KV cache.
package gateway
