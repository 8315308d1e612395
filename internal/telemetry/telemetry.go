// Package telemetry sets up OpenTelemetry tracing for kvlive's processes:
// every finished span goes to the KVLIVE_SPANS JetStream stream, so
// `kvlive trace` works with nothing else running, and to an OTLP backend
// (gRPC or HTTP) when the standard OTEL_* environment variables ask for one.
// It also holds kvlive's Prometheus metrics and the HTTP endpoints `kvlive
// run` serves: /metrics, /healthz and /readyz.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Setup returns a tracer provider for service that exports to js (when
// not nil) and to OTLP when configured by the environment. Shut it down
// before closing the NATS connection, so the last spans are stored.
func Setup(ctx context.Context, service string, js jetstream.JetStream) (*sdktrace.TracerProvider, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if js != nil {
		opts = append(opts, sdktrace.WithBatcher(NewJetStreamExporter(js)))
	}
	otlp, err := otlpFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	if otlp != nil {
		opts = append(opts, sdktrace.WithBatcher(otlp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// otlpFromEnv builds the OTLP exporter the OpenTelemetry environment
// variables describe, or nil when they describe none: OTEL_TRACES_EXPORTER
// ("otlp" or "none"), OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL ("grpc" or "http/protobuf", the
// default). Headers, TLS and timeouts are read by the exporters themselves.
func otlpFromEnv(ctx context.Context) (sdktrace.SpanExporter, error) {
	switch kind := os.Getenv("OTEL_TRACES_EXPORTER"); kind {
	case "none":
		return nil, nil
	case "", "otlp":
		if kind == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	default:
		return nil, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q: kvlive exports otlp or none", kind)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch strings.TrimSpace(protocol) {
	case "grpc":
		return otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("telemetry: OTLP protocol %q: want grpc or http/protobuf", protocol)
}
