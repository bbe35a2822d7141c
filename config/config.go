package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the gateway's configuration file. It is read in three steps, as
// Prometheus reads its own: defaults (Default), a strict decode that refuses
// unknown keys and ill-typed values naming the key path (Parse), then
// validation of the whole (Validate), also naming key paths. A config that
// passes all three never fails later for a reason that was visible at start.
type Config struct {
	// Listen is the gateway's address, host:port.
	Listen string `yaml:"listen" reload:"restart"`
	// AdminListen is the admin listener's address, host:port: /metrics,
	// /debug/* and the status page are served there and not on Listen.
	// Empty: no admin listener; the admin pages are then on Listen only
	// when the gateway is open (no auth section), and not served at all
	// with auth (they name every tenant's keys, usage and backends).
	AdminListen string `yaml:"admin_listen" reload:"restart"`
	// MaxBodyBytes caps a request body; larger bodies get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout" reload:"restart"`
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout Duration `yaml:"idle_timeout" reload:"restart"`
	// MaxHeaderBytes caps request header size.
	MaxHeaderBytes int `yaml:"max_header_bytes" reload:"restart"`
	// ReadBodyTimeout bounds how long a client may take to send a request
	// body once its headers are in; a body still incomplete then gets 408
	// and the connection closes.
	ReadBodyTimeout Duration `yaml:"read_body_timeout"`
	// MaxConnections caps the client connections open at once; past it the
	// gateway stops accepting until one closes (0: no cap).
	MaxConnections int `yaml:"max_connections" reload:"restart"`
	// MaxBodyBytesInFlight caps the request body bytes held by all
	// requests at once (read so far, or held for forwarding: in memory, or
	// an audio upload's spool on disk); a request whose body would pass it
	// gets 503 server_busy (0: no cap).
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight" reload:"restart"`
	// CountCacheBytes bounds the memory of the count cache
	// (tokenize.CountCache), which lets the next turn of a conversation be
	// counted without tokenizing again the turns counted before (0: off).
	CountCacheBytes int64 `yaml:"count_cache_bytes" reload:"restart"`
	// MaxAudioBodyBytes caps an audio upload (/v1/audio/transcriptions,
	// /v1/audio/translations): the audio's bytes (OpenAI's and vLLM's
	// limit is the file's), and the body may carry 1 MiB more for the
	// form's other parts; larger uploads get 413. An upload is read whole
	// into a temporary file (never held in memory) before it queues, and
	// its bytes count in max_body_bytes_in_flight until the request ends.
	MaxAudioBodyBytes int64 `yaml:"max_audio_body_bytes"`
	// ReadAudioBodyTimeout bounds how long a client may take to send an
	// audio upload once its headers are in; then 408 (the connection
	// closes).
	ReadAudioBodyTimeout Duration `yaml:"read_audio_body_timeout"`
	// FirstByteTimeout is how long the gateway waits for a backend's
	// response headers before answering 504 backend_timeout. vLLM sends the
	// headers of a non-streaming answer only when generation is complete, so
	// this bounds whole non-streaming requests and the time to the first
	// byte of streams. A model may set its own.
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
	// StreamIdleTimeout ends a stream whose backend sent no complete event
	// for this long with a backend_stalled error event, and cancels it
	// upstream; it also bounds a non-streaming body that makes no progress
	// after its headers, and each write to a client that stops reading. A
	// model may set its own.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// DrainDelay is how long the gateway keeps serving new requests after a
	// shutdown signal, with /readyz already failing, so that load balancers
	// notice before it stops accepting.
	DrainDelay Duration `yaml:"drain_delay"`
	// DrainTimeout is how long in-flight requests and streams may then run
	// before they are ended (streams with a server_shutting_down event).
	DrainTimeout Duration `yaml:"drain_timeout"`
	// BackendDialTimeout bounds the TCP connect to a backend.
	BackendDialTimeout Duration `yaml:"backend_dial_timeout" reload:"restart"`
	// Health configures backend probing.
	Health HealthConfig `yaml:"health" reload:"restart"`
	// ScrapeInterval is how often each ready backend's /metrics is read
	// (vllm:num_requests_waiting, kv_cache_usage_perc, cache_config_info).
	// Gauges older than 4 intervals are stale and count as saturated for
	// new admissions; gauges that cannot be read (3 unreadable answers in
	// a row, or scrapes failing for max(40 intervals, 5s), or never read)
	// are unavailable and not checked: the backend is then admitted on its
	// max_in_flight and token budget alone.
	ScrapeInterval Duration `yaml:"scrape_interval" reload:"restart"`
	// SaturatedWaiting and SaturatedKVUsage: a backend whose scraped
	// waiting queue or KV usage reaches these gets no new requests (they
	// queue in the gateway) until it recovers. 0 disables either check.
	SaturatedWaiting float64 `yaml:"saturated_waiting"`
	SaturatedKVUsage float64 `yaml:"saturated_kv_usage"`
	// PriorityClasses are the values clients may send in
	// x-maitred-priority, highest first; DefaultPriority is used when the
	// header is absent or names no class.
	PriorityClasses []string `yaml:"priority_classes" reload:"restart"`
	DefaultPriority string   `yaml:"default_priority" reload:"restart"`
	// TriageWindow is the sliding window /debug/triage judges over.
	TriageWindow Duration `yaml:"triage_window" reload:"restart"`
	// Triage overrides the triage rules' thresholds; unset keys keep the
	// defaults documented in configs/maitred.yaml and package triage.
	Triage TriageConfig `yaml:"triage"`
	// Store is the shared store of a fleet's replicas (store.go): the
	// top-level keys store, store_password_env, on_store_error,
	// store_lease, store_heartbeat and store_timeout.
	Store StoreConfig `yaml:",inline" reload:"restart"`
	// Outlier ejection: a backend answering 5xx or refusing connections
	// EjectAfter times in a row gets no requests for EjectFor.
	EjectAfter int      `yaml:"eject_after"`
	EjectFor   Duration `yaml:"eject_for"`
	// MaxEjectionPercent bounds ejection as Envoy's max_ejection_percent:
	// at most this percentage of a model's ready backends are ejected at
	// once (rounded down, but at least one), and never the last ready one
	// left in rotation: a single-backend model is never ejected.
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
	// Resolver is the DNS server (host:port) that backends given by dns or
	// srv are resolved with; "" uses the system's (/etc/resolv.conf).
	Resolver string `yaml:"resolver" reload:"restart"`
	// Tracing configures OpenTelemetry traces (off unless an endpoint is
	// named here or in OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT).
	Tracing TracingConfig `yaml:"tracing" reload:"restart"`
	// Models are the models served, each with its backends.
	Models []ModelConfig `yaml:"models"`
	// Auth, when present, requires an API key on every model API request
	// (keys.go). Absent: the gateway is open, as before, and warns at start.
	Auth *AuthConfig `yaml:"auth" reload:"presence"`
}

