package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Defaults applied by New and Update to zero-valued knobs.
const (
	DefaultModel        = "demo"
	DefaultMaxModelLen  = 4096
	DefaultOutputTokens = 16
	DefaultMaxNumSeqs   = 256
	DefaultKVTokens     = 65536
	DefaultVersion      = "0.11.0"
	DefaultEmbeddingDim = 16

	// BlockSize is the default of Config.BlockSize: the simulated KV block
	// size in tokens (vLLM's default on CUDA).
	BlockSize = 16
)

// Config holds the simulator's knobs. The zero value is usable: New and
// Update replace zero fields with the defaults documented on each field.
type Config struct {
	// Model is the served model name (vLLM's first --served-model-name);
	// default "demo". Requests naming another model get vLLM's 404.
	Model string
	// Root is the root reported by /v1/models (vLLM: the --model path or HF
	// id); empty means Model.
	Root string
	// MaxModelLen is the context length in tokens; default 4096.
	MaxModelLen int
	// LoadTime is how long Run waits before it listens: like vLLM, the port
	// refuses connections until the model has "loaded".
	LoadTime time.Duration
	// FailHealth makes /health answer 503 with an empty body (engine dead).
	FailHealth bool
	// TTFT is the delay between admission to a running slot and the first
	// token (the prefill).
	TTFT time.Duration
	// ITL is the delay between consecutive tokens.
	ITL time.Duration
	// OutputTokens is the length of the "natural" answer: the model stops
	// (finish_reason "stop") after that many tokens unless max_tokens /
	// max_completion_tokens or the remaining context (MaxModelLen - prompt)
	// is smaller, in which case it generates the budget and finishes with
	// "length". Default 16.
	OutputTokens int
	// MaxNumSeqs is the number of requests that run at once; default 256.
	// Later requests wait FIFO (vllm:num_requests_waiting).
	MaxNumSeqs int
	// KVTokens is the KV-cache capacity in tokens; default 65536.
	// vllm:kv_cache_usage_perc is (prompt + generated tokens of the running
	// requests) / KVTokens, capped at 1. A waiting request is admitted only
	// when its prompt fits in the free KV space (or nothing is running).
	KVTokens int
	// APIKey, when set, makes every /v1* request without
	// "Authorization: Bearer <APIKey>" answer 401 {"error": "Unauthorized"}.
	APIKey string
	// CutAfterChunks > 0 aborts a streaming response (connection reset, no
	// final chunk, no [DONE]) right after that many content chunks.
	CutAfterChunks int
	// Hang makes completion requests block, without answering, until the
	// client goes away (or the server shuts down). Hanging requests take no
	// running slot.
	Hang bool
	// FailStatus > 0 makes completion requests that pass model validation
	// answer this status with vLLM's error envelope.
	FailStatus int
	// FailMessage overrides the message sent with FailStatus.
	FailMessage string
	// KVUsageFloor makes vllm:kv_cache_usage_perc report at least this
	// (0..1), to simulate a KV cache filled by work the simulator does not
	// model (prefix cache, other tenants). Admission is not affected.
	KVUsageFloor float64
	// Version is the answer of GET /version; default "0.11.0".
	Version string
	// ShutdownTimeout mirrors vLLM's --shutdown-timeout: when Run's context
	// ends, the listener closes at once and /health answers 503; in-flight
	// requests may finish for up to ShutdownTimeout, then the rest are aborted
	// the way vLLM aborts them (500 "Internal server error", or an in-band
	// error event followed by [DONE] on a stream). 0 aborts immediately,
	// which is vLLM's default.
	ShutdownTimeout time.Duration
	// NoResponsesStore makes the Responses API behave like a vLLM started
	// without VLLM_ENABLE_RESPONSES_API_STORE: `store` is silently ignored
	// (nothing is kept, GET /v1/responses/{id} answers 404) and background
	// requests are refused. The default stores responses in memory.
	NoResponsesStore bool
	// Tokenizer counts prompt tokens; nil uses Approx (see its doc).
	Tokenizer Tokenizer
	// Detokenizer answers POST /detokenize; nil uses Tokenizer when it
	// implements TokenDecoder (Approx does, approximately), and otherwise
	// /detokenize answers 501. See LoadVocabDecoder.
	Detokenizer TokenDecoder
	// EmbeddingDim is the length of the simulated embedding vectors of
	// /v1/embeddings and /pooling; default 16.
	EmbeddingDim int
	// Matryoshka makes the model accept the embeddings "dimensions" field
	// (vLLM: a model with is_matryoshka, any dimension); false answers it
	// with vLLM's 400 "does not support matryoshka representation", as for
	// most models.
	Matryoshka bool
	// LoRAModules are the LoRA adapters loaded at start (vLLM's
	// --lora-modules name=path). Requests naming one are served under its
	// name; /v1/models lists each with root its path and parent Model.
	// The live set changes through POST /v1/load_lora_adapter and
	// /v1/unload_lora_adapter (RuntimeLoRA); Config() reports it.
	LoRAModules []LoRAModule
	// RuntimeLoRA mounts /v1/load_lora_adapter and /v1/unload_lora_adapter,
	// as VLLM_ALLOW_RUNTIME_LORA_UPDATING=True does; without it they are
	// unknown paths (404).
	RuntimeLoRA bool
	// TokenGate, when non-nil, makes every generation step (one token for
	// every choice of a request) also wait to receive a value from it, so a
	// test can release tokens one at a time. Not settable over /sim/config.
	TokenGate <-chan struct{}
	// OnProcessed, when set, is the engine's own accounting of the tokens
	// it processes: it is called with a generation's prompt tokens when its
	// prefill is done, with the tokens each decode step generates, and
	// with a pooling request's inputs when they are done, each timestamped
	// by Clock. A test reads from it what the engine really processed when
	// (a gateway's token limits are checked against it). It must be safe
	// for concurrent use. Not settable over /sim/config.
	OnProcessed func(at time.Time, tokens int)
	// Clock timestamps OnProcessed and KV event batches (nil: time.Now); a
	// test runs it faster than real time together with the gateway's clock.
	Clock func() time.Time

	// BlockSize is the KV block size in tokens (vLLM's --block-size),
	// default 16. The KV capacity in blocks, KVTokens/BlockSize, is both
	// cache_config_info's num_gpu_blocks and the prefix cache's capacity.
	// Fixed at New.
	BlockSize int
	// PrefixCaching turns on the prefix cache model (prefix_cache.go): a
	// chat or completions prompt's full blocks are looked up from the start
	// when the request is admitted, the hit tokens skip their prefill, and
	// the blocks stay cached (LRU) after the request ends until their space
	// is needed. Off by default: no hits, no /reset_prefix_cache. Fixed at
	// New.
	PrefixCaching bool
	// PrefillPerToken is the prefill time of each prompt token that is not
	// a prefix-cache hit: a request's TTFT is TTFT + PrefillPerToken ×
	// (prompt tokens - cached tokens). 0 (the default) keeps TTFT fixed.
	PrefillPerToken time.Duration
	// PrefillContention makes the prefills of a server's requests share one
	// prefill engine (prefill.go), as vLLM's scheduler shares each step's
	// token budget: a request's PrefillPerToken × uncached tokens start
	// when the prefills booked before it on this server are done (first
	// come first served), so concurrent uncached prefills slow each other
	// and a server that recomputes more prompt tokens serves fewer
	// requests. Cached tokens book nothing. Off (the default): each
	// request's prefill takes its own time, independent of the others.
	PrefillContention bool
	// PromptTokensDetails reports the cached tokens as
	// usage.prompt_tokens_details.cached_tokens when there are any, as
	// vLLM's --enable-prompt-tokens-details does (chat and completions).
	PromptTokensDetails bool
	// HashSeed seeds the block hashes (the parent of a sequence's first
	// block), as PYTHONHASHSEED does vLLM's; empty: random per Server, so
	// no consumer can recompute them. Fixed at New.
	HashSeed string
	// KVEvents, with PrefixCaching, publishes the cache's changes as vLLM's
	// KV events over ZeroMQ (kv_events.go). Fixed at New.
	KVEvents *KVEventsConfig
}

