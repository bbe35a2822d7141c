package telemetry

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

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

func TestNewRejects(t *testing.T) {
	on := Settings{Enabled: true, Endpoint: "http://c:4318/v1/traces", Protocol: ProtocolHTTP, ServiceName: "s", Sampler: sdktrace.AlwaysSample()}
	noSampler := on
	noSampler.Sampler = nil
	badProtocol := on
	badProtocol.Protocol = "http/json"
	for _, tt := range []struct {
		name string
		s    Settings
		env  func(string) string
		want string
	}{
		{"no sampler", noSampler, env(), "no sampler"},
		{"a bad batch setting", on, env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"), "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"},
		{"a bad exporter setting", on, env("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"), "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{"an unknown protocol", badProtocol, env(), "http/json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(t.Context(), tt.s, Options{Getenv: tt.env})
			if p != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, %v; want an error naming %s", p, err, tt.want)
			}
		})
	}
}

// TestNewExportsOverHTTP: a provider New builds exports a finished,
// sampled trace to the collector, at its finish (Sync) or at a flush
// (batched), with the resource, scope and user agent it names; an
// unsampled trace is never sent.
func TestNewExportsOverHTTP(t *testing.T) {
	for _, isSync := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync", false: "batched"}[isSync], func(t *testing.T) {
			c := newCollector(t, nil)
			s := Settings{Enabled: true, Endpoint: c.URL + "/v1/traces", Protocol: ProtocolHTTP, ServiceName: "svc", Sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())}
			p, err := New(t.Context(), s, Options{Version: "v1.2.3", Sync: isSync, Getenv: env("OTEL_BSP_SCHEDULE_DELAY", "3600000")})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			unsampled, _ := remoteContext(t, 0, "")
			for _, ctx := range []context.Context{context.Background(), unsampled} {
				tr := p.Begin(ctx, "POST", "/v1/chat/completions", trace.SpanKindServer, time.Now())
				tr.Start("attempt", "", trace.SpanKindClient, time.Now()).End(time.Now())
				tr.Root().End(time.Now())
				p.Finish(tr)
			}
			if err := p.ForceFlush(t.Context()); err != nil {
				t.Fatal(err)
			}
			reqs := c.requests(t)
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			rs := reqs[0].ResourceSpans[0]
			got := map[string]string{}
			for _, kv := range rs.Resource.Attributes {
				got[kv.Key] = kv.Value.GetStringValue()
			}
			spans := rs.ScopeSpans[0].Spans
			if got["service.name"] != "svc" || got["service.version"] != "v1.2.3" || rs.ScopeSpans[0].Scope.Name != ScopeName ||
				len(spans) != 2 || spans[0].Name != "POST /v1/chat/completions" || spans[1].Name != "attempt" {
				t.Fatalf("request %v", reqs[0])
			}
			if ua := c.reqs[0].Header.Get("User-Agent"); ua != "maitred/v1.2.3" {
				t.Fatalf("User-Agent %q", ua)
			}
			if err := p.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// traceCollector is an in-process OTLP/gRPC collector that keeps the
// requests it is sent.
type traceCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (c *traceCollector) Export(_ context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestGRPCExporterMatchesHTTP: the gRPC exporter New builds sends, to a
// real gRPC collector, the request the HTTP one sends for the same traces.
func TestGRPCExporterMatchesHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gc := &traceCollector{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, gc)
	go srv.Serve(l)
	defer srv.Stop()

	s := Settings{Enabled: true, Endpoint: "http://" + l.Addr().String(), Protocol: ProtocolGRPC, ServiceName: "svc", Sampler: sdktrace.AlwaysSample()}
	p, err := New(t.Context(), s, Options{Version: "v1", Sync: true, Getenv: env()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.wire {
		t.Fatal("the gRPC exporter does not send the wire format: Finish must not encode")
	}
	remote, _ := remoteContext(t, trace.FlagsSampled, "a=b")
	var traces []*Trace
	for i, ctx := range []context.Context{context.Background(), remote} {
		tr := p.Begin(ctx, "POST", "/v1/x", trace.SpanKindServer, time.Unix(100, 0))
		everyAttr(tr.Root())
		tr.Root().Event("first_token", time.Unix(101, 0))
		c := tr.Start("attempt", "", trace.SpanKindClient, time.Unix(101, 0))
		if i == 1 {
			c.Fail("backend_down")
		}
		c.End(time.Unix(102, 0))
		tr.Root().End(time.Unix(103, 0))
		traces = append(traces, tr)
	}
	if err := p.exp.export(t.Context(), traces); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	hc := newCollector(t, nil)
	res, err := newResource(s, "v1")
	if err != nil {
		t.Fatal(err)
	}
	x, err := newHTTPExporter(hc.URL, httpSettings{timeout: 5 * time.Second}, "t", newSpanEncoder(res.Attributes(), ScopeName))
	if err != nil {
		t.Fatal(err)
	}
	defer x.shutdown(context.Background())
	if err := x.export(t.Context(), traces); err != nil {
		t.Fatal(err)
	}
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if len(gc.reqs) != 1 {
		t.Fatalf("%d gRPC requests, want 1", len(gc.reqs))
	}
	requireSameRequest(t, gc.reqs[0], hc.requests(t)[0])
}
