// Package telemetry sets up OpenTelemetry tracing for kvlive's processes.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Setup returns a tracer provider for service, and its shutdown. Every span
// gets real trace and span ids, which outcomes record; exporters are added
// through opts.
func Setup(_ context.Context, service string, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
	res := resource.NewSchemaless(attribute.String("service.name", service))
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithResource(res)}, opts...)
	return sdktrace.NewTracerProvider(opts...), nil
}
