package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// StreamSpans keeps finished spans when no OTLP exporter is configured (and
// alongside one), so `kvlive trace` works with nothing else running.
const StreamSpans = "KVLIVE_SPANS"

// Span is a finished OpenTelemetry span as kvlive stores it, published to
// SpanSubject(TraceID), and also to the subject of every trace it links
// to, so a trace whose per-VM spans root their own traces is read in one go.
type Span struct {
	TraceID      string         `json:"traceId"`
	SpanID       string         `json:"spanId"`
	ParentSpanID string         `json:"parentSpanId,omitempty"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	Service      string         `json:"service,omitempty"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	Attributes   map[string]any `json:"attributes,omitempty"`
	Events       []SpanEvent    `json:"events,omitempty"`
	Links        []SpanLink     `json:"links,omitempty"`
	// StatusCode is "unset", "ok" or "error".
	StatusCode    string `json:"statusCode"`
	StatusMessage string `json:"statusMessage,omitempty"`
}

// SpanEvent is a timed annotation on a span ("pin moved", "RestartRequired seen").
type SpanEvent struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// SpanLink points at a span in another (or the same) trace.
type SpanLink struct {
	TraceID    string         `json:"traceId"`
	SpanID     string         `json:"spanId"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Duration is how long the span took.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// MarshalSpan encodes a span for the spans stream.
func MarshalSpan(s Span) ([]byte, error) { return json.Marshal(s) }

// UnmarshalSpan decodes a span read from the spans stream.
func UnmarshalSpan(b []byte) (Span, error) {
	var s Span
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("events: span: %w", err)
	}
	if s.TraceID == "" || s.SpanID == "" {
		return s, fmt.Errorf("events: span without trace or span id")
	}
	return s, nil
}
