package telemetry

import (
	"strings"
	"testing"

	"github.com/maitred-dev/maitred/config"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestResolve: the config wins, the OTEL_* environment fills what it
// leaves unset, and tracing is off unless an endpoint is named.
func TestResolve(t *testing.T) {
	half := 0.5
	tests := []struct {
		name     string
		cfg      config.TracingConfig
		env      func(string) string
		enabled  bool
		endpoint string
		protocol string
		service  string
		sampler  string
	}{
		{name: "off by default", env: env()},
		{name: "config endpoint without a path", cfg: config.TracingConfig{Endpoint: "http://c:4318"}, env: env(),
			enabled: true, endpoint: "http://c:4318/v1/traces", protocol: ProtocolHTTP, service: "maitred", sampler: "parentbased_always_on"},
		{name: "config endpoint with a path", cfg: config.TracingConfig{Endpoint: "https://c/otlp/traces", SamplingRatio: &half, ServiceName: "gw"}, env: env("OTEL_SERVICE_NAME", "other", "OTEL_TRACES_SAMPLER", "always_off"),
			enabled: true, endpoint: "https://c/otlp/traces", protocol: ProtocolHTTP, service: "gw", sampler: "parentbased_traceidratio 0.5"},
		{name: "base endpoint from env", env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/", "OTEL_SERVICE_NAME", "edge"),
			enabled: true, endpoint: "http://c:4318/v1/traces", protocol: ProtocolHTTP, service: "edge", sampler: "parentbased_always_on"},
		{name: "traces endpoint from env is used as is", env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
			enabled: true, endpoint: "http://c:4318/custom", protocol: ProtocolHTTP, service: "maitred", sampler: "parentbased_always_on"},
		{name: "grpc from env", env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"),
			enabled: true, endpoint: "http://c:4317", protocol: ProtocolGRPC, service: "maitred", sampler: "traceidratio 0.25"},
		{name: "config protocol wins", cfg: config.TracingConfig{Protocol: config.TracingHTTP}, env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
			enabled: true, endpoint: "http://c:4317/v1/traces", protocol: ProtocolHTTP, service: "maitred", sampler: "parentbased_always_on"},
		{name: "sdk disabled", cfg: config.TracingConfig{Endpoint: "http://c:4318"}, env: env("OTEL_SDK_DISABLED", "true")},
		{name: "exporter none", env: env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_EXPORTER", "none")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Resolve(tt.cfg, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if s.Enabled != tt.enabled {
				t.Fatalf("Enabled = %v, want %v (%+v)", s.Enabled, tt.enabled, s)
			}
			if !tt.enabled {
				return
			}
			if s.Endpoint != tt.endpoint || s.Protocol != tt.protocol || s.ServiceName != tt.service || s.SamplerName != tt.sampler || s.Sampler == nil {
				t.Errorf("got endpoint %q protocol %q service %q sampler %q; want %q %q %q %q",
					s.Endpoint, s.Protocol, s.ServiceName, s.SamplerName, tt.endpoint, tt.protocol, tt.service, tt.sampler)
			}
		})
	}
}

func TestResolveRejectsBadEnvironment(t *testing.T) {
	for _, tt := range []struct {
		env  func(string) string
		want string
	}{
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_SAMPLER", "sometimes"), "OTEL_TRACES_SAMPLER"},
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"), "OTEL_TRACES_SAMPLER_ARG"},
		{env("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318"), "tracing endpoint"},
	} {
		if _, err := Resolve(config.TracingConfig{}, tt.env); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want it to name %s", err, tt.want)
		}
	}
}

func TestNewIsNilWhenOff(t *testing.T) {
	tp, err := New(t.Context(), Settings{}, Options{})
	if tp != nil || err != nil {
		t.Fatalf("New(off) = %v, %v", tp, err)
	}
}
