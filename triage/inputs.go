package triage

import "time"

// This file holds what the gateway feeds the engine: the failure layers,
// a finished request (Observation) and a scrape of a backend (BackendSample).

// Layer is where progress stopped for a failed request.
type Layer string

const (
	LayerNone    Layer = ""                // succeeded
	LayerDoor    Layer = "door"            // rejected at the door (bad request, context overflow...)
	LayerQueue   Layer = "gateway_queue"   // queue full / queue timeout in the gateway
	LayerUnready Layer = "backend_unready" // no ready backend
	LayerConnect Layer = "backend_connect" // could not connect / failed before headers / first-byte timeout
	LayerBackend Layer = "backend"         // the backend refused the request with its own 4xx
	LayerPrefill Layer = "prefill"         // failed or timed out before the first token
	LayerDecode  Layer = "decode"          // broke or stalled after the first token
	LayerClient  Layer = "client"          // the client left or read too slowly
)

// Layer indexes in the per-bucket counters. layerOther holds any Layer
// value outside the closed set above.
const (
	layerDoor = iota
	layerQueue
	layerUnready
	layerConnect
	layerBackend
	layerPrefill
	layerDecode
	layerClient
	layerOther
	numLayers
)

var layerNames = [numLayers]string{
	layerDoor:    string(LayerDoor),
	layerQueue:   string(LayerQueue),
	layerUnready: string(LayerUnready),
	layerConnect: string(LayerConnect),
	layerBackend: string(LayerBackend),
	layerPrefill: string(LayerPrefill),
	layerDecode:  string(LayerDecode),
	layerClient:  string(LayerClient),
	layerOther:   OverflowLabel,
}

func layerIndex(l Layer) int {
	switch l {
	case LayerDoor:
		return layerDoor
	case LayerQueue:
		return layerQueue
	case LayerUnready:
		return layerUnready
	case LayerConnect:
		return layerConnect
	case LayerBackend:
		return layerBackend
	case LayerPrefill:
		return layerPrefill
	case LayerDecode:
		return layerDecode
	case LayerClient:
		return layerClient
	}
	return layerOther
}

// Layers lists the failure layers, for pre-registering label values.
func Layers() []Layer {
	return []Layer{LayerDoor, LayerQueue, LayerUnready, LayerConnect, LayerBackend, LayerPrefill, LayerDecode, LayerClient}
}

// OverflowLabel is the name under which models, backends and reasons beyond
// the configured caps (and unknown layers) are counted.
const OverflowLabel = "other"

// Observation is one finished request, as the gateway saw it.
type Observation struct {
	Time           time.Time // when it finished (zero: now)
	Model, Backend string    // Backend "" when it never reached one
	Layer          Layer     // LayerNone on success
	// Reason is the door rejection reason (e.g. "context_length_exceeded")
	// or failure code ("backend_timeout", "client_closed"...).
	Reason string
	// Phase durations. Connect is backend connect until response headers.
	Door, Queue, Connect time.Duration
	TTFT                 time.Duration // request start at backend -> first token (0 if none)
	TPOT                 time.Duration // mean time per output token after the first (0 if < 2 tokens)
	ClientStall          time.Duration // time spent blocked writing to the client
	Total                time.Duration
	OutputTokens         int
	Stream               bool
}

// BackendSample is one scrape of a backend's vLLM gauges.
type BackendSample struct {
	Time             time.Time // zero: now
	Model, Backend   string
	Running, Waiting float64 // vllm:num_requests_running / waiting
	KVUsage          float64 // vllm:kv_cache_usage_perc, 0..1
	Preemptions      float64 // vllm:num_preemptions_total (a counter)
	Ready            bool
	// Ejected: ready, but ejected as an outlier by the gateway's queue
	// (StateReason says until when); counts as not ready.
	Ejected bool
	// NoGauges: a sample of the state only (the scrape failed, or the
	// backend is not scraped): the gauge fields are ignored.
	NoGauges bool
	// GaugesState is the gateway's trust in the backend's gauges:
	// unknown, fresh, stale or unavailable ("" when not told).
	GaugesState string
	// Compat is a known difference of ingredients (tokenizer, chat
	// template, context length) between the gateway and the backend; nil
	// when none is known.
	Compat      *Compatibility
	State       string // gateway's view: loading/warming/ready/unhealthy
	StateReason string
	StateSince  time.Time
}

// Compatibility is a difference of ingredients between the gateway and a
// backend found at warm-up: the backend counts the probe conversation with
// another tokenizer or chat template, or serves another context length.
type Compatibility struct {
	// Check is "tokenizer" or "max_model_len".
	Check string `json:"check"`
	// Gateway and Backend are the two counts (or context lengths).
	Gateway int `json:"gateway"`
	Backend int `json:"backend"`
	// Accepted: the model's tokenizer_check is warn, so the backend is
	// served anyway.
	Accepted bool `json:"accepted,omitempty"`
}
