// Package sim is a simulated vLLM OpenAI-compatible server. It exists so
// that maitred's gateway, its end-to-end tests and load tests can run
// against something that behaves like `vllm serve` on the wire, without a
// GPU. It is a test double: fast, deterministic, and steerable at runtime.
//
// # Surface
//
//   - GET /health (200 empty body; 503 when FailHealth or shutting down),
//     GET|POST /ping, GET /version, GET /metrics.
//   - GET /v1/models: one vLLM ModelCard (owned_by "vllm", root, parent null,
//     max_model_len, permission list), then one per loaded LoRA adapter
//     (root its path, parent the served model, max_model_len null).
//   - LoRA adapters (lora.go): Config.LoRAModules are loaded at start, as
//     --lora-modules; a request naming one is served under its name (the
//     answer's model), a name not loaded gets vLLM's 404. With RuntimeLoRA
//     (VLLM_ALLOW_RUNTIME_LORA_UPDATING), POST /v1/load_lora_adapter
//     {lora_name, lora_path, load_inplace} and /v1/unload_lora_adapter
//     {lora_name} answer 200 with vLLM's plain-text "Success: LoRA adapter
//     '<name>' added|removed successfully." (no Content-Type), 400
//     InvalidUserInput for an empty field or an adapter already loaded, 404
//     NotFoundError for unloading one that is not; without it they are
//     unknown paths.
//   - POST /v1/chat/completions and /v1/completions, streaming and not.
//   - POST /tokenize (chat or prompt form) -> {count, max_model_len, tokens,
//     token_strs: null}; POST /detokenize {tokens} -> {prompt} with
//     Config.Detokenizer (LoadVocabDecoder: a tokenizer.json's vocabulary
//     and decoder) or Approx's approximate decoding; 501 for a Tokenizer
//     that cannot decode.
//   - Pooling (pooling.go; requests read as vLLM's protocol classes in
//     pooling_protocol.go, prompts built in pooling_prompts.go): POST
//     /v1/embeddings (input: a string, strings, token ids or lists of ids,
//     or a list mixing strings and id lists; or the chat form, messages or
//     input holding messages, one conversation or a batch; encoding_format float or base64, little-endian float32;
//     dimensions only with Config.Matryoshka; truncate_prompt_tokens and
//     truncation_side), /pooling (task embed, classify, token_embed,
//     token_classify), /classify (two classes, LABEL_0 and LABEL_1),
//     /score and /v1/score (text_1/text_2, data_1/data_2, queries/documents
//     or queries/items, 1:1, 1:N or N:N), /rerank, /v1/rerank and /v2/rerank
//     (query, documents, top_n; results by relevance, highest first).
//     Vectors (EmbeddingDim long, unit norm) and scores in (0, 1) are
//     deterministic: seeded by the prompt's token ids when the Tokenizer
//     gives ids (a text and its ids agree), else by its bytes. Inputs longer
//     than MaxModelLen get vLLM's pooling text ("... you requested {P}
//     tokens in the input for embedding generation|score|classification.
//     Please reduce the length of the input.", param null).
//   - Render (render.go, modelled on vLLM's ServingRender, vLLM >= 0.18):
//     POST /v1/chat/completions/render (one object) and
//     /v1/completions/render (an array, one per prompt): vLLM's
//     GenerateRequest {request_id "chatcmpl-…"/"cmpl-…", token_ids,
//     features null, sampling_params, model (as sent, or null), stream,
//     stream_options, cache_salt, priority, kv_transfer_params null}. The
//     request is validated as a generation request (pydantic's field checks,
//     cache_salt's validator, then the model), tokenized and length-checked;
//     token_ids are exactly /tokenize's ids. sampling_params is vLLM's
//     SamplingParams (render_sampling.go: to_sampling_params, __post_init__'s
//     greedy reset of top_p/top_k/min_p and a stop string made a list),
//     serialized as msgspec's omit_defaults does: only fields off their
//     default, so max_tokens is absent when the computed budget is 16;
//     output_kind is 1 (stream) or 2 and skip_clone true; floats as Python's
//     repr writes them. A Tokenizer without ids answers 501. Render is not
//     queued and not in Stats.
//   - POST /invocations (SageMaker; invocations.go): served as the first
//     request type the body has the fields of, in vLLM's order (chat,
//     completion, embedding, classification, score, rerank, pooling);
//     none: 400 "Cannot find suitable handler for request".
//   - POST /v1/responses (OpenAI Responses API, streaming and not, background
//     mode), GET /v1/responses/{id} (?stream=true&starting_after=N replays a
//     background stream), POST /v1/responses/{id}/cancel (responses.go).
//     Responses are stored in this server's memory, as vLLM does with
//     VLLM_ENABLE_RESPONSES_API_STORE=1 (NoResponsesStore: as without it);
//     HasResponse and Stats.StoredResponses tell which server holds an id.
//     Files: responses_request.go (the request and its conversation),
//     responses_store.go, responses_wire.go, responses_stream.go (events),
//     responses_background.go (background runs and replay),
//     responses_retrieve.go (GET and cancel).
//   - POST /v1/messages (Anthropic Messages, streaming and not) and
//     POST /v1/messages/count_tokens -> {input_tokens, context_management}
//     (messages.go).
//   - POST /v1/audio/transcriptions and /v1/audio/translations
//     (multipart/form-data; json, text, verbose_json; streaming chunks)
//     (audio.go).
//   - Accounting: Config.OnProcessed hears every batch of tokens the
//     engine processes (a prompt at its prefill, each decode step's
//     tokens, a pooling request's inputs), timestamped by Config.Clock.
//   - Trace context: like vLLM, every request's W3C traceparent and
//     tracestate are read (ParseTraceContext; an invalid traceparent is
//     ignored, as vLLM's propagator ignores it). No span is exported; the
//     parsed context is recorded with the request (Received.Trace).
//   - Simulator-only: GET|POST /sim/config (JSON knobs, see Knobs) and
//     GET /sim/stats (Stats as JSON). They need no API key.
//
// # Written from vLLM, not from the gateway
//
// The simulator is the gateway's test partner, so it shares no logic with
// it: its production code imports neither gateway nor admission
// (TestSimulatorImportsNoGatewayLogic), and its render and pooling parsing
// are written from vLLM's own structure. Differential tests in package
// gateway (sim_differential_test.go, with fuzz targets) hold the two to
// the same verdicts and results.
//
// # Model of the engine
//
// A completion request is validated the way vLLM validates it (request.go;
// the field checks the readers share are in pydantic.go), in vLLM's order: content type, JSON and field types (pydantic's 400 "Bad Request"),
// stream_options without stream, the model name (404 NotFoundError), then
// FailStatus, then prompt counting and the renderer's length checks
// (max_tokens > max_model_len; prompt + requested output > max_model_len
// with the post-2026-03 "at least" wording), then SamplingParams checks (n,
// greedy n > 1, temperature, max_tokens >= 1, min_tokens). Streaming
// responses send 200 and headers right after validation.
//
// Pooling requests follow the same order (content type, pydantic, model,
// FailStatus, truncate_prompt_tokens > max_model_len, dimensions, counting
// and length), then queue like a generation taking one running slot per
// prompt (vLLM schedules each prompt as an engine request) and the KV space
// of all their tokens, wait one prefill (TTFT and one TokenGate value) and
// answer; vllm:prompt_tokens_total, the e2e, queue and prompt-token
// histograms and request_success_total{finished_reason="stop"} count them
// per prompt. Hang, FailStatus, disconnects and shutdown act on them as on
// generation requests.
//
// A valid request then enters a FIFO waiting queue. It is admitted when
// fewer than MaxNumSeqs requests run and its prompt fits in the free KV
// space (KVTokens minus the prompt and generated tokens of running requests),
// or unconditionally when nothing runs. Once admitted it waits TTFT (the
// prefill), emits its first token, and then one token per ITL; all n choices
// of a request advance in lockstep, one step per token. The answer is
// OutputTokens tokens long ("stop"), or shorter when the budget —
// max_completion_tokens, else max_tokens (completions default 16), else
// max_model_len - prompt — is smaller ("length"); ignore_eos generates the
// whole budget and min_tokens lengthens the answer. Token i of choice j is
// the word words[(i+j) mod 19] of a lorem-ipsum list (see GeneratedText).
//
// Prompts are counted by Config.Tokenizer, or by Approx, a documented
// approximate counter that the gateway can reuse to predict counts.
//
// Responses, Messages and audio requests go through the same engine (job in
// engine.go: queue, KV admission, TTFT/ITL, TokenGate, metrics, Hang,
// FailStatus, CutAfterChunks, disconnect and shutdown aborts) with one
// sequence each. A Responses input (instructions, the previous response's
// conversation, then the input string or message items) and a Messages
// request (system first, converted as vLLM converts it to a chat request)
// are counted through the chat template like chat. Responses run the
// renderer's checks with max_output_tokens, then vLLM's "The engine prompt
// length N exceeds the max_model_len L" check; Messages run chat's checks
// with max_tokens = max_completion_tokens = the Anthropic max_tokens. Audio
// is a Whisper-like model: the upload is hashed as it streams in (never
// held), the transcript is the lorem text starting at word hash mod 19, the
// audio lasts size/32000 s (usage.seconds rounds it up), the decoder prompt
// is 4 tokens plus the text prompt, and files over 25 MiB are refused as
// vLLM's VLLM_MAX_AUDIO_CLIP_FILESIZE_MB does.
//
// Error envelopes follow vLLM per endpoint. Messages answers request
// validation (pydantic, content type) in the OpenAI envelope and handler
// errors in Anthropic's {"type":"error","error":{"type","message"}} with
// vLLM's error class as the type ("NotFoundError", "BadRequestError"), as
// vLLM does today (vLLM issue #57997). Responses lookups answer 404
// "Response with id '…' not found." (type invalid_request_error); cancel
// works on queued background responses only ("Cannot cancel a synchronous
// response." otherwise) and waits for the job to stop. Audio refuses a body
// without a file part (any non-multipart body) with pydantic's missing-field
// 400 and a `file` text field with 422.
//
// # Prefix cache and KV events
//
// With Config.PrefixCaching each server models vLLM's automatic prefix
// caching (prefix_cache.go; prompts' ids and hashes in prefix_request.go):
//
//   - Blocks: a chat or completions prompt's token ids (the Tokenizer's
//     ChatTokenIDer / CompletionTokenIDer ids, which /tokenize returns, or a
//     prompt given as ids) are cut into full blocks of Config.BlockSize
//     (default 16) tokens, each keyed by the simulator's own chained hash:
//     sha256 of the parent block's hash (a seeded "none" hash for the first
//     block; Config.HashSeed, random when empty, as PYTHONHASHSEED), a tag,
//     the LoRA adapter's name, the request's cache_salt (first block only)
//     and the token ids as 8-byte big-endian integers. It shares nothing
//     with the gateway's hashing.
//   - Lookup, at admission (under the scheduler's lock): the leading blocks
//     found are hits, at most the prompt's length minus one token (vLLM
//     always computes the last token); the prompt's other full blocks are
//     then stored. Hits count in vllm:prefix_cache_hits_total, every prompt
//     token in vllm:prefix_cache_queries_total (registered only with
//     PrefixCaching).
//   - Capacity and eviction: the KV capacity in blocks, KVTokens/BlockSize
//     (also cache_config_info's num_gpu_blocks), holds the cached blocks
//     plus what running requests hold outside them (partial last blocks,
//     generated tokens). Blocks referenced by running requests stay; the
//     others are evicted least recently released first, a request's blocks
//     released tail first (as vLLM frees them). Generated tokens are not
//     cached; admission itself stays token-granular (see Model of the
//     engine).
//   - Timing: the first token comes TTFT + PrefillPerToken × (prompt tokens
//     − cached tokens) after admission, for every generation (Responses,
//     Messages and audio are not looked up: all their tokens are uncached).
//     With PromptTokensDetails (vLLM's --enable-prompt-tokens-details),
//     usage.prompt_tokens_details is {"cached_tokens": N} when N > 0.
//   - Prefill contention (Config.PrefillContention, off by default;
//     prefill.go): without it every request's prefill takes its own time,
//     so uncached tokens cost latency but never capacity. With it, each
//     server has one prefill engine that computes the uncached tokens
//     (PrefillPerToken each) of its requests first come first served: a
//     request's prefill starts when the prefills booked before it on that
//     server are done, then the fixed TTFT follows. This is what vLLM's
//     V1 scheduler does with chunked prefill: every step has a token
//     budget (max_num_batched_tokens), the running requests are walked in
//     order and each takes min(its remaining prompt tokens, the budget
//     left), so the oldest prefill gets the budget first and a later one
//     only what is left (long_prefill_token_threshold, 0 by default, would
//     share it more evenly). Cached tokens book nothing. A request given
//     up during its prefill returns the unused part when nothing was
//     booked after it. Decode steps do not take from the budget here (in
//     vLLM each running decode takes one token of it), and the fixed TTFT
//     and ITL are not slowed by concurrent prefills.
//   - POST /reset_prefix_cache (vLLM mounts it with VLLM_SERVER_DEV_MODE;
//     the simulator with PrefixCaching) empties the cache: 200 with no body,
//     or 409 "Prefix cache reset failed." while running requests hold
//     cached blocks unless ?reset_running_requests=true. ResetPrefixCache
//     and PrefixCacheBlocks are the Go forms.
//
// With Config.KVEvents too, every change is published as vLLM's KV events
// (kv_events.go; payload encoding in kv_events_wire.go): a ZeroMQ PUB
// socket sends [topic, seq (8 bytes big-endian, from 0), payload] per
// batch; one batch per admission that changed the cache (its BlockRemoved,
// one per evicted block, then one BlockStored per run of new blocks, with
// parent_block_hash, token_ids, block_size, lora_id, medium "GPU",
// lora_name), one per eviction caused by decode growth, one AllBlocksCleared
// per reset. Payloads are msgpack in vLLM main's map form (the tag under
// "type", defaulted fields omitted) or the older array form
// (KVEventsConfig.Encoding "array"); hashes are 32-byte bin values or
// (Hash "int") the unsigned 64-bit integer of their last 8 bytes. With a
// ReplayEndpoint a ROUTER socket answers ["", start_seq] with one ["", seq,
// payload] per buffered batch (the last BufferSteps) from start_seq on, then
// ["", -1 as 8 signed bytes, ""]. As in vLLM the PUB socket binds when its
// endpoint has "*", "::", ipc:// or inproc:// and connects otherwise, and a
// DataParallelRank r (the batches' data_parallel_rank) moves both ports by
// r.
//
// The Go API for tests: Run opens the sockets before it listens (a test
// serving Handler itself calls StartKVEvents); KVEventsEndpoints returns the
// dialable addresses ("tcp://127.0.0.1:<port>" for a wildcard bind, so
// "tcp://*:0" takes free ports); Close closes them. go-zeromq/zmq4 (v0.17)
// leaves each closed PUB socket's writer goroutine parked: goleak users
// ignore github.com/go-zeromq/zmq4.(*pubMWriter).run.
//
// # Streams
//
// Chat, completions and audio frames are "data: <json>\n\n", flushed one by
// one, then "data: [DONE]"; Responses and Messages streams are "event:
// <type>\ndata: <json>\n\n" pairs without [DONE]. Responses events carry
// sequence_number 0, 1, ... in vLLM's order (created, in_progress,
// output_item.added, content_part.added, output_text.delta per token,
// output_text.done, content_part.done, output_item.done, completed), with
// vLLM's content_index quirk (it advances after every event). Messages
// streams follow vLLM's converter of a chat stream: message_start (after
// prefill, with the first token), content_block_start, content_block_delta
// per token, content_block_stop, message_delta, message_stop; no ping.
// Chat streams begin with a {"role":"assistant","content":""} delta per
// choice, sent together with the first token as vLLM does (after prefill).
// A choice cut by its budget carries finish_reason "length" on its last
// token; a choice that stops gets a separate empty-delta chunk with
// finish_reason "stop". Final chunks carry "stop_reason": null. With
// stream_options (include_usage defaults to true once the object is
// present) a usage chunk with "choices": [] precedes [DONE];
// continuous_usage_stats adds cumulative usage to every chunk.
//
// # Faults and disconnects
//
// A client that goes away (request context cancelled, or a failed write) in
// any phase — hanging, waiting, prefill, decode — stops the request at once,
// frees its slot and KV space, and counts as Stats.Aborted,
// sim_aborted_requests_total and vllm:request_success_total{finished_reason
// ="abort"}. CutAfterChunks drops the connection after N content chunks
// (panic(http.ErrAbortHandler): no terminating chunk, no [DONE]). Hang
// blocks completion requests until the client leaves. FailStatus answers
// with vLLM's error envelope. Run's shutdown and Close abort what is left the
// way vLLM's --shutdown-timeout does: a 500 "Internal server error"
// GenerationError, or an in-band error frame plus [DONE] once a stream has
// started.
//
// # Concurrency
//
// One mutex guards the knobs, the scheduler and the counters; every request
// runs on its own net/http goroutine and blocks only on timers, the
// TokenGate, its admission channel, its context and the server's stop
// channel. A request takes a snapshot of the knobs when it arrives, so
// Update affects later requests (MaxNumSeqs and KVTokens also re-run the
// scheduler for the queue at once). Metrics live on a per-Server registry;
// the gauges are computed at scrape time under the same mutex, so /metrics
// and Stats agree.
//
// # Fidelity
//
// Faithful, per vLLM source as summarised in the project's wire notes: the
// nested error envelope with an integer code, the exact context-length,
// output-budget, unknown-model, sampling-parameter and 401 {"error":
// "Unauthorized"} texts (auth guards /v1* only, OPTIONS exempt), default
// budgets and max_completion_tokens precedence, stream framing and chunk
// fields, the usage chunk, /v1/models and /tokenize shapes, refusing
// connections while loading, 503 on /health for a dead engine, metric
// names, label sets (model_name, engine="0") and bucket boundaries.
//
// Approximate or missing:
//
//   - Token counts come from Approx unless a real Tokenizer is plugged in.
//   - pydantic validation messages imitate str(exc.errors()) but are not
//     byte-exact; the character-length pre-check (param input_text) and most
//     per-field range checks (top_p, penalties, logit_bias, stop) are absent.
//   - The EOS token is not counted in completion_tokens (vLLM counts it when
//     the model stops by itself), and the "stop" chunk follows the last
//     content chunk immediately rather than after another ITL.
//   - No preemption model: vllm:num_preemptions_total grows only through
//     Preempt (or "preempt" in POST /sim/config), and KVUsageFloor raises
//     the reported KV usage, so that the kv_pressure symptom can be shown.
//     Chunked prefill only as PrefillContention's first-come-first-served
//     engine (no per-step batching); KV usage and admission are token-, not
//     block-granular, and count a shared cached prefix once per request.
//     The prefix cache (off by default) caches prompt blocks only, not
//     generated ones; a reset with reset_running_requests drops the running
//     requests' blocks from the cache but lets them run on (vLLM preempts
//     them).
//   - Sampling parameters other than n, max_tokens, max_completion_tokens,
//     min_tokens, ignore_eos and temperature (for the greedy check) are
//     accepted and ignored: no stop strings, logprobs, tools, echo or
//     response_format; the text never depends on the prompt.
//   - Pooling: a text-only model; multimodal score/rerank inputs ({content:
//     [...]}) are refused as strings are required; an input list mixing
//     strings and token-id lists is served (vLLM's input union, as its
//     protocol reads, refuses it); score pairs are counted as
//     the query with special tokens followed by the document without;
//     truncation keeps the last tokens unless truncation_side is "right";
//     ids are "rerank-…" for rerank (vLLM's newest code uses "score-");
//     embed_dtype, endianness, use_activation, Cohere's /v2/embed and the
//     "bytes" encodings are absent.
//   - Render: sampling_params carries only the fields the simulator reads
//     or passes (n, penalties, temperature, top_p, top_k, min_p, seed,
//     stop, stop_token_ids, ignore_eos, max_tokens, min_tokens, output_kind,
//     skip_clone); a model's generation_config defaults are not modelled.
//   - Responses: text output only (no tools, reasoning items, logprobs or
//     harmony); the usage per-turn lists are empty; an input item that is
//     not a message, function call, function call output or reasoning item
//     is refused with an approximate pydantic message. Messages: ids are
//     vLLM's chat ids ("chatcmpl-…", not "msg_…"); stop_sequence is omitted
//     as vLLM's exclude_none drops it; tools, tool_choice and stop sequences
//     are accepted and ignored. Audio: no chunking of clips over 30 s, no
//     language validation, and a text response_format answers JSON as the
//     vLLM router does. A cancelled background stream ends its replay
//     (vLLM's waits forever).
//   - Only one served model name; LoRA adapters change only the name an
//     answer carries (no weights: any lora_path loads; no LoRA resolvers,
//     no max_loras limit); no sleep mode, /load
//     or X-Request-Id response header (an incoming X-Request-Id does become
//     the response id suffix, as in vLLM).
//   - The completions stream serialises chunks like the chat one
//     (exclude_unset style), which may differ from vLLM in null fields.
//   - vllm:cache_config_info carries a representative CacheConfig label
//     set, not vLLM's full and version-dependent one.
package sim