// TracingConfig configures the OTLP trace exporter. What it names wins
// over the OTEL_* environment variables; what it leaves unset is read
// from them (package internal/telemetry resolves both).
type TracingConfig struct {
	// Endpoint is the collector's URL: for http/protobuf the traces URL
	// (a URL without a path gets /v1/traces), for grpc the server's
	// (http:// sends without TLS). Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// or OTEL_EXPORTER_OTLP_ENDPOINT, else tracing is off.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc or http/protobuf; empty:
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
	Protocol string `yaml:"protocol"`
	// SamplingRatio is the share of traces started here that are kept
	// (0 to 1); a caller's sampled traceparent is always followed. Unset:
	// OTEL_TRACES_SAMPLER (+ _ARG), else every trace.
	SamplingRatio *float64 `yaml:"sampling_ratio"`
	// ServiceName is the service.name of the spans; empty:
	// OTEL_SERVICE_NAME, else maitred.
	ServiceName string `yaml:"service_name"`
}

// The OTLP protocols tracing.protocol accepts.
const (
	TracingHTTP = "http/protobuf"
	TracingGRPC = "grpc"
)

// HealthConfig configures how backends are probed.
type HealthConfig struct {
	// Interval between probes of one backend.
	Interval Duration `yaml:"interval"`
	// Timeout of one probe request.
	Timeout Duration `yaml:"timeout"`
	// UnhealthyThreshold is how many consecutive failed probes, or
	// connection failures of real requests, turn a ready backend unhealthy.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	// WarmupPrompt is the prompt of the warm-up generation (a few streamed
	// tokens that also measure the backend's idle TTFT and TPOT)
	// a backend must answer before it is ready, and of the tokenizer probe.
	WarmupPrompt string `yaml:"warmup_prompt"`
	// WarmupTimeout bounds the warm-up generation's wait for each token
	// (the first included): a slow backend that keeps producing tokens is
	// waited for, and a busy one is not waited for (see package fleet).
	WarmupTimeout Duration `yaml:"warmup_timeout"`
	// WarmupBackoffMax caps the wait between failed warm-ups: a backend
	// whose warm-up fails (a tokenizer or max_model_len mismatch, a failed
	// generation) is tried again after one interval, then twice that, and
	// so on up to this; success, or the backend restarting, resets it.
	WarmupBackoffMax Duration `yaml:"warmup_backoff_max"`
}