// KVEventsConfig is vLLM's --kv-events-config (publisher "zmq"), plus the
// simulator's choice of wire form. Its JSON form matches vLLM's keys.
type KVEventsConfig struct {
	// Endpoint is the PUB socket's address; default "tcp://*:5557". As in
	// vLLM, the socket binds when the address has "*", "::", ipc:// or
	// inproc://, and connects otherwise. Port 0 binds a free port
	// (Server.KVEventsEndpoints tells which).
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint, when set, binds a ROUTER socket answering replay
	// requests from the last BufferSteps batches.
	ReplayEndpoint string `json:"replay_endpoint"`
	// Topic is the first frame of every message (may be empty).
	Topic string `json:"topic"`
	// BufferSteps is how many batches the replay buffer keeps; default
	// 10000.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's high-water mark in messages; default 100000.
	HWM int `json:"hwm"`
	// Encoding is the payload form: "map" (vLLM main: maps, the event tag
	// under "type", defaulted fields omitted; the default) or "array" (older
	// releases' array_like structs).
	Encoding string `json:"encoding"`
	// Hash is the block hashes' form: "bytes" (32 bytes, the default) or
	// "int" (the low 64 bits as an unsigned integer, as
	// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES does).
	Hash string `json:"hash"`
	// DataParallelRank is the batches' data_parallel_rank; as in vLLM,
	// rank r publishes on the endpoints' ports + r.
	DataParallelRank int `json:"data_parallel_rank"`
}

