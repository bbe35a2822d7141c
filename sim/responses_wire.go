package sim

import (
	"encoding/json"
	"strings"
)

// --- wire types ------------------------------------------------------------

type respOutputText struct {
	Annotations []struct{}      `json:"annotations"`
	Text        string          `json:"text"`
	Type        string          `json:"type"`
	Logprobs    json.RawMessage `json:"logprobs"`
}

type respMessage struct {
	ID      string           `json:"id"`
	Content []respOutputText `json:"content"`
	Role    string           `json:"role"`
	Status  string           `json:"status"`
	Type    string           `json:"type"`
	// Summary appears (empty) on the streamed output_item.done only, as
	// vLLM's simple stream sets it there.
	Summary *[]struct{} `json:"summary,omitempty"`
}

type respInputDetails struct {
	CachedTokens        int   `json:"cached_tokens"`
	InputTokensPerTurn  []int `json:"input_tokens_per_turn"`
	CachedTokensPerTurn []int `json:"cached_tokens_per_turn"`
}

type respOutputDetails struct {
	ReasoningTokens         int   `json:"reasoning_tokens"`
	ToolOutputTokens        int   `json:"tool_output_tokens"`
	OutputTokensPerTurn     []int `json:"output_tokens_per_turn"`
	ToolOutputTokensPerTurn []int `json:"tool_output_tokens_per_turn"`
}

type respUsage struct {
	InputTokens         int               `json:"input_tokens"`
	InputTokensDetails  respInputDetails  `json:"input_tokens_details"`
	OutputTokens        int               `json:"output_tokens"`
	OutputTokensDetails respOutputDetails `json:"output_tokens_details"`
	TotalTokens         int               `json:"total_tokens"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

// responseObject is vLLM's ResponsesResponse, serialised with every field.
type responseObject struct {
	ID                 string             `json:"id"`
	CreatedAt          int64              `json:"created_at"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Metadata           json.RawMessage    `json:"metadata"`
	Model              string             `json:"model"`
	Object             string             `json:"object"`
	Output             []respMessage      `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	Temperature        float64            `json:"temperature"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopP               float64            `json:"top_p"`
	Background         bool               `json:"background"`
	MaxOutputTokens    int                `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Prompt             *struct{}          `json:"prompt"`
	Reasoning          json.RawMessage    `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Status             string             `json:"status"`
	Text               json.RawMessage    `json:"text"`
	TopLogprobs        *int               `json:"top_logprobs"`
	Truncation         string             `json:"truncation"`
	Usage              *respUsage         `json:"usage"`
	User               *string            `json:"user"`
	InputMessages      *struct{}          `json:"input_messages"`
	OutputMessages     *struct{}          `json:"output_messages"`
}

// --- stream events -----------------------------------------------------------

type responseStateEvent struct {
	Response       *responseObject `json:"response"`
	SequenceNumber int             `json:"sequence_number"`
	Type           string          `json:"type"`
}

type itemEvent struct {
	Item           respMessage `json:"item"`
	OutputIndex    int         `json:"output_index"`
	SequenceNumber int         `json:"sequence_number"`
	Type           string      `json:"type"`
}

type partEvent struct {
	ContentIndex   int            `json:"content_index"`
	ItemID         string         `json:"item_id"`
	OutputIndex    int            `json:"output_index"`
	Part           respOutputText `json:"part"`
	SequenceNumber int            `json:"sequence_number"`
	Type           string         `json:"type"`
}

type textDeltaEvent struct {
	ContentIndex   int        `json:"content_index"`
	Delta          string     `json:"delta"`
	ItemID         string     `json:"item_id"`
	Logprobs       []struct{} `json:"logprobs"`
	OutputIndex    int        `json:"output_index"`
	SequenceNumber int        `json:"sequence_number"`
	Type           string     `json:"type"`
}

type textDoneEvent struct {
	ContentIndex   int        `json:"content_index"`
	ItemID         string     `json:"item_id"`
	Logprobs       []struct{} `json:"logprobs"`
	OutputIndex    int        `json:"output_index"`
	SequenceNumber int        `json:"sequence_number"`
	Text           string     `json:"text"`
	Type           string     `json:"type"`
}

type responseErrorEvent struct {
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
	SequenceNumber int     `json:"sequence_number"`
	Type           string  `json:"type"`
}

// respEvents writes one response's stream of events in vLLM's order:
// response.created, response.in_progress, then with the first token
// response.output_item.added and response.content_part.added, one
// response.output_text.delta per token, and after the last one
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed. Every event carries
// sequence_number 0, 1, 2, ... The content_index values reproduce vLLM's
// simple stream, which advances the index after every event (part 0, deltas
// 1..n, then n+1 and n+2).
type respEvents struct {
	emit    func(name string, data []byte) error
	seq     int
	itemID  string
	content int
	text    strings.Builder
}
