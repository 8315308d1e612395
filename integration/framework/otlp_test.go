//go:build integration

package framework

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestOTLPReceiverKeepsWhatItReceives sends a span over each protocol and
// reads it back by its trace ID; a trace never sent has no spans.
func TestOTLPReceiverKeepsWhatItReceives(t *testing.T) {
	r := StartOTLPReceiver(t)
	ctx := context.Background()
	httpExp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	grpcExp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.GRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	for name, exp := range map[string]sdktrace.SpanExporter{"http": httpExp, "grpc": grpcExp} {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		_, span := tp.Tracer("framework").Start(ctx, "smoke over "+name)
		span.End()
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		spans, err := r.Spans(span.SpanContext().TraceID().String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(spans) != 1 || spans[0].Name != "smoke over "+name || spans[0].SpanID != span.SpanContext().SpanID().String() {
			t.Fatalf("%s: trace %s holds %+v, want the one span sent", name, span.SpanContext().TraceID(), spans)
		}
	}
	if spans, err := r.Spans("0123456789abcdef0123456789abcdef"); err != nil || len(spans) != 0 {
		t.Fatalf("a trace never sent: %+v, %v", spans, err)
	}
}