// TriageConfig holds the thresholds of the triage rules (0: the default).
type TriageConfig struct {
	// Baseline is the time constant of each backend's moving baseline.
	Baseline Duration `yaml:"baseline" reload:"restart"`
	// MinSamples latency samples a backend needs before it is judged.
	MinSamples int `yaml:"min_samples"`
	// TTFT rises at TTFTRiseFactor x baseline and TTFTMinDelta above it.
	TTFTRiseFactor float64  `yaml:"ttft_rise_factor"`
	TTFTMinDelta   Duration `yaml:"ttft_min_delta"`
	// TPOT is stable below TPOTStableFactor x baseline, and rises at
	// TPOTRiseFactor x baseline and TPOTMinDelta above it.
	TPOTStableFactor float64  `yaml:"tpot_stable_factor"`
	TPOTRiseFactor   float64  `yaml:"tpot_rise_factor"`
	TPOTMinDelta     Duration `yaml:"tpot_min_delta"`
	// A failure class counts from MinFailures failures making
	// MinFailureShare of the window's requests.
	MinFailures     int     `yaml:"min_failures"`
	MinFailureShare float64 `yaml:"min_failure_share"`
	// KVFull is the KV usage that reads as near full.
	KVFull float64 `yaml:"kv_full"`
	// SlowPathFactor: a backend this many times slower than its model's
	// peers is flagged as a possible slow-path fallback.
	SlowPathFactor float64 `yaml:"slow_path_factor"`
}

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
	// FirstByteTimeout and StreamIdleTimeout override the top-level ones.
	FirstByteTimeout  Duration `yaml:"first_byte_timeout"`
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// Backends serve this model.
	Backends []BackendConfig `yaml:"backends"`
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

// Duration is a time.Duration written as "1.5s", "200ms", "5m".
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return errors.New(`want a duration such as "5s" or "250ms"`)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("want a duration such as \"5s\" or \"250ms\", got %q", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes Go duration syntax.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MinCountCacheBytes is the smallest count_cache_bytes other than 0: room
// for about a thousand boundaries (a few long conversations).
const MinCountCacheBytes = 64 << 10

// Default returns a config holding every default and no models.
func Default() Config {
	return Config{
		Listen:               "127.0.0.1:8080",
		MaxBodyBytes:         8 << 20,
		ReadHeaderTimeout:    Duration(10 * time.Second),
		IdleTimeout:          Duration(120 * time.Second),
		MaxHeaderBytes:       64 << 10,
		ReadBodyTimeout:      Duration(30 * time.Second),
		MaxConnections:       4096,
		MaxBodyBytesInFlight: 512 << 20,
		CountCacheBytes:      64 << 20,
		MaxAudioBodyBytes:    25 << 20,
		ReadAudioBodyTimeout: Duration(300 * time.Second),
		FirstByteTimeout:     Duration(300 * time.Second),
		StreamIdleTimeout:    Duration(60 * time.Second),
		DrainDelay:           Duration(5 * time.Second),
		DrainTimeout:         Duration(60 * time.Second),
		BackendDialTimeout:   Duration(5 * time.Second),
		ScrapeInterval:       Duration(250 * time.Millisecond),
		SaturatedWaiting:     4,
		SaturatedKVUsage:     0.98,
		PriorityClasses:      []string{"default"},
		DefaultPriority:      "default",
		EjectAfter:           5,
		TriageWindow:         Duration(5 * time.Minute),
		EjectFor:             Duration(10 * time.Second),
		MaxEjectionPercent:   10,
		Store:                defaultStore(),
		Health: HealthConfig{
			Interval:           Duration(time.Second),
			Timeout:            Duration(2 * time.Second),
			UnhealthyThreshold: 3,
			WarmupPrompt:       "Hello",
			WarmupTimeout:      Duration(60 * time.Second),
			WarmupBackoffMax:   Duration(2 * time.Minute),
		},
	}
}

// Load reads, decodes and validates the file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if a := cfg.Auth; a != nil && a.KeysFile != "" {
		// A relative keys_file is read from the config file's folder.
		if !filepath.IsAbs(a.KeysFile) {
			a.KeysFile = filepath.Join(filepath.Dir(path), a.KeysFile)
		}
		if _, err := LoadKeys(a.KeysFile, &cfg); err != nil {
			return Config{}, fmt.Errorf("%s: auth.keys_file: %w", path, err)
		}
	}
	return cfg, nil
}

