package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ModelConfig is one served model.
type ModelConfig struct {
	// Name is the id clients send as "model".
	Name string `yaml:"name"`
	// Tokenizer is a folder holding tokenizer.json and tokenizer_config.json.
	Tokenizer string `yaml:"tokenizer"`
	// ChatTemplate overrides the tokenizer folder's chat template (a file).
	ChatTemplate string `yaml:"chat_template"`
	// MaxModelLen is the context length; 0 means "as the backends report".
	MaxModelLen int `yaml:"max_model_len"`
	// OnOverflow is what the door does when prompt + max_tokens exceeds
	// the context: "reject" (400 context_length_exceeded) or "clamp"
	// (lower max_tokens to what fits, when the prompt alone fits).
	OnOverflow string `yaml:"on_overflow"`
	// TokenizerCheck is what a backend whose /tokenize counts the warm-up
	// probe differently from this gateway's tokenizer and chat template
	// gets: "enforce" (the default: it stays warming, tokenizer_mismatch),
	// "warn" (it becomes ready; the mismatch is logged, exported and shown
	// in /debug/backends and triage) or "off" (no probe).
	TokenizerCheck string `yaml:"tokenizer_check"`
	// TokenizeCheckRate is the fraction of counted requests whose prompt
	// is also counted by the backend's POST /tokenize, to catch a tokenizer
	// or chat template that differs from the backend's (0 to 1).
	TokenizeCheckRate float64 `yaml:"tokenize_check_rate"`
	// MinReady is how many ready backends the model needs for /readyz.
	MinReady int `yaml:"min_ready"`
	// QueueSize bounds the requests waiting for a backend (429 beyond);
	// QueueTimeout is how long one may wait (then 503).
	QueueSize    int      `yaml:"queue_size"`
	QueueTimeout Duration `yaml:"queue_timeout"`
	// ExpectedOutputTokens is the output reserved in the token budget for a
	// request without max_tokens.
	ExpectedOutputTokens int `yaml:"expected_output_tokens"`
	// PrefixAffinityTokens > 0 routes requests whose first that many
	// prompt tokens agree to the same backend (within a load bound), so a
	// conversation's turns find their KV prefix cached.
	PrefixAffinityTokens int `yaml:"prefix_affinity_tokens"`
	// Routing "precise" routes by the backends' KV-cache events (their
	// kv_events): to the backend holding the longest prefix of the
	// request's tokens, weighed against load (Precise); a backend without
	// a live index falls back to the rules above.
	Routing string               `yaml:"routing"`
	Precise PreciseRoutingConfig `yaml:"precise_routing"`
	// FirstByteTimeout and StreamIdleTimeout override the top-level ones.
	FirstByteTimeout  Duration `yaml:"first_byte_timeout"`
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// Fairness is how the model's queue shares backends between flows
	// (API keys) within a priority class: "fifo" (the default: first come,
	// first served) or "tokens" (the flow with the least weighted token
	// service goes first: a virtual token counter per key, docs/fairness.md).
	Fairness string `yaml:"fairness"`
	// FairnessWeights weighs a token of input and of output in a flow's
	// service (fairness tokens; defaults 1 and 2).
	FairnessWeights *FairnessWeights `yaml:"fairness_weights"`
	// Backends serve this model.
	Backends []BackendConfig `yaml:"backends"`
}

// Values of fairness.
const (
	FairnessFIFO   = "fifo"
	FairnessTokens = "tokens"
)

// FairnessWeights weighs tokens in a flow's service: input (prompt) and
// output (generated) tokens. Each is positive; unset takes its default.
type FairnessWeights struct {
	Input  *float64 `yaml:"input"`
	Output *float64 `yaml:"output"`
}

// Default weights of a flow's service: an output token costs twice an
// input token (the VTC paper's default).
const (
	DefaultInputWeight  = 1
	DefaultOutputWeight = 2
)

// FairnessOrDefault is fairness, fifo when unset.
func (m *ModelConfig) FairnessOrDefault() string {
	if m.Fairness == "" {
		return FairnessFIFO
	}
	return m.Fairness
}

// FairnessWeightsOrDefault is fairness_weights' input and output, each
// unset one at its default (1 and 2).
func (m *ModelConfig) FairnessWeightsOrDefault() (input, output float64) {
	in, out := float64(DefaultInputWeight), float64(DefaultOutputWeight)
	if w := m.FairnessWeights; w != nil {
		if w.Input != nil {
			in = *w.Input
		}
		if w.Output != nil {
			out = *w.Output
		}
	}
	return in, out
}

// positiveNumber reports whether v is a finite number above 0.
func positiveNumber(v float64) bool {
	return v > 0 && !math.IsInf(v, 0)
}

// Values of tokenizer_check.
const (
	TokenizerEnforce = "enforce"
	TokenizerWarn    = "warn"
	TokenizerOff     = "off"
)

// TokenizerCheckOrDefault is tokenizer_check, enforce when unset.
func (m *ModelConfig) TokenizerCheckOrDefault() string {
	if m.TokenizerCheck == "" {
		return TokenizerEnforce
	}
	return m.TokenizerCheck
}

