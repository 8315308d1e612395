package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"kvlive/events"
)

// JetStreamExporter stores finished spans in the KVLIVE_SPANS stream: each
// under its own trace's subject, and again under every trace it links to,
// so a rollout whose per-VM spans root their own traces is read from the
// plan's trace in one go. The spans of one export filed under one subject
// go in one message (events.MarshalSpans): the thousand per-VM spans that
// link to a rollout's plan are a message or two, not a thousand.
type JetStreamExporter struct {
	js jetstream.JetStream
}

// NewJetStreamExporter exports to js.
func NewJetStreamExporter(js jetstream.JetStream) *JetStreamExporter {
	return &JetStreamExporter{js: js}
}

// maxSpansMessage bounds a message of spans, well under NATS's default
// payload limit (1 MiB); a larger group is split.
const maxSpansMessage = 256 << 10

// ExportSpans publishes a batch of spans and waits for the stream to store them.
func (e *JetStreamExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var order []string
	bySubject := map[string][]events.Span{}
	for _, ro := range spans {
		s := Record(ro)
		traces := []string{s.TraceID}
		for _, l := range s.Links {
			if l.TraceID != s.TraceID && !slices.Contains(traces, l.TraceID) {
				traces = append(traces, l.TraceID)
			}
		}
		for _, traceID := range traces {
			if _, ok := bySubject[traceID]; !ok {
				order = append(order, traceID)
			}
			bySubject[traceID] = append(bySubject[traceID], s)
		}
	}
	limit := maxSpansMessage
	if nc := e.js.Conn(); nc != nil && nc.MaxPayload() > 0 {
		limit = min(limit, int(nc.MaxPayload()/2))
	}
	var futures []jetstream.PubAckFuture
	for _, traceID := range order {
		bodies, err := spanMessages(bySubject[traceID], limit)
		if err != nil {
			return err
		}
		for _, b := range bodies {
			m := nats.NewMsg(events.SpanSubject(traceID))
			m.Data = b.data
			// The same id for the same spans: a publish retried within the
			// duplicate window is stored once.
			f, err := e.js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("%s/%s+%d", traceID, b.first, b.n)))
			if err != nil {
				return fmt.Errorf("telemetry: publish spans: %w", err)
			}
			futures = append(futures, f)
		}
	}
	var errs []error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// spansMessage is one message of spans: its body, its first span's id and
// how many it holds.
type spansMessage struct {
	data  []byte
	first string
	n     int
}

// spanMessages encodes spans in as few messages as fit limit each (a span
// larger than limit on its own still goes, alone).
func spanMessages(spans []events.Span, limit int) ([]spansMessage, error) {
	var out []spansMessage
	for len(spans) > 0 {
		n := len(spans)
		for {
			body, err := events.MarshalSpans(spans[:n])
			if err != nil {
				return nil, err
			}
			if len(body) <= limit || n == 1 {
				out = append(out, spansMessage{data: body, first: spans[0].SpanID, n: n})
				break
			}
			n = max(n*limit/len(body), 1) // fewer each time: len(body) > limit
		}
		spans = spans[n:]
	}
	return out, nil
}

// Shutdown has nothing to release: the NATS connection belongs to the caller.
func (e *JetStreamExporter) Shutdown(context.Context) error { return nil }

// Record converts a finished SDK span into kvlive's stored form.
func Record(ro sdktrace.ReadOnlySpan) events.Span {
	sc := ro.SpanContext()
	s := events.Span{
		TraceID:    sc.TraceID().String(),
		SpanID:     sc.SpanID().String(),
		Name:       ro.Name(),
		Kind:       ro.SpanKind().String(),
		Start:      ro.StartTime().UTC(),
		End:        ro.EndTime().UTC(),
		Attributes: attrs(ro.Attributes()),
		StatusCode: statusCode(ro.Status().Code.String()),
	}
	s.StatusMessage = ro.Status().Description
	if p := ro.Parent(); p.IsValid() && p.TraceID() == sc.TraceID() {
		s.ParentSpanID = p.SpanID().String()
	}
	if r := ro.Resource(); r != nil {
		if v, ok := r.Set().Value("service.name"); ok {
			s.Service = v.AsString()
		}
	}
	for _, ev := range ro.Events() {
		s.Events = append(s.Events, events.SpanEvent{Name: ev.Name, Time: ev.Time.UTC(), Attributes: attrs(ev.Attributes)})
	}
	for _, l := range ro.Links() {
		s.Links = append(s.Links, events.SpanLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(), Attributes: attrs(l.Attributes)})
	}
	return s
}

func attrs(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func statusCode(code string) string {
	switch code {
	case "Error":
		return "error"
	case "Ok":
		return "ok"
	}
	return "unset"
}

// compile-time check
var _ sdktrace.SpanExporter = (*JetStreamExporter)(nil)
