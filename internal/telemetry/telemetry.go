// Package telemetry builds maitred's OpenTelemetry trace pipeline: an OTLP
// exporter (HTTP/protobuf or gRPC), a sampler and a Provider, from the
// config's tracing section and the standard OTEL_* environment variables.
// It sets no global state: the provider it returns is handed to the
// gateway (gateway.Options.Tracing) and flushed by Shutdown when the
// process drains.
//
// # Precedence
//
// What the config names wins; the environment fills what it leaves unset;
// then the defaults. Tracing is off unless an endpoint is named, by
// tracing.endpoint, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the traces URL,
// used as is) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: /v1/traces is
// appended for HTTP). OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none
// turn it off whatever else is set.
//
//   - protocol: tracing.protocol, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
//     OTEL_EXPORTER_OTLP_PROTOCOL; default http/protobuf.
//   - sampling: tracing.sampling_ratio (parent-based: a sampled caller's
//     trace is always kept); else OTEL_TRACES_SAMPLER and
//     OTEL_TRACES_SAMPLER_ARG; default parentbased_always_on.
//   - service name: tracing.service_name, OTEL_SERVICE_NAME; default
//     "maitred".
//
// The exporters read their other settings from the environment:
// OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE,
// _CLIENT_CERTIFICATE, _CLIENT_KEY and their _TRACES_ forms.
//
// # Traces
//
// The gateway does not use the SDK's spans: it fills a Trace per request
// (trace.go), plain data with the request's spans, and hands it over
// whole at the request's end (Provider.Finish). The provider samples with
// the SDK's samplers (Begin asks the configured one), batches traces and
// exports them. A trace's structures are kept on a free list and reused,
// so that tracing every request costs a handful of allocations, not the
// SDK's dozens (a span object, its attribute copies and an end-of-span
// snapshot per span).
//
// # Exporters
//
// HTTP/protobuf uses this package's own exporter (otlphttp.go): it sends
// the ExportTraceServiceRequest the standard otlptracehttp exporter sends
// for the same spans, field for field (a differential test holds them
// equal), written in the protobuf wire format straight from the traces
// (otlpwire.go): each trace's spans are encoded by Finish, on the
// request's goroutine while they are in its cache, and the batcher's
// goroutine only frames them with the resource and scope, encoded once.
// It keeps the standard exporter's behaviour: the settings above (a
// malformed one is an error here, where that one logged and ignored it),
// gzip, a proxy from the environment, retries of 429, 502, 503 and 504
// honouring Retry-After with bounded backoff. gRPC sends the same
// request, encoded by the same encoder and decoded into the protobuf
// messages OpenTelemetry's otlptracegrpc client takes (otlpgrpc.go): its
// connection, OTEL_EXPORTER_OTLP_* settings and retries are the standard
// exporter's. No SDK span, and no SDK test package, is involved.
//
// Traces are batched by this package's batcher (batcher.go), for either
// protocol, with the SDK's batch span processor's settings
// (OTEL_BSP_SCHEDULE_DELAY, _EXPORT_TIMEOUT, _MAX_QUEUE_SIZE,
// _MAX_EXPORT_BATCH_SIZE, counted in spans) and behaviour (a full queue
// drops, never blocks a request), but a trace's finish appends it under a
// mutex instead of waking the exporting goroutine for each span.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/maitred-dev/maitred/config"
)

// Protocols an exporter speaks.
const (
	ProtocolHTTP = config.TracingHTTP
	ProtocolGRPC = config.TracingGRPC
)

// Settings are the resolved tracing settings: config, then environment,
// then defaults. Enabled is false when no endpoint is named.
type Settings struct {
	Enabled     bool
	Endpoint    string // the full URL the exporter sends to
	Protocol    string // ProtocolHTTP or ProtocolGRPC
	ServiceName string
	Sampler     sdktrace.Sampler
	// SamplerName describes the sampler for the start-up log line.
	SamplerName string
}

// Resolve works out the settings from the config's tracing section and
// the environment (getenv, os.Getenv in production). A malformed OTEL_*
// value is an error naming the variable.
func Resolve(c config.TracingConfig, getenv func(string) string) (Settings, error) {
	s := Settings{Protocol: c.Protocol, ServiceName: c.ServiceName}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return s, nil
	}
	if s.Protocol == "" {
		s.Protocol = firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch s.Protocol {
	case "":
		s.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: want %s or %s, got %q", ProtocolHTTP, ProtocolGRPC, s.Protocol)
	}
	switch {
	case c.Endpoint != "":
		s.Endpoint = c.Endpoint
		if u, err := url.Parse(c.Endpoint); err == nil && s.Protocol == ProtocolHTTP && (u.Path == "" || u.Path == "/") {
			s.Endpoint = strings.TrimSuffix(c.Endpoint, "/") + "/v1/traces"
		}
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		s.Endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		s.Endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if s.Protocol == ProtocolHTTP {
			s.Endpoint = strings.TrimSuffix(s.Endpoint, "/") + "/v1/traces"
		}
	default:
		return s, nil // off: no endpoint named
	}
	if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("tracing endpoint: want an http:// or https:// URL, got %q", s.Endpoint)
	}
	s.Enabled = true
	if s.ServiceName == "" {
		s.ServiceName = getenv("OTEL_SERVICE_NAME")
	}
	if s.ServiceName == "" {
		s.ServiceName = "maitred"
	}
	var err error
	if c.SamplingRatio != nil {
		r := *c.SamplingRatio
		s.Sampler, s.SamplerName = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), "parentbased_traceidratio "+strconv.FormatFloat(r, 'g', -1, 64)
	} else if s.Sampler, s.SamplerName, err = envSampler(getenv); err != nil {
		return s, err
	}
	return s, nil
}