// Parse decodes data over the defaults and validates the result.
func Parse(data []byte) (Config, error) {
	cfg := Default()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, errors.New("config is empty")
		}
		return Config{}, fmt.Errorf("config is not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("config holds more than one YAML document")
	}
	if err := decodeStrict(doc.Content[0], reflect.ValueOf(&cfg).Elem(), ""); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// FieldError is a config problem at a key path such as
// "models[0].backends[1].url".
type FieldError struct {
	Path string
	Line int
	Msg  string
}

func (e *FieldError) Error() string {
	p := e.Path
	if p == "" {
		p = "(top level)"
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", p, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", p, e.Msg)
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// decodeStrict walks the YAML tree alongside the Go value so that every
// error names its key path. yaml.v3's KnownFields reports unknown keys by
// line and Go type name only, which tells an operator less than
// "models[0].backends[0].urll: unknown key".
func decodeStrict(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.CanAddr() && v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			return &FieldError{path, n.Line, err.Error()}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if n.Tag == "!!null" {
			return &FieldError{path, n.Line, "value is empty"}
		}
		p := reflect.New(v.Type().Elem())
		if err := decodeStrict(n, p.Elem(), path); err != nil {
			return err
		}
		v.Set(p)
		return nil
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return &FieldError{path, n.Line, "want a mapping of keys"}
		}
		fields := map[string][]int{}
		structFields(v.Type(), nil, fields)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			idx, ok := fields[k.Value]
			if !ok {
				return &FieldError{p, k.Line, "unknown key" + suggest(k.Value, fields)}
			}
			if seen[k.Value] {
				return &FieldError{p, k.Line, "key given twice"}
			}
			seen[k.Value] = true
			if err := decodeStrict(val, v.FieldByIndex(idx), p); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return &FieldError{path, n.Line, "want a list"}
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := decodeStrict(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	default:
		if n.Kind != yaml.ScalarNode {
			return &FieldError{path, n.Line, "want a single value"}
		}
		if n.Tag == "!!null" {
			return &FieldError{path, n.Line, "value is empty"}
		}
		if v.Kind() == reflect.String && n.Tag != "!!str" {
			return &FieldError{path, n.Line, fmt.Sprintf("want a string, got %q (quote it)", n.Value)}
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return &FieldError{path, n.Line, fmt.Sprintf("want %s, got %q", kindName(v.Kind()), n.Value)}
		}
		return nil
	}
}

// structFields maps each yaml key of t to its field's index path; the keys
// of a field tagged ",inline" (a struct) are t's own.
func structFields(t reflect.Type, at []int, fields map[string][]int) {
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(append([]int(nil), at...), i)
		tag, opt, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if opt == "inline" && f.Type.Kind() == reflect.Struct {
			structFields(f.Type, idx, fields)
			continue
		}
		if tag != "" && tag != "-" {
			fields[tag] = idx
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Float64:
		return "a number"
	}
	return k.String()
}

// suggest names a known key that differs from key only in case or by a
// small typo, the usual cause of an unknown key.
func suggest(key string, fields map[string][]int) string {
	for f := range fields {
		if strings.EqualFold(f, key) || strings.ReplaceAll(f, "_", "") == strings.ReplaceAll(strings.ToLower(key), "-", "") {
			return fmt.Sprintf(" (did you mean %q?)", f)
		}
	}
	return ""
}

