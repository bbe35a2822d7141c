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
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// oneTrace is a batch of one trace of one span, named "one".
func oneTrace() []*Trace {
	tr := testProvider(sdktrace.AlwaysSample(), nil).Begin(context.Background(), "one", "", trace.SpanKindServer, time.Now())
	tr.Root().End(time.Now())
	return []*Trace{tr}
}

// testEncoder is the encoder of a service named maitred.
func testEncoder() *spanEncoder {
	return newSpanEncoder([]attribute.KeyValue{attribute.String("service.name", "maitred")}, ScopeName)
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
		x, err := newHTTPExporter(c.URL+"/custom/path", httpSettings{timeout: time.Second, gzip: gz, headers: map[string]string{"Authorization": "Bearer t"}}, "maitred/test", testEncoder())
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second reuses the buffers and the gzip writer
			if err := x.export(t.Context(), oneTrace()); err != nil {
				t.Fatal(err)
			}
		}
		if err := x.export(t.Context(), nil); err != nil { // nothing to send
			t.Fatal(err)
		}
		x.shutdown(t.Context())
		if len(c.reqs) != 2 {
			t.Fatalf("%d requests, want 2", len(c.reqs))
		}
		for i, r := range c.reqs {
			body := c.bodies[i]
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
			} else if r.Header.Get("Content-Encoding") != "" {
				t.Fatalf("Content-Encoding %q without gzip", r.Header.Get("Content-Encoding"))
			}
			var m coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			rs := m.ResourceSpans[0]
			if rs.ScopeSpans[0].Spans[0].Name != "one" || rs.ScopeSpans[0].Scope.Name != ScopeName ||
				rs.Resource.Attributes[0].Value.GetStringValue() != "maitred" {
				t.Fatalf("got %v", &m)
			}
		}
	}
}

// TestHTTPExporterUserAgentHeader: a User-Agent among the configured
// headers wins over the exporter's.
func TestHTTPExporterUserAgentHeader(t *testing.T) {
	c := newCollector(t, nil)
	x, err := newHTTPExporter(c.URL, httpSettings{timeout: time.Second, headers: map[string]string{"User-Agent": "mine"}}, "maitred/test", testEncoder())
	if err != nil {
		t.Fatal(err)
	}
	defer x.shutdown(context.Background())
	if err := x.export(t.Context(), oneTrace()); err != nil {
		t.Fatal(err)
	}
	if ua := c.reqs[0].Header.Get("User-Agent"); ua != "mine" {
		t.Fatalf("User-Agent %q, want the configured one", ua)
	}
}

