package telemetry

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func oneSpan(t *testing.T) []sdktrace.ReadOnlySpan {
	return record(t, resource.NewSchemaless(attribute.String("service.name", "maitred")), sdktrace.NewSpanLimits(), func(tp trace.TracerProvider) {
		_, sp := tp.Tracer("gw").Start(context.Background(), "one")
		sp.End()
	})
}

var quickRetry = retryPolicy{initial: time.Millisecond, maxDelay: 5 * time.Millisecond, maxElapsed: 5 * time.Second}

func TestReadHTTPSettings(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     func(string) string
		want    httpSettings
		wantErr string
	}{
		{name: "defaults", env: env(), want: httpSettings{timeout: 10 * time.Second}},
		{name: "headers, per-signal keys winning, values unescaped and trimmed",
			env:  env("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic%20abc, x-a = 1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=2"),
			want: httpSettings{timeout: 10 * time.Second, headers: map[string]string{"Authorization": "Basic abc", "x-a": "2"}}},
		{name: "timeout and gzip, per-signal winning",
			env:  env("OTEL_EXPORTER_OTLP_TIMEOUT", "500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500", "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
			want: httpSettings{timeout: 2500 * time.Millisecond, gzip: true}},
		{name: "compression none", env: env("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"),
			want: httpSettings{timeout: 10 * time.Second}},
		{name: "bad header", env: env("OTEL_EXPORTER_OTLP_HEADERS", "novalue"), wantErr: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "bad timeout", env: env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s"), wantErr: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{name: "bad compression", env: env("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"), wantErr: "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{name: "missing certificate", env: env("OTEL_EXPORTER_OTLP_CERTIFICATE", filepath.Join(dir, "none.pem")), wantErr: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{name: "not a certificate", env: env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM), wantErr: "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
		{name: "bad client key pair", env: env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", notPEM, "OTEL_EXPORTER_OTLP_CLIENT_KEY", notPEM), wantErr: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readHTTPSettings(tt.env, os.ReadFile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to name %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.timeout != tt.want.timeout || got.gzip != tt.want.gzip || got.tls != nil || len(got.headers) != len(tt.want.headers) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for k, v := range tt.want.headers {
				if got.headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, got.headers[k], v)
				}
			}
		})
	}
}

// TestHTTPExporterRequest: the request carries the protobuf content type,
// the configured headers and, with gzip, a compressed body that decodes
// to the spans.
func TestHTTPExporterRequest(t *testing.T) {
	for _, gz := range []bool{false, true} {
		c := newCollector(t, nil)
		x, err := newHTTPExporter(c.URL+"/custom/path", httpSettings{timeout: time.Second, gzip: gz, headers: map[string]string{"Authorization": "Bearer t"}}, "maitred/test")
		if err != nil {
			t.Fatal(err)
		}
		if err := x.ExportSpans(t.Context(), oneSpan(t)); err != nil {
			t.Fatal(err)
		}
		x.Shutdown(t.Context())
		r, body := c.reqs[0], c.bodies[0]
		if r.Method != http.MethodPost || r.URL.Path != "/custom/path" || r.Header.Get("Content-Type") != "application/x-protobuf" ||
			r.Header.Get("Authorization") != "Bearer t" || r.Header.Get("User-Agent") != "maitred/test" {
			t.Fatalf("request %s %s, headers %v", r.Method, r.URL.Path, r.Header)
		}
		if gz {
			if r.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("Content-Encoding %q, want gzip", r.Header.Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if m.ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "one" {
			t.Fatalf("got %v", &m)
		}
	}
}

// TestHTTPExporterRetries: 429, 502, 503 and 504 are tried again (after
// at least the Retry-After asked); other failures are not; a partial
// success answer is no error.
func TestHTTPExporterRetries(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // answered in turn, then 200
		after    string
		tries    int
		wantErr  bool
	}{
		{"accepted", nil, "", 1, false},
		{"throttled then accepted", []int{429, 503, 502, 504}, "", 5, false},
		{"retry-after honoured", []int{503}, "1", 2, false},
		{"bad request is not retried", []int{400}, "", 1, true},
		{"server error is not retried", []int{500}, "", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			c := newCollector(t, func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1)) - 1
				if i < len(tt.statuses) {
					if tt.after != "" {
						w.Header().Set("Retry-After", tt.after)
					}
					http.Error(w, "no", tt.statuses[i])
					return
				}
				// A partial success: one span rejected.
				w.Header().Set("Content-Type", "application/x-protobuf")
				b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "x"}})
				w.Write(b)
			})
			x, err := newHTTPExporter(c.URL, httpSettings{timeout: time.Second}, "t")
			if err != nil {
				t.Fatal(err)
			}
			x.retry = quickRetry
			defer x.Shutdown(context.Background())
			start := time.Now()
			err = x.ExportSpans(t.Context(), oneSpan(t))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if int(n.Load()) != tt.tries {
				t.Fatalf("tries = %d, want %d", n.Load(), tt.tries)
			}
			if tt.after != "" && time.Since(start) < time.Second {
				t.Fatalf("retried before the Retry-After")
			}
		})
	}
}

// TestHTTPExporterGivesUp: a collector that keeps throttling costs the
// batch once the retry budget or the context is spent, or the exporter
// shuts down; never a hang.
func TestHTTPExporterGivesUp(t *testing.T) {
	c := newCollector(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	x, err := newHTTPExporter(c.URL, httpSettings{timeout: time.Second}, "t")
	if err != nil {
		t.Fatal(err)
	}
	x.retry = quickRetry
	if err := x.ExportSpans(t.Context(), oneSpan(t)); err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("error %v, want a give-up", err)
	}

	spans := oneSpan(t)
	x.retry = retryPolicy{initial: time.Hour, maxDelay: time.Hour, maxElapsed: 10 * time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	base := c.count()
	go func() { done <- x.ExportSpans(ctx, spans) }()
	for c.count() == base {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want the context's", err)
	}

	base = c.count()
	go func() { done <- x.ExportSpans(t.Context(), spans) }()
	for c.count() == base {
		time.Sleep(time.Millisecond)
	}
	x.Shutdown(t.Context())
	if err := <-done; err == nil {
		t.Fatal("an export in flight at shutdown succeeded")
	}
	if err := x.ExportSpans(t.Context(), oneSpan(t)); err == nil {
		t.Fatal("an export after shutdown succeeded")
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

func TestHTTPEndpointRefusesTLSSettings(t *testing.T) {
	_, err := newHTTPExporter("http://c:4318/v1/traces", httpSettings{tls: new(tls.Config)}, "t")
	if err == nil {
		t.Fatal("an http:// endpoint took TLS settings")
	}
}
