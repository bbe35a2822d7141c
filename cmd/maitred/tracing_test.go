package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/maitred-dev/maitred/config"
	"github.com/maitred-dev/maitred/sim"
)

// TestServeFlushesTracesOnShutdown runs the gateway as `maitred serve`
// does, with tracing.endpoint naming an in-process OTLP/HTTP collector,
// sends one request and stops the gateway at once: the request's spans
// reach the collector in the shutdown flush (the batch exporter's own
// schedule is seconds away).
func TestServeFlushesTracesOnShutdown(t *testing.T) {
	var (
		mu    sync.Mutex
		spans []*tracepb.Span
	)
	coll := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer coll.Close()
	backend := sim.New(sim.Config{Model: "m", OutputTokens: 2}, nil)
	bsrv := httptest.NewServer(backend.Handler())
	defer bsrv.Close()
	defer backend.Close()

	cfg, err := config.Parse([]byte("listen: 127.0.0.1:0\ndrain_delay: 0s\ntracing:\n  endpoint: " + coll.URL +
		"\nmodels:\n  - name: m\n    backends:\n      - url: " + bsrv.URL + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), runOptions{started: func(a net.Addr) { addr <- a }})
	}()
	base := "http://" + (<-addr).String()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res, err := c.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var server, client bool
	for _, sp := range spans {
		server = server || sp.Kind == tracepb.Span_SPAN_KIND_SERVER && sp.Name == "POST /v1/completions"
		client = client || sp.Kind == tracepb.Span_SPAN_KIND_CLIENT
	}
	if !server || !client {
		t.Errorf("after shutdown the collector holds %d spans (server span %v, backend span %v)", len(spans), server, client)
	}
}