// envSampler is OTEL_TRACES_SAMPLER (+ _ARG), as the specification names
// them; unset, parentbased_always_on.
func envSampler(getenv func(string) string) (sdktrace.Sampler, string, error) {
	name := getenv("OTEL_TRACES_SAMPLER")
	ratio := func() (float64, error) {
		arg := getenv("OTEL_TRACES_SAMPLER_ARG")
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return 0, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: want a ratio from 0 to 1, got %q", arg)
		}
		return r, nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), "parentbased_always_on", nil
	case "always_on":
		return sdktrace.AlwaysSample(), name, nil
	case "always_off":
		return sdktrace.NeverSample(), name, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), name, nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, "", err
		}
		desc := name + " " + strconv.FormatFloat(r, 'g', -1, 64)
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), desc, nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), desc, nil
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER: want always_on, always_off, traceidratio or their parentbased_ forms, got %q", name)
}

func firstSet(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// ScopeName is the instrumentation scope of maitred's spans.
const ScopeName = "github.com/maitred-dev/maitred/gateway"

// Provider is a running trace pipeline: the gateway begins a Trace per
// request (trace.go) and finishes it; the provider samples it, batches it
// and exports it. Safe for concurrent use.
type Provider struct {
	Settings Settings
	freeMu   sync.Mutex
	free     []*Trace // released traces, for reuse (trace.go)
	carriers []*Trace // released carriers of encoded spans, likewise
	exp      exporter
	queue    *batcher   // nil with Options.Sync: each trace is exported at its finish
	wire     bool       // the exporter sends the OTLP wire format: Finish encodes
	syncMu   sync.Mutex // Options.Sync: one export at a time
}

// ForceFlush exports the traces finished so far, within ctx.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p.queue == nil {
		return nil
	}
	return p.queue.ForceFlush(ctx)
}

// Shutdown exports the traces still buffered and stops the exporter,
// within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.queue == nil {
		return p.exp.shutdown(ctx)
	}
	return p.queue.Shutdown(ctx)
}

// Options tune New beyond the settings (tests; embedders).
type Options struct {
	// Version is maitred's version, sent as service.version when set.
	Version string
	// Sync exports each trace as it finishes instead of in batches (tests).
	Sync bool
	// Getenv reads the OTLP/HTTP exporter's OTEL_EXPORTER_OTLP_*
	// settings and the batcher's OTEL_BSP_*; nil is os.Getenv.
	Getenv func(string) string
}

// New starts the trace pipeline the settings describe, or returns nil
// when tracing is off. It does not connect: the exporter dials on its
// first export, and a collector that is down costs dropped spans, never
// requests.
func New(ctx context.Context, s Settings, o Options) (*Provider, error) {
	if !s.Enabled {
		return nil, nil
	}
	if s.Sampler == nil {
		return nil, errors.New("tracing: no sampler")
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	bs, err := readBatchSettings(getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := newResource(s, o.Version)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	var exp exporter
	wire := false
	switch s.Protocol {
	case ProtocolGRPC:
		client := otlptracegrpc.NewClient(otlptracegrpc.WithEndpointURL(s.Endpoint))
		if err = client.Start(ctx); err == nil {
			exp = &grpcExporter{client: client, enc: newSpanEncoder(res.Attributes(), ScopeName)}
		}
	case ProtocolHTTP:
		var hs httpSettings
		if hs, err = readHTTPSettings(getenv, os.ReadFile); err == nil {
			ua := "maitred"
			if o.Version != "" {
				ua += "/" + o.Version
			}
			exp, err = newHTTPExporter(s.Endpoint, hs, ua, newSpanEncoder(res.Attributes(), ScopeName))
			wire = true
		}
	default:
		err = fmt.Errorf("unknown protocol %q", s.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	p := &Provider{Settings: s, exp: exp, wire: wire}
	if !o.Sync {
		p.queue = newBatcher(exp, bs, p.release)
	}
	return p, nil
}

// newResource is the resource of maitred's spans: service.name and
// service.version over what OTEL_RESOURCE_ATTRIBUTES names, as the SDK's
// TracerProvider builds it (resource.Environment reads the process's
// environment, whatever Options.Getenv says).
func newResource(s Settings, version string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", s.ServiceName)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	return resource.Merge(resource.Environment(), resource.NewSchemaless(attrs...))
}