// TestHTTPExporterRetries: 429, 502, 503 and 504 are tried again; other
// failures are not; a partial success answer is no error.
func TestHTTPExporterRetries(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int // answered in turn, then 200
		tries    int
		wantErr  bool
	}{
		{"accepted", nil, 1, false},
		{"throttled then accepted", []int{429, 503, 502, 504}, 5, false},
		{"bad request is not retried", []int{400}, 1, true},
		{"server error is not retried", []int{500}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			c := newCollector(t, func(w http.ResponseWriter, r *http.Request) {
				i := int(n.Add(1)) - 1
				if i < len(tt.statuses) {
					http.Error(w, "no", tt.statuses[i])
					return
				}
				// A partial success: one span rejected.
				w.Header().Set("Content-Type", "application/x-protobuf")
				b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 1, ErrorMessage: "x"}})
				w.Write(b)
			})
			x, err := newHTTPExporter(c.URL, httpSettings{timeout: time.Second}, "t", testEncoder())
			if err != nil {
				t.Fatal(err)
			}
			x.retry = quickRetry
			defer x.shutdown(context.Background())
			err = x.export(t.Context(), oneTrace())
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if int(n.Load()) != tt.tries {
				t.Fatalf("tries = %d, want %d", n.Load(), tt.tries)
			}
		})
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestHTTPExporterRetryAfter: a throttled export tries again after the
// Retry-After the collector asks (seconds or an HTTP date), exactly when
// it is longer than the backoff, and gives up at once when it is past
// the retry budget. In a synctest bubble, whose clock only the waits
// move, against a transport that answers in memory.
func TestHTTPExporterRetryAfter(t *testing.T) {
	bubbleStart := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // synctest's epoch
	tests := []struct {
		name     string
		after    string
		tries    int
		wantWait time.Duration
		wantErr  string
	}{
		{"seconds", "3", 2, 3 * time.Second, ""},
		{"an HTTP date", bubbleStart.Add(7 * time.Second).Format(http.TimeFormat), 2, 7 * time.Second, ""},
		{"a date past", bubbleStart.Add(-time.Hour).Format(http.TimeFormat), 2, 0, ""},
		{"past the budget", "3600", 1, 0, "gave up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				x, err := newHTTPExporter("http://collector.invalid/v1/traces", httpSettings{timeout: time.Second}, "t", testEncoder())
				if err != nil {
					t.Fatal(err)
				}
				x.retry = retryPolicy{initial: time.Millisecond, maxDelay: time.Millisecond, maxElapsed: time.Minute}
				var at []time.Time
				x.client.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
					at = append(at, time.Now())
					res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}
					if len(at) == 1 {
						res.StatusCode, res.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
						res.Header.Set("Retry-After", tt.after)
					}
					return res, nil
				})
				err = x.export(t.Context(), oneTrace())
				x.shutdown(t.Context())
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if len(at) != tt.tries {
					t.Fatalf("%d tries, want %d", len(at), tt.tries)
				}
				if len(at) == 2 {
					// The backoff's own wait is at most a millisecond.
					if wait := at[1].Sub(at[0]); wait < tt.wantWait || wait > tt.wantWait+time.Millisecond {
						t.Fatalf("tried again after %v, want %v", wait, tt.wantWait)
					}
				}
			})
		})
	}
}

// TestHTTPExporterGivesUp: a collector that keeps throttling costs the
// batch once the retry budget or the context is spent, or the exporter
// shuts down; never a hang.
func TestHTTPExporterGivesUp(t *testing.T) {
	arrived := make(chan struct{}, 100)
	c := newCollector(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		arrived <- struct{}{}
	})
	x, err := newHTTPExporter(c.URL, httpSettings{timeout: time.Second}, "t", testEncoder())
	if err != nil {
		t.Fatal(err)
	}
	x.retry = retryPolicy{initial: time.Millisecond, maxDelay: time.Millisecond, maxElapsed: 500 * time.Millisecond}
	if err := x.export(t.Context(), oneTrace()); err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("error %v, want a give-up", err)
	}
	<-arrived

	traces := oneTrace()
	x.retry = retryPolicy{initial: time.Hour, maxDelay: time.Hour, maxElapsed: 10 * time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- x.export(ctx, traces) }()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want the context's", err)
	}

	go func() { done <- x.export(t.Context(), traces) }()
	<-arrived
	x.shutdown(t.Context())
	if err := <-done; err == nil {
		t.Fatal("an export in flight at shutdown succeeded")
	}
	if err := x.export(t.Context(), oneTrace()); err == nil {
		t.Fatal("an export after shutdown succeeded")
	}
}

// TestHTTPEndpointRefusesTLSSettings: TLS settings with an http://
// endpoint are a mistake, refused.
func TestHTTPEndpointRefusesTLSSettings(t *testing.T) {
	_, err := newHTTPExporter("http://c:4318/v1/traces", httpSettings{tls: new(tls.Config)}, "t", testEncoder())
	if err == nil {
		t.Fatal("an http:// endpoint took TLS settings")
	}
	if _, err := newHTTPExporter("https://c:4318/v1/traces", httpSettings{tls: new(tls.Config)}, "t", testEncoder()); err != nil {
		t.Fatalf("an https:// endpoint refused TLS settings: %v", err)
	}
}