// MinReadyOrDefault is min_ready, 1 when unset.
func (m *ModelConfig) MinReadyOrDefault() int {
	if m.MinReady == 0 {
		return 1
	}
	return m.MinReady
}

// QueueSizeOrDefault is queue_size, 256 when unset.
func (m *ModelConfig) QueueSizeOrDefault() int {
	if m.QueueSize == 0 {
		return 256
	}
	return m.QueueSize
}

// QueueTimeoutOrDefault is queue_timeout, 30 s when unset.
func (m *ModelConfig) QueueTimeoutOrDefault() time.Duration {
	if m.QueueTimeout == 0 {
		return 30 * time.Second
	}
	return m.QueueTimeout.D()
}

// ExpectedOutputOrDefault is expected_output_tokens, 256 when unset.
func (m *ModelConfig) ExpectedOutputOrDefault() int {
	if m.ExpectedOutputTokens == 0 {
		return 256
	}
	return m.ExpectedOutputTokens
}

// FirstByte returns the model's first-byte timeout.
func (c *Config) FirstByte(m *ModelConfig) time.Duration {
	if m != nil && m.FirstByteTimeout > 0 {
		return m.FirstByteTimeout.D()
	}
	return c.FirstByteTimeout.D()
}

// StreamIdle returns the model's stream idle timeout.
func (c *Config) StreamIdle(m *ModelConfig) time.Duration {
	if m != nil && m.StreamIdleTimeout > 0 {
		return m.StreamIdleTimeout.D()
	}
	return c.StreamIdleTimeout.D()
}

// BackendConfig is one vLLM server, or a DNS name standing for several:
// exactly one of URL, DNS and SRV is set.
type BackendConfig struct {
	// URL is the server's base URL, e.g. http://10.0.0.5:8000.
	URL string `yaml:"url"`
	// DNS is name:port: every address of name (A and AAAA records, e.g. a
	// Kubernetes headless Service) is a backend, http://address:port,
	// re-resolved every DNSInterval. The other keys apply to each.
	DNS string `yaml:"dns"`
	// SRV is a service name (_service._proto.name) whose SRV records name
	// the backends (each target's addresses at its port), re-resolved
	// every DNSInterval.
	SRV string `yaml:"srv"`
	// DNSInterval is how often DNS or SRV is resolved again (default 5s).
	DNSInterval Duration `yaml:"dns_interval"`
	// APIKeyEnv names an environment variable holding the backend's API key.
	APIKeyEnv string `yaml:"api_key_env"`
	// ServedModel is the model name the backend serves, when it differs
	// from the gateway's model name (vLLM's --served-model-name).
	ServedModel string `yaml:"served_model"`
	// MaxInFlight caps the requests sent to this backend at once (0: no
	// cap; vLLM's --max-num-seqs is a good value).
	MaxInFlight int `yaml:"max_in_flight"`
	// KVTokens is the backend's token budget (prompt + max_tokens over its
	// in-flight requests) when it does not export vllm:cache_config_info.
	KVTokens int `yaml:"kv_tokens"`
	// KVEvents is where the backend publishes vLLM's KV-cache events
	// (nil: it does not; the model's routing: precise then routes it by
	// the rules of a model without).
	KVEvents *KVEventsConfig `yaml:"kv_events"`
}

// DefaultDNSInterval is dns_interval when unset.
const DefaultDNSInterval = 5 * time.Second

// DNSIntervalOrDefault is dns_interval, 5 s when unset.
func (b *BackendConfig) DNSIntervalOrDefault() time.Duration {
	if b.DNSInterval == 0 {
		return DefaultDNSInterval
	}
	return b.DNSInterval.D()
}

// Discovered reports whether the entry names backends through DNS (dns or
// srv) rather than one url.
func (b *BackendConfig) Discovered() bool { return b.DNS != "" || b.SRV != "" }

// validateModels checks the models list (models[i].*): at least one, each
// named once.
func (c *Config) validateModels(p *problems) {
	if len(c.Models) == 0 {
		p.add("models", "at least one model is required")
	}
	names := map[string]int{}
	for i := range c.Models {
		m := &c.Models[i]
		path := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			p.add(path+".name", "is required")
		} else if j, dup := names[m.Name]; dup {
			p.add(path+".name", "%q is already models[%d].name", m.Name, j)
		} else {
			names[m.Name] = i
		}
		m.validate(p, path)
	}
}

