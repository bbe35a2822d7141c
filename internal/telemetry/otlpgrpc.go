package telemetry

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// grpcExporter sends batches over OTLP/gRPC through OpenTelemetry's gRPC
// client (otlptracegrpc.NewClient, configured by the OTEL_EXPORTER_OTLP_*
// environment: headers, timeout, compression, TLS, retries of the codes
// the specification names). The batch is the ExportTraceServiceRequest
// the HTTP exporter sends, encoded by the same spanEncoder and decoded
// into the protobuf messages the client takes: one encoding of maitred's
// traces for both protocols, held equal to the standard exporter's by
// the differential test. That decoding costs allocations the HTTP
// exporter does not make, on the batcher's goroutine only.
type grpcExporter struct {
	client   otlptrace.Client // started
	mu       sync.Mutex       // one export at a time: the encoder's buffer is shared
	enc      *spanEncoder
	stopOnce sync.Once
}

// export sends the traces' spans in one request.
func (x *grpcExporter) export(ctx context.Context, traces []*Trace) error {
	if len(traces) == 0 {
		return nil
	}
	x.mu.Lock()
	var req coltracepb.ExportTraceServiceRequest
	err := proto.Unmarshal(x.enc.encode(traces), &req) // copies: the buffer is free again
	x.mu.Unlock()
	if err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	if err := x.client.UploadTraces(ctx, req.ResourceSpans); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// shutdown closes the client's connection, waiting for exports in flight
// within ctx; a second call does nothing.
func (x *grpcExporter) shutdown(ctx context.Context) error {
	var err error
	x.stopOnce.Do(func() { err = x.client.Stop(ctx) })
	return err
}
