package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
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
	// H2C serves HTTP/2 cleartext with prior knowledge on Listen beside
	// HTTP/1.1 (what Envoy, ingress controllers and service meshes speak
	// to an upstream): a connection that opens with HTTP/2's preface is
	// served as HTTP/2, any other as HTTP/1.1. An HTTP/1.1 request asking
	// to upgrade (Upgrade: h2c) is never upgraded. Backends are always
	// reached over HTTP/1.1.
	H2C bool `yaml:"h2c" reload:"restart"`
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
	// ScrapeBudget bounds the whole fleet's /metrics scrapes a second:
	// past it, every backend's scrape interval grows to n / budget (n the
	// fleet's backends), and the staleness limits above grow with it.
	// auto: 64 backends at scrape_interval (256 a second at 250ms), so a
	// fleet of up to 64 backends is scraped every scrape_interval.
	ScrapeBudget Budget `yaml:"scrape_budget" reload:"restart"`
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
		lk, err := loadKeysFile(a.KeysFile, &cfg)
		if err != nil {
			return Config{}, fmt.Errorf("%s: auth.keys_file: %w", path, err)
		}
		a.file = &loadedKeysHolder{}
		a.file.keys.Store(lk)
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

// Validate checks the decoded config as a whole: each section checks
// itself, naming key paths, and every problem is reported.
func (c *Config) Validate() error {
	var p problems
	c.validateServer(&p)
	c.validateTimeouts(&p)
	c.Health.validate(&p)
	c.validateQueues(&p)
	c.validateBackendPolicy(&p)
	c.Triage.validate(&p)
	p = append(p, c.Store.validate()...)
	c.Tracing.validate(&p)
	c.validateModels(&p)
	if c.Auth != nil {
		p = append(p, c.Auth.validate(c)...)
	}
	return errors.Join(p...)
}

// problems collects what Validate finds, each a *FieldError.
type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// positive adds a problem when the duration at path is not positive.
func (p *problems) positive(path string, d Duration) {
	if d <= 0 {
		p.add(path, "must be positive, got %s", d.D())
	}
}

// validateServer checks the listeners and what they accept: addresses,
// connection, header and body limits.
func (c *Config) validateServer(p *problems) {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen", "want host:port, got %q", c.Listen)
	}
	if c.AdminListen != "" {
		if _, port, err := net.SplitHostPort(c.AdminListen); err != nil {
			p.add("admin_listen", "want host:port, got %q", c.AdminListen)
		} else if c.AdminListen == c.Listen && port != "0" {
			p.add("admin_listen", "%q is listen's address; the admin listener needs its own port", c.AdminListen)
		}
	}
	if c.MaxBodyBytes <= 0 {
		p.add("max_body_bytes", "must be positive, got %d", c.MaxBodyBytes)
	}
	if c.MaxHeaderBytes < 4096 {
		p.add("max_header_bytes", "must be at least 4096, got %d", c.MaxHeaderBytes)
	}
	if c.MaxConnections < 0 {
		p.add("max_connections", "must be 0 (no cap) or positive, got %d", c.MaxConnections)
	}
	if c.MaxBodyBytesInFlight < 0 {
		p.add("max_body_bytes_in_flight", "must be 0 (no cap) or positive, got %d", c.MaxBodyBytesInFlight)
	} else if c.MaxBodyBytesInFlight > 0 && c.MaxBodyBytesInFlight < c.MaxBodyBytes {
		p.add("max_body_bytes_in_flight", "must be 0 (no cap) or at least max_body_bytes (%d), got %d", c.MaxBodyBytes, c.MaxBodyBytesInFlight)
	}
	if c.CountCacheBytes < 0 || c.CountCacheBytes > 0 && c.CountCacheBytes < MinCountCacheBytes {
		p.add("count_cache_bytes", "must be 0 (off) or at least %d, got %d", MinCountCacheBytes, c.CountCacheBytes)
	}
	if c.MaxAudioBodyBytes <= 0 {
		p.add("max_audio_body_bytes", "must be positive, got %d", c.MaxAudioBodyBytes)
	}
}

// validateTimeouts checks the top-level timeouts and intervals.
func (c *Config) validateTimeouts(p *problems) {
	p.positive("read_header_timeout", c.ReadHeaderTimeout)
	p.positive("read_body_timeout", c.ReadBodyTimeout)
	p.positive("read_audio_body_timeout", c.ReadAudioBodyTimeout)
	p.positive("idle_timeout", c.IdleTimeout)
	p.positive("first_byte_timeout", c.FirstByteTimeout)
	p.positive("stream_idle_timeout", c.StreamIdleTimeout)
	p.positive("drain_timeout", c.DrainTimeout)
	p.positive("scrape_interval", c.ScrapeInterval)
	c.ScrapeBudget.validate(p, "scrape_budget")
	p.positive("eject_for", c.EjectFor)
	p.positive("triage_window", c.TriageWindow)
	p.positive("backend_dial_timeout", c.BackendDialTimeout)
	if c.DrainDelay < 0 {
		p.add("drain_delay", "must not be negative, got %s", c.DrainDelay.D())
	}
}

// validateQueues checks the priority classes and the default one.
func (c *Config) validateQueues(p *problems) {
	if len(c.PriorityClasses) == 0 {
		p.add("priority_classes", "at least one class is required")
	}
	seen := map[string]bool{}
	for i, pc := range c.PriorityClasses {
		if pc == "" || seen[pc] {
			p.add(fmt.Sprintf("priority_classes[%d]", i), "must be a unique, non-empty name, got %q", pc)
		}
		seen[pc] = true
	}
	if !seen[c.DefaultPriority] {
		p.add("default_priority", "%q is not one of priority_classes %v", c.DefaultPriority, c.PriorityClasses)
	}
}

// validateBackendPolicy checks how backends are judged and found:
// saturation, outlier ejection, the DNS resolver.
func (c *Config) validateBackendPolicy(p *problems) {
	if c.SaturatedWaiting < 0 || c.SaturatedKVUsage < 0 || c.SaturatedKVUsage > 1 {
		p.add("saturated_kv_usage", "want saturated_waiting >= 0 and saturated_kv_usage from 0 to 1")
	}
	if c.EjectAfter < 0 {
		p.add("eject_after", "must not be negative, got %d", c.EjectAfter)
	}
	if c.MaxEjectionPercent < 0 || c.MaxEjectionPercent > 100 {
		p.add("max_ejection_percent", "want a percentage from 0 to 100, got %d", c.MaxEjectionPercent)
	}
	if c.Resolver != "" {
		if _, port, err := net.SplitHostPort(c.Resolver); err != nil || port == "" {
			p.add("resolver", "want host:port of a DNS server, got %q", c.Resolver)
		}
	}
}
