package telemetry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"kvlive/events"
)

// JetStreamExporter stores finished spans in the KVLIVE_SPANS stream: each
// under its own trace's subject, and again under every trace it links to,
// so a rollout whose per-VM spans root their own traces is read from the
// plan's trace in one go.
type JetStreamExporter struct {
	js jetstream.JetStream
}

// NewJetStreamExporter exports to js.
func NewJetStreamExporter(js jetstream.JetStream) *JetStreamExporter {
	return &JetStreamExporter{js: js}
}

// ExportSpans publishes a batch of spans and waits for the stream to store them.
func (e *JetStreamExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	futures := make([]jetstream.PubAckFuture, 0, len(spans))
	for _, ro := range spans {
		s := Record(ro)
		body, err := events.MarshalSpan(s)
		if err != nil {
			return err
		}
		subjects := []string{s.TraceID}
		for _, l := range s.Links {
			if l.TraceID != s.TraceID {
				subjects = append(subjects, l.TraceID)
			}
		}
		for _, traceID := range subjects {
			m := nats.NewMsg(events.SpanSubject(traceID))
			m.Data = body
			f, err := e.js.PublishMsgAsync(m, jetstream.WithMsgID(traceID+"/"+s.SpanID))
			if err != nil {
				return fmt.Errorf("telemetry: publish span: %w", err)
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