// Validate checks the decoded config as a whole.
func (c *Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen", "want host:port, got %q", c.Listen)
	}
	if c.AdminListen != "" {
		if _, port, err := net.SplitHostPort(c.AdminListen); err != nil {
			add("admin_listen", "want host:port, got %q", c.AdminListen)
		} else if c.AdminListen == c.Listen && port != "0" {
			add("admin_listen", "%q is listen's address; the admin listener needs its own port", c.AdminListen)
		}
	}
	if c.MaxBodyBytes <= 0 {
		add("max_body_bytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	if c.MaxHeaderBytes < 4096 {
		add("max_header_bytes", "must be at least 4096, got %d", c.MaxHeaderBytes)
	}
	if c.MaxConnections < 0 {
		add("max_connections", "must be 0 (no cap) or positive, got %d", c.MaxConnections)
	}
	if c.MaxBodyBytesInFlight < 0 {
		add("max_body_bytes_in_flight", "must be 0 (no cap) or positive, got %d", c.MaxBodyBytesInFlight)
	} else if c.MaxBodyBytesInFlight > 0 && c.MaxBodyBytesInFlight < c.MaxBodyBytes {
		add("max_body_bytes_in_flight", "must be 0 (no cap) or at least max_body_bytes (%d), got %d", c.MaxBodyBytes, c.MaxBodyBytesInFlight)
	}
	if c.CountCacheBytes < 0 || c.CountCacheBytes > 0 && c.CountCacheBytes < MinCountCacheBytes {
		add("count_cache_bytes", "must be 0 (off) or at least %d, got %d", MinCountCacheBytes, c.CountCacheBytes)
	}
	if c.MaxAudioBodyBytes <= 0 {
		add("max_audio_body_bytes", "must be positive, got %d", c.MaxAudioBodyBytes)
	}
	for _, d := range []struct {
		path string
		v    Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout},
		{"read_body_timeout", c.ReadBodyTimeout},
		{"read_audio_body_timeout", c.ReadAudioBodyTimeout},
		{"idle_timeout", c.IdleTimeout},
		{"first_byte_timeout", c.FirstByteTimeout},
		{"stream_idle_timeout", c.StreamIdleTimeout},
		{"drain_timeout", c.DrainTimeout},
		{"health.warmup_timeout", c.Health.WarmupTimeout},
		{"scrape_interval", c.ScrapeInterval},
		{"eject_for", c.EjectFor},
		{"triage_window", c.TriageWindow},
		{"backend_dial_timeout", c.BackendDialTimeout},
		{"health.interval", c.Health.Interval},
		{"health.timeout", c.Health.Timeout},
		{"health.warmup_backoff_max", c.Health.WarmupBackoffMax},
	} {
		if d.v <= 0 {
			add(d.path, "must be positive, got %s", d.v.D())
		}
	}
	if c.DrainDelay < 0 {
		add("drain_delay", "must not be negative, got %s", c.DrainDelay.D())
	}
	if c.Health.UnhealthyThreshold < 1 {
		add("health.unhealthy_threshold", "must be at least 1, got %d", c.Health.UnhealthyThreshold)
	}
	if len(c.PriorityClasses) == 0 {
		add("priority_classes", "at least one class is required")
	}
	seenClass := map[string]bool{}
	for i, pc := range c.PriorityClasses {
		if pc == "" || seenClass[pc] {
			add(fmt.Sprintf("priority_classes[%d]", i), "must be a unique, non-empty name, got %q", pc)
		}
		seenClass[pc] = true
	}
	if !seenClass[c.DefaultPriority] {
		add("default_priority", "%q is not one of priority_classes %v", c.DefaultPriority, c.PriorityClasses)
	}
	if c.SaturatedWaiting < 0 || c.SaturatedKVUsage < 0 || c.SaturatedKVUsage > 1 {
		add("saturated_kv_usage", "want saturated_waiting >= 0 and saturated_kv_usage from 0 to 1")
	}
	t := c.Triage
	if t.Baseline < 0 || t.TTFTMinDelta < 0 || t.TPOTMinDelta < 0 || t.MinSamples < 0 || t.MinFailures < 0 ||
		t.TTFTRiseFactor < 0 || t.TPOTStableFactor < 0 || t.TPOTRiseFactor < 0 || t.SlowPathFactor < 0 ||
		t.MinFailureShare < 0 || t.MinFailureShare > 1 || t.KVFull < 0 || t.KVFull > 1 {
		add("triage", "thresholds must not be negative; shares and kv_full are fractions from 0 to 1")
	}
	if c.EjectAfter < 0 {
		add("eject_after", "must not be negative, got %d", c.EjectAfter)
	}
	if c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100 {
		add("max_ejection_percent", "want a percentage from 0 to 100, got %d", c.MaxEjectionPercent)
	}
	errs = append(errs, c.Store.validate()...)
	if c.Health.WarmupPrompt == "" {
		add("health.warmup_prompt", "must not be empty")
	}
	if tc := c.Tracing; tc.Endpoint != "" {
		if u, err := url.Parse(tc.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("tracing.endpoint", "want an http:// or https:// URL, got %q", tc.Endpoint)
		}
	}
	switch c.Tracing.Protocol {
	case "", TracingHTTP, TracingGRPC:
	default:
		add("tracing.protocol", "want %s or %s, got %q", TracingGRPC, TracingHTTP, c.Tracing.Protocol)
	}
	if r := c.Tracing.SamplingRatio; r != nil && !(*r >= 0 && *r <= 1) {
		add("tracing.sampling_ratio", "want a fraction from 0 to 1, got %v", *r)
	}
	if len(c.Models) == 0 {
		add("models", "at least one model is required")
	}
	names := map[string]int{}
	for i, m := range c.Models {
		p := fmt.Sprintf("models[%d]", i)
		if m.Name == "" {
			add(p+".name", "is required")
		} else if j, dup := names[m.Name]; dup {
			add(p+".name", "%q is already models[%d].name", m.Name, j)
		} else {
			names[m.Name] = i
		}
		switch m.OnOverflow {
		case "", "reject", "clamp":
		default:
			add(p+".on_overflow", "want reject or clamp, got %q", m.OnOverflow)
		}
		switch m.TokenizerCheck {
		case "", TokenizerEnforce, TokenizerWarn, TokenizerOff:
		default:
			add(p+".tokenizer_check", "want enforce, warn or off, got %q", m.TokenizerCheck)
		}
		if m.TokenizeCheckRate < 0 || m.TokenizeCheckRate > 1 {
			add(p+".tokenize_check_rate", "want a fraction from 0 to 1, got %v", m.TokenizeCheckRate)
		}
		if m.MaxModelLen < 0 {
			add(p+".max_model_len", "must not be negative, got %d", m.MaxModelLen)
		}
		if len(m.Backends) == 0 {
			add(p+".backends", "at least one backend is required")
		}
		discovered := slices.ContainsFunc(m.Backends, func(b BackendConfig) bool { return b.Discovered() })
		if m.MinReady < 0 || (!discovered && len(m.Backends) > 0 && m.MinReady > len(m.Backends)) {
			add(p+".min_ready", "want 1 to %d (the number of backends), got %d", len(m.Backends), m.MinReady)
		}
		if m.FirstByteTimeout < 0 || m.StreamIdleTimeout < 0 || m.QueueTimeout < 0 {
			add(p, "timeouts must not be negative")
		}
		if m.QueueSize < 0 || m.ExpectedOutputTokens < 0 || m.PrefixAffinityTokens < 0 {
			add(p, "queue_size, expected_output_tokens and prefix_affinity_tokens must not be negative")
		}
		urls := map[string]int{}
		for j, b := range m.Backends {
			bp := fmt.Sprintf("%s.backends[%d]", p, j)
			switch {
			case (b.URL != "") == b.Discovered() || (b.DNS != "" && b.SRV != ""):
				add(bp, "want exactly one of url, dns (name:port) and srv (_service._proto.name)")
			case b.DNS != "":
				if err := checkDNSName(b.DNS); err != nil {
					add(bp+".dns", "%v", err)
				}
			case b.SRV != "":
				if !strings.HasPrefix(b.SRV, "_") || strings.Count(strings.TrimSuffix(b.SRV, "."), ".") < 2 {
					add(bp+".srv", "want an SRV name such as _http._tcp.vllm.default.svc.cluster.local, got %q", b.SRV)
				}
			default:
				if err := checkBackendURL(b.URL); err != nil {
					add(bp+".url", "%v", err)
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
				if k, dup := urls[key+" "+id]; dup {
					add(bp+"."+key, "%q is already %s.backends[%d].%s", id, p, k, key)
				} else {
					urls[key+" "+id] = j
				}
			}
			if b.DNSInterval < 0 || (b.DNSInterval > 0 && !b.Discovered()) {
				add(bp+".dns_interval", "want a positive duration, with dns or srv only")
			}
			if b.MaxInFlight < 0 || b.KVTokens < 0 {
				add(bp, "max_in_flight and kv_tokens must not be negative")
			}
			if b.APIKeyEnv != "" {
				if _, ok := os.LookupEnv(b.APIKeyEnv); !ok {
					add(bp+".api_key_env", "environment variable %s is not set", b.APIKeyEnv)
				}
			}
		}
	}
	if c.Resolver != "" {
		if _, port, err := net.SplitHostPort(c.Resolver); err != nil || port == "" {
			add("resolver", "want host:port of a DNS server, got %q", c.Resolver)
		}
	}
	if c.Auth != nil {
		errs = append(errs, c.Auth.validate(c)...)
	}
	return errors.Join(errs...)
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
