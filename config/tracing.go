package config

import (
	"net/url"
)

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

// validate checks the tracing section (tracing.*).
func (tc *TracingConfig) validate(p *problems) {
	if tc.Endpoint != "" {
		if u, err := url.Parse(tc.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("tracing.endpoint", "want an http:// or https:// URL, got %q", tc.Endpoint)
		}
	}
	switch tc.Protocol {
	case "", TracingHTTP, TracingGRPC:
	default:
		p.add("tracing.protocol", "want %s or %s, got %q", TracingGRPC, TracingHTTP, tc.Protocol)
	}
	if r := tc.SamplingRatio; r != nil && !(*r >= 0 && *r <= 1) {
		p.add("tracing.sampling_ratio", "want a fraction from 0 to 1, got %v", *r)
	}
}
