package fleet

import (
	"fmt"
)

// State is where a backend stands, as seen by its probes.
type State int

const (
	// Loading: /health does not answer 200 yet (vLLM refuses connections
	// until its weights are loaded).
	Loading State = iota
	// Warming: /health answers 200; the model's listing, the warm-up
	// generation and the tokenizer probe have not all passed yet. The
	// reason says which one holds it back.
	Warming
	// Ready: requests may go here.
	Ready
	// Unhealthy: was ready, then failed unhealthy_threshold probes or
	// connections in a row.
	Unhealthy
	numStates
)

var stateNames = [...]string{"loading", "warming", "ready", "unhealthy"}

func (s State) String() string {
	if s >= 0 && s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// States lists every state, for metric labels.
func States() []State { return []State{Loading, Warming, Ready, Unhealthy} }

// MarshalText writes the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ProbeHeader marks the gateway's own probe and warm-up requests.
const ProbeHeader = "X-Maitred-Probe"

// Reasons a backend is not ready that operators and tests key on.
const (
	ReasonNotProbed        = "not probed yet"
	ReasonTokenizer        = "tokenizer_mismatch"
	ReasonMaxModelLen      = "max_model_len_mismatch"
	ReasonModelNotServed   = "model_not_served"
	ReasonWarmupFailed     = "warmup_failed"
	ReasonConnectionErrors = "connection_failures"
)

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range States() {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("unknown backend state %q", b)
}
