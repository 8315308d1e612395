package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"kvlive/events"
	"kvlive/internal/fleet"
	"kvlive/internal/whatif"
)

const tracerName = "kvlive/internal/replay"

// Preview is what one stored event would do today.
type Preview struct {
	Event Stored `json:"-"`
	// Note says how today differs from when the event was recorded.
	Note   string        `json:"note,omitempty"`
	Report whatif.Report `json:"plan"`
}

// DryRun plans each event against the cluster as it is now, writing nothing.
func DryRun(f *fleet.Fleet, stored []Stored) ([]Preview, error) {
	out := make([]Preview, 0, len(stored))
	for _, s := range stored {
		req, note, err := request(f, s)
		if err != nil {
			return nil, err
		}
		plans, err := whatif.Plan(f, req)
		if err != nil {
			return nil, err
		}
		out = append(out, Preview{Event: s, Note: note, Report: whatif.NewReport(plans)})
	}
	return out, nil
}

// request is the what-if question a stored event asks today.
func request(f *fleet.Fleet, s Stored) (whatif.Request, string, error) {
	if s.Switch != nil {
		sel, err := labels.Parse(s.Switch.Selector)
		if err != nil {
			return whatif.Request{}, "", fmt.Errorf("replay: event %s: selector: %w", s.ID, err)
		}
		from := s.Switch.From
		return whatif.Request{Object: s.Switch.To, From: &from, Namespace: s.Switch.Namespace, Selector: sel}, "", nil
	}
	return whatif.Request{Object: s.Change.Object, Selector: labels.Everything()}, supersededNote(f, *s.Change), nil
}

// supersededNote says when the object has moved on since the event, or gone.
func supersededNote(f *fleet.Fleet, c events.Changed) string {
	live, ok := f.Object(c.Object).(metav1.Object)
	switch {
	case !ok:
		return fmt.Sprintf("%s no longer exists", c.Object)
	case string(live.GetUID()) != c.UID:
		return fmt.Sprintf("%s was re-created since; replays against the new object", c.Object)
	case live.GetGeneration() > c.Generation:
		return fmt.Sprintf("superseded: %s is at generation %d now; replays as generation %d", c.Object, live.GetGeneration(), live.GetGeneration())
	}
	return ""
}

// Publisher sends stored events through the pipeline again.
type Publisher struct {
	JetStream jetstream.JetStream
	Fleet     *fleet.Fleet
	Tracer    trace.TracerProvider
	// Now stamps replayed events; nil means time.Now.
	Now func() time.Time
}

// Replayed is the new event a replay published.
type Replayed struct {
	Original string `json:"original"`
	EventID  string `json:"eventId"`
	Note     string `json:"note,omitempty"`
}

// Apply publishes each stored event again as a new event: a fresh id, the
// Kvlive-Replay-Of header naming the original, and a new trace linked to
// the original's. A change replays as its object's current generation.
func (p Publisher) Apply(ctx context.Context, stored []Stored) ([]Replayed, error) {
	var out []Replayed
	for _, s := range stored {
		r, err := p.apply(ctx, s)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (p Publisher) apply(ctx context.Context, s Stored) (Replayed, error) {
	id := "replay/" + uuid.NewString()
	r := Replayed{Original: s.ID, EventID: id}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("kvlive.event.id", id), attribute.String("kvlive.replay.of", s.ID))}
	if link := p.originalTrace(ctx, s); link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link, Attributes: []attribute.KeyValue{attribute.String("kvlive.link", "replay-of")}}))
	}
	ctx, span := p.Tracer.Tracer(tracerName).Start(ctx, "replay "+s.ID, opts...)
	defer span.End()

	typ, subject, payload, note, err := p.payload(s, id)
	if err != nil {
		return r, err
	}
	r.Note = note
	body, err := events.Encode(typ, id, "kvlive/replay", s.Object().String(), p.now(), payload)
	if err != nil {
		return r, err
	}
	msg := events.NewMsg(subject, id, typ, body)
	msg.Header.Set(events.HeaderReplayOf, s.ID)
	propagation.TraceContext{}.Inject(ctx, events.HeaderCarrier(msg.Header))
	if _, err := p.JetStream.PublishMsg(ctx, msg); err != nil {
		return r, fmt.Errorf("replay: publish %s: %w", id, err)
	}
	return r, nil
}

// payload builds the replayed event's body: a switch as it was, a change
// as its object's current generation.
func (p Publisher) payload(s Stored, id string) (string, string, events.Payload, string, error) {
	if s.Switch != nil {
		req := *s.Switch
		req.ID, req.RequestedAt = id[len("replay/"):], p.now()
		return events.TypeSwitchRequested, events.SwitchSubject(), &req, "", nil
	}
	c := *s.Change
	live := p.Fleet.Object(c.Object)
	spec, ok := fleet.SpecOf(live)
	if !ok {
		return "", "", nil, "", fmt.Errorf("replay: %s no longer exists: nothing to replay for %s", c.Object, s.ID)
	}
	m := live.(metav1.Object)
	note := supersededNote(p.Fleet, c)
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", "", nil, "", err
	}
	c.UID, c.Generation, c.NewSpec, c.ObservedAt = string(m.GetUID()), m.GetGeneration(), raw, p.now()
	return s.Type, events.ChangedSubject(c.Object.Kind), &c, note, nil
}

// originalTrace is the span the original event's rollout was traced under:
// the planner span from its rollout record, else the event's own traceparent.
func (p Publisher) originalTrace(ctx context.Context, s Stored) trace.SpanContext {
	if kv, err := p.JetStream.KeyValue(ctx, events.BucketRollouts); err == nil {
		if entry, err := kv.Get(ctx, events.RolloutKey(s.ID)); err == nil {
			if r, err := events.UnmarshalRollout(entry.Value()); err == nil {
				tid, err1 := trace.TraceIDFromHex(r.TraceID)
				sid, err2 := trace.SpanIDFromHex(r.SpanID)
				if err1 == nil && err2 == nil {
					return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true})
				}
			}
		}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, events.HeaderCarrier(s.Headers)))
}

func (p Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now().UTC()
	}
	return time.Now().UTC()
}
