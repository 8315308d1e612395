package events

import (
	"bytes"
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
// A message holds the spans of one export filed under its subject
// (MarshalSpans).
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

// MarshalSpans encodes spans filed under one subject as one message of
// the spans stream: a JSON array. The exporter stores the spans of one
// export this way, one message per subject instead of one per span.
func MarshalSpans(spans []Span) ([]byte, error) { return json.Marshal(spans) }

// UnmarshalSpan decodes a span read from the spans stream.
func UnmarshalSpan(b []byte) (Span, error) {
	var s Span
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("events: span: %w", err)
	}
	return s, checkSpan(s)
}

// UnmarshalSpans decodes a message of the spans stream: an array of spans
// (MarshalSpans) or one span (MarshalSpan, as kvlive stored them before).
func UnmarshalSpans(b []byte) ([]Span, error) {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != '[' {
		s, err := UnmarshalSpan(b)
		if err != nil {
			return nil, err
		}
		return []Span{s}, nil
	}
	var spans []Span
	if err := json.Unmarshal(b, &spans); err != nil {
		return nil, fmt.Errorf("events: spans: %w", err)
	}
	for _, s := range spans {
		if err := checkSpan(s); err != nil {
			return nil, err
		}
	}
	return spans, nil
}

func checkSpan(s Span) error {
	if s.TraceID == "" || s.SpanID == "" {
		return fmt.Errorf("events: span without trace or span id")
	}
	return nil
}
