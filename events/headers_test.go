package events_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"kvlive/events"
)

func TestHeaderCarrierKeepsW3CLowercase(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	h := nats.Header{}
	prop := propagation.TraceContext{}
	prop.Inject(trace.ContextWithSpanContext(context.Background(), sc), events.HeaderCarrier(h))
	if _, ok := h["traceparent"]; !ok {
		t.Fatalf("headers = %v, want a lower-case traceparent", h)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Fatal("carrier canonicalised the header name")
	}
	got := trace.SpanContextFromContext(prop.Extract(context.Background(), events.HeaderCarrier(h)))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() {
		t.Errorf("extracted %v, want %v", got, sc)
	}
	// A producer that canonicalised the name is still understood.
	canon := nats.Header{"Traceparent": h["traceparent"]}
	if got := trace.SpanContextFromContext(prop.Extract(context.Background(), events.HeaderCarrier(canon))); got.TraceID() != sc.TraceID() {
		t.Error("canonicalised traceparent not read")
	}
}