// processed reports tokens to OnProcessed, if set.
func (c *Config) processed(tokens int) {
	if c.OnProcessed == nil || tokens == 0 {
		return
	}
	now := time.Now
	if c.Clock != nil {
		now = c.Clock
	}
	c.OnProcessed(now(), tokens)
}

// Tokenizer is what the simulator needs to count prompts the way vLLM does.
// Implementations must be safe for concurrent use.
type Tokenizer interface {
	// ChatPromptTokens returns the prompt token count of a chat request body
	// (rendered chat template, add_generation_prompt).
	ChatPromptTokens(body []byte) (int, error)
	// CompletionPromptTokens returns the prompt token count of a completions
	// request body. The simulator calls it with a body holding one string
	// prompt; token-id prompts are counted without it.
	CompletionPromptTokens(body []byte) (int, error)
}

// ChatTokenIDer is an optional Tokenizer extension: when the configured
// Tokenizer implements it, POST /tokenize returns real ids for chat input.
type ChatTokenIDer interface {
	ChatTokenIDs(body []byte) ([]int, error)
}

// CompletionTokenIDer is the /tokenize extension for prompt input.
type CompletionTokenIDer interface {
	CompletionTokenIDs(body []byte) ([]int, error)
}

// withDefaults returns c with zero knobs replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.MaxModelLen <= 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	if c.OutputTokens <= 0 {
		c.OutputTokens = DefaultOutputTokens
	}
	if c.MaxNumSeqs <= 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.KVTokens <= 0 {
		c.KVTokens = DefaultKVTokens
	}
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.Tokenizer == nil {
		c.Tokenizer = Approx{}
	}
	if c.EmbeddingDim <= 0 {
		c.EmbeddingDim = DefaultEmbeddingDim
	}
	if c.TTFT < 0 {
		c.TTFT = 0
	}
	if c.ITL < 0 {
		c.ITL = 0
	}
	if c.CutAfterChunks < 0 {
		c.CutAfterChunks = 0
	}
	if c.FailStatus < 0 {
		c.FailStatus = 0
	}
	if c.BlockSize <= 0 {
		c.BlockSize = BlockSize
	}
	if c.PrefillPerToken < 0 {
		c.PrefillPerToken = 0
	}
	return c
}

// prefillTime is the wait before a first token: TTFT plus PrefillPerToken
// for each prompt token the prefix cache did not have.
func (c *Config) prefillTime(uncached int) time.Duration {
	return c.TTFT + time.Duration(max(uncached, 0))*c.PrefillPerToken
}

// kvBlocks is the KV capacity in blocks (vLLM's num_gpu_blocks).
func (c *Config) kvBlocks() int { return c.KVTokens / c.BlockSize }

// Knobs is the JSON form of the runtime-settable Config fields, used by
// POST /sim/config (absent fields are left unchanged) and GET /sim/config.
// Durations are in milliseconds.
type Knobs struct {
	Model             *string  `json:"model,omitempty"`
	MaxModelLen       *int     `json:"max_model_len,omitempty"`
	FailHealth        *bool    `json:"fail_health,omitempty"`
	TTFTMillis        *float64 `json:"ttft_ms,omitempty"`
	ITLMillis         *float64 `json:"itl_ms,omitempty"`
	OutputTokens      *int     `json:"output_tokens,omitempty"`
	MaxNumSeqs        *int     `json:"max_num_seqs,omitempty"`
	KVTokens          *int     `json:"kv_tokens,omitempty"`
	APIKey            *string  `json:"api_key,omitempty"`
	CutAfterChunks    *int     `json:"cut_after_chunks,omitempty"`
	Hang              *bool    `json:"hang,omitempty"`
	FailStatus        *int     `json:"fail_status,omitempty"`
	FailMessage       *string  `json:"fail_message,omitempty"`
	Version           *string  `json:"version,omitempty"`
	ShutdownTimeoutMs *float64 `json:"shutdown_timeout_ms,omitempty"`
	KVUsageFloor      *float64 `json:"kv_usage_floor,omitempty"`
	// Preempt adds this many preemptions to vllm:num_preemptions_total
	// (a one-shot action, not a setting).
	Preempt *int `json:"preempt,omitempty"`
}