// validate checks one model at path (models[i]) and its backends.
func (m *ModelConfig) validate(p *problems, path string) {
	switch m.OnOverflow {
	case "", "reject", "clamp":
	default:
		p.add(path+".on_overflow", "want reject or clamp, got %q", m.OnOverflow)
	}
	switch m.TokenizerCheck {
	case "", TokenizerEnforce, TokenizerWarn, TokenizerOff:
	default:
		p.add(path+".tokenizer_check", "want enforce, warn or off, got %q", m.TokenizerCheck)
	}
	if m.TokenizeCheckRate < 0 || m.TokenizeCheckRate > 1 {
		p.add(path+".tokenize_check_rate", "want a fraction from 0 to 1, got %v", m.TokenizeCheckRate)
	}
	if m.MaxModelLen < 0 {
		p.add(path+".max_model_len", "must not be negative, got %d", m.MaxModelLen)
	}
	if len(m.Backends) == 0 {
		p.add(path+".backends", "at least one backend is required")
	}
	discovered := slices.ContainsFunc(m.Backends, func(b BackendConfig) bool { return b.Discovered() })
	if m.MinReady < 0 || (!discovered && len(m.Backends) > 0 && m.MinReady > len(m.Backends)) {
		p.add(path+".min_ready", "want 1 to %d (the number of backends), got %d", len(m.Backends), m.MinReady)
	}
	if m.FirstByteTimeout < 0 || m.StreamIdleTimeout < 0 || m.QueueTimeout < 0 {
		p.add(path, "timeouts must not be negative")
	}
	if m.QueueSize < 0 || m.ExpectedOutputTokens < 0 || m.PrefixAffinityTokens < 0 {
		p.add(path, "queue_size, expected_output_tokens and prefix_affinity_tokens must not be negative")
	}
	m.validateFairness(p, path)
	m.validateRouting(p, path)
	seen := map[string]int{} // "url ADDRESS" (or dns, srv): its index
	for j := range m.Backends {
		m.Backends[j].validate(p, fmt.Sprintf("%s.backends[%d]", path, j), path, seen, j)
	}
}

// validateFairness checks fairness and fairness_weights at path
// (models[i]).
func (m *ModelConfig) validateFairness(p *problems, path string) {
	switch m.Fairness {
	case "", FairnessFIFO, FairnessTokens:
	default:
		p.add(path+".fairness", "want fifo or tokens, got %q", m.Fairness)
	}
	if w := m.FairnessWeights; w != nil {
		if w.Input != nil && !positiveNumber(*w.Input) {
			p.add(path+".fairness_weights.input", "want a positive number, got %v", *w.Input)
		}
		if w.Output != nil && !positiveNumber(*w.Output) {
			p.add(path+".fairness_weights.output", "want a positive number, got %v", *w.Output)
		}
	}
}

// validate checks one backend entry at path (models[i].backends[j]);
// seen holds the model's entries before it by address, to refuse one
// given twice.
func (b *BackendConfig) validate(p *problems, path, model string, seen map[string]int, j int) {
	switch {
	case (b.URL != "") == b.Discovered() || (b.DNS != "" && b.SRV != ""):
		p.add(path, "want exactly one of url, dns (name:port) and srv (_service._proto.name)")
	case b.DNS != "":
		if err := checkDNSName(b.DNS); err != nil {
			p.add(path+".dns", "%v", err)
		}
	case b.SRV != "":
		if !strings.HasPrefix(b.SRV, "_") || strings.Count(strings.TrimSuffix(b.SRV, "."), ".") < 2 {
			p.add(path+".srv", "want an SRV name such as _http._tcp.vllm.default.svc.cluster.local, got %q", b.SRV)
		}
	default:
		if err := checkBackendURL(b.URL); err != nil {
			p.add(path+".url", "%v", err)
		}
	}
	// The key path of the entry's address: url, dns or srv.
	key, id := "url", b.URL
	if b.DNS != "" {
		key, id = "dns", b.DNS
	} else if b.SRV != "" {
		key, id = "srv", b.SRV
	}
	if id != "" {
		if k, dup := seen[key+" "+id]; dup {
			p.add(path+"."+key, "%q is already %s.backends[%d].%s", id, model, k, key)
		} else {
			seen[key+" "+id] = j
		}
	}
	if b.DNSInterval < 0 || (b.DNSInterval > 0 && !b.Discovered()) {
		p.add(path+".dns_interval", "want a positive duration, with dns or srv only")
	}
	if b.KVEvents != nil {
		b.KVEvents.validate(p, path+".kv_events", b.Discovered())
	}
	if b.MaxInFlight < 0 || b.KVTokens < 0 {
		p.add(path, "max_in_flight and kv_tokens must not be negative")
	}
	if b.APIKeyEnv != "" {
		if _, ok := os.LookupEnv(b.APIKeyEnv); !ok {
			p.add(path+".api_key_env", "environment variable %s is not set", b.APIKeyEnv)
		}
	}
}

// checkDNSName checks a dns entry: name:port.
func checkDNSName(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return fmt.Errorf("want name:port, such as vllm.default.svc.cluster.local:8000, got %q", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("want a port number from 1 to 65535, got %q", port)
	}
	return nil
}

func checkBackendURL(s string) error {
	if s == "" {
		return errors.New("is required")
	}
	u, err := url.Parse(s)
	if err != nil || !strings.Contains(s, "://") {
		return fmt.Errorf("want an http:// or https:// URL, got %q", s)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("want an http:// or https:// URL, got %q", s)
	}
	if u.Host == "" {
		return fmt.Errorf("has no host: %q", s)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("must not carry a query, fragment or credentials: %q", s)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		return fmt.Errorf("want the server's base URL without a path (not %q); maitred adds /v1/...", u.Path)
	}
	return nil
}