// knobsView is what GET/POST /sim/config answer: every knob, with the API
// key reduced to whether one is set.
type knobsView struct {
	Model             string  `json:"model"`
	MaxModelLen       int     `json:"max_model_len"`
	FailHealth        bool    `json:"fail_health"`
	TTFTMillis        float64 `json:"ttft_ms"`
	ITLMillis         float64 `json:"itl_ms"`
	OutputTokens      int     `json:"output_tokens"`
	MaxNumSeqs        int     `json:"max_num_seqs"`
	KVTokens          int     `json:"kv_tokens"`
	APIKeySet         bool    `json:"api_key_set"`
	CutAfterChunks    int     `json:"cut_after_chunks"`
	Hang              bool    `json:"hang"`
	FailStatus        int     `json:"fail_status"`
	Version           string  `json:"version"`
	ShutdownTimeoutMs float64 `json:"shutdown_timeout_ms"`
}

func viewOf(c Config) knobsView {
	return knobsView{
		Model:             c.Model,
		MaxModelLen:       c.MaxModelLen,
		FailHealth:        c.FailHealth,
		TTFTMillis:        millis(c.TTFT),
		ITLMillis:         millis(c.ITL),
		OutputTokens:      c.OutputTokens,
		MaxNumSeqs:        c.MaxNumSeqs,
		KVTokens:          c.KVTokens,
		APIKeySet:         c.APIKey != "",
		CutAfterChunks:    c.CutAfterChunks,
		Hang:              c.Hang,
		FailStatus:        c.FailStatus,
		Version:           c.Version,
		ShutdownTimeoutMs: millis(c.ShutdownTimeout),
	}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMillis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// validate rejects knob values that cannot mean anything.
func (k *Knobs) validate() error {
	var errs []error
	neg := func(name string, v *int) {
		if v != nil && *v < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %d", name, *v))
		}
	}
	negf := func(name string, v *float64) {
		if v != nil && *v < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %g", name, *v))
		}
	}
	neg("max_model_len", k.MaxModelLen)
	neg("output_tokens", k.OutputTokens)
	neg("max_num_seqs", k.MaxNumSeqs)
	neg("kv_tokens", k.KVTokens)
	neg("cut_after_chunks", k.CutAfterChunks)
	negf("ttft_ms", k.TTFTMillis)
	negf("itl_ms", k.ITLMillis)
	negf("shutdown_timeout_ms", k.ShutdownTimeoutMs)
	if k.FailStatus != nil && *k.FailStatus != 0 && (*k.FailStatus < 400 || *k.FailStatus > 599) {
		errs = append(errs, fmt.Errorf("fail_status must be 0 or 400..599, got %d", *k.FailStatus))
	}
	return errors.Join(errs...)
}

// apply copies the set knobs into c.
func (k *Knobs) apply(c *Config) {
	setS := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	setI := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	setB := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	setD := func(dst *time.Duration, v *float64) {
		if v != nil {
			*dst = fromMillis(*v)
		}
	}
	setS(&c.Model, k.Model)
	setI(&c.MaxModelLen, k.MaxModelLen)
	setB(&c.FailHealth, k.FailHealth)
	setD(&c.TTFT, k.TTFTMillis)
	setD(&c.ITL, k.ITLMillis)
	setI(&c.OutputTokens, k.OutputTokens)
	setI(&c.MaxNumSeqs, k.MaxNumSeqs)
	setI(&c.KVTokens, k.KVTokens)
	setS(&c.APIKey, k.APIKey)
	setI(&c.CutAfterChunks, k.CutAfterChunks)
	setB(&c.Hang, k.Hang)
	setI(&c.FailStatus, k.FailStatus)
	setS(&c.FailMessage, k.FailMessage)
	setS(&c.Version, k.Version)
	setD(&c.ShutdownTimeout, k.ShutdownTimeoutMs)
	if k.KVUsageFloor != nil {
		c.KVUsageFloor = *k.KVUsageFloor
	}
}

// decodeKnobs parses a /sim/config body strictly (unknown fields rejected).
func decodeKnobs(body []byte) (*Knobs, error) {
	var k Knobs
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON object")
	}
	if err := k.validate(); err != nil {
		return nil, err
	}
	return &k, nil
}
