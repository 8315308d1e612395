package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/rollout"
)

const tracerName = "kvlive/readmodel/replay"

// SupersededNote says when the object has moved on since the event, or gone.
func SupersededNote(f instancetype.Objects, c events.Changed) string {
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
	Fleet     instancetype.Objects
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
		r, err := p.apply(ctx, s, "replay", "replay/"+uuid.NewString(), nil)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// RetryFailed retries the VMs of eventID's finished rollout whose latest
// outcome is failed and that no earlier retry of it took: it claims them
// on the rollout's control record (so of two retries at once one goes
// ahead), then publishes the event again as a new one limited to those
// VMs (a fresh id, the Kvlive-Retry-Of header naming the original, a new
// trace linked to the original's; a change retries as its object's current
// generation), and releases the claim if that fails. eventID may be a
// unique prefix of a recorded event id; by names who asked. It returns the
// retry (its Original the id in full) and the VMs it took.
func (p Publisher) RetryFailed(ctx context.Context, eventID, by string) (Replayed, []string, error) {
	eventID, err := rollout.ResolveEventID(ctx, p.JetStream, eventID)
	if err != nil {
		return Replayed{}, nil, err
	}
	a, err := rollout.AccountOf(ctx, p.JetStream, eventID)
	if err != nil {
		return Replayed{}, nil, err
	}
	if !a.Done() {
		return Replayed{}, nil, fmt.Errorf("rollout %s is %s with %d of %d VMs settled: retry it once it has finished", eventID, a.Phase, a.Settled(), a.Planned)
	}
	var failed, retried []string
	for uid, o := range a.Latest {
		switch {
		case o.Result != events.ResultFailed:
		case a.Control.RetriedBy(uid) != "":
			retried = append(retried, a.Control.RetriedBy(uid))
		default:
			failed = append(failed, uid)
		}
	}
	if len(failed) == 0 {
		if len(retried) > 0 {
			slices.Sort(retried)
			return Replayed{}, nil, fmt.Errorf("rollout %s's %d failed VMs were retried already, as %s: retry that rollout for those that failed again",
				eventID, len(retried), strings.Join(slices.Compact(retried), ", "))
		}
		return Replayed{}, nil, fmt.Errorf("rollout %s has no failed VM to retry", eventID)
	}
	slices.Sort(failed)
	stored, err := Select(ctx, p.JetStream, Selection{EventID: eventID})
	if err != nil {
		return Replayed{}, nil, err
	}
	if len(stored) == 0 {
		return Replayed{}, nil, fmt.Errorf("event %s is no longer in the events stream (older than its --max-age): nothing to retry from", eventID)
	}
	store, err := rollout.Open(ctx, p.JetStream)
	if err != nil {
		return Replayed{}, nil, err
	}
	id := "retry/" + uuid.NewString()
	if err := store.ClaimRetry(ctx, eventID, id, failed, by, p.now()); err != nil {
		return Replayed{}, nil, err
	}
	r, err := p.apply(ctx, stored[len(stored)-1], "retry", id, failed)
	if err != nil {
		if rerr := store.ReleaseRetry(context.WithoutCancel(ctx), eventID, id); rerr != nil {
			err = fmt.Errorf("%w; and its VMs stay marked retried as %s: %w", err, id, rerr)
		}
		return r, nil, err
	}
	return r, failed, nil
}

// apply publishes s as a new event with id: a replay, or a retry (kind) of
// the VMs only names.
func (p Publisher) apply(ctx context.Context, s Stored, kind, id string, only []string) (Replayed, error) {
	return p.publish(ctx, s, kind, id, func() (string, string, events.Payload, string, error) { return p.payload(s, id, only) })
}

// Undo publishes the undo request id (undo/<uuid>) of s's rollout, with
// policy (nil: the planner's default): the Kvlive-Undo-Of header names s,
// and its trace links to s's. undo.Read says whether s can be undone.
func (p Publisher) Undo(ctx context.Context, s Stored, id string, policy *events.Policy) (Replayed, error) {
	return p.publish(ctx, s, "undo", id, func() (string, string, events.Payload, string, error) {
		req := &events.UndoRequest{ID: id[strings.IndexByte(id, '/')+1:], Of: s.ID, RequestedAt: p.now(), Policy: policy}
		return events.TypeUndoRequested, events.UndoSubject(), req, "", nil
	})
}

// publish publishes what payload builds as event id, a replay, retry or
// undo (kind) of s: the header naming s, and a new trace linked to s's.
func (p Publisher) publish(ctx context.Context, s Stored, kind, id string, payload func() (string, string, events.Payload, string, error)) (Replayed, error) {
	r := Replayed{Original: s.ID, EventID: id}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("kvlive.event.id", id), attribute.String("kvlive."+kind+".of", s.ID))}
	if link := p.originalTrace(ctx, s); link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link, Attributes: []attribute.KeyValue{attribute.String("kvlive.link", kind+"-of")}}))
	}
	ctx, span := p.Tracer.Tracer(tracerName).Start(ctx, kind+" "+s.ID, opts...)
	defer span.End()

	typ, subject, body, note, err := payload()
	if err != nil {
		return r, err
	}
	r.Note = note
	source := "kvlive/replay"
	if kind == "undo" {
		source = "kvlive/undo"
	}
	encoded, err := events.Encode(typ, id, source, s.Object().String(), p.now(), body)
	if err != nil {
		return r, err
	}
	msg := events.NewMsg(subject, id, typ, encoded)
	header := map[string]string{"retry": events.HeaderRetryOf, "undo": events.HeaderUndoOf}[kind]
	if header == "" {
		header = events.HeaderReplayOf
	}
	msg.Header.Set(header, s.ID)
	propagation.TraceContext{}.Inject(ctx, events.HeaderCarrier(msg.Header))
	if _, err := p.JetStream.PublishMsg(ctx, msg); err != nil {
		return r, fmt.Errorf("replay: publish %s: %w", id, err)
	}
	return r, nil
}

// payload builds the replayed event's body: a switch as it was, a change
// as its object's current generation.
func (p Publisher) payload(s Stored, id string, only []string) (string, string, events.Payload, string, error) {
	if s.Undo != nil {
		return "", "", nil, "", fmt.Errorf("replay: %s is an undo of %s; an undo is not replayed", s.ID, s.Undo.Of)
	}
	if s.Restart != nil {
		// Asked again: the VMs of its scope still waiting for a restart.
		req := *s.Restart
		req.ID, req.RequestedAt, req.Only, req.After = id[strings.IndexByte(id, '/')+1:], p.now(), only, ""
		if only == nil {
			req.Only = s.Restart.Only
		}
		return events.TypeRestartRequested, events.RestartSubject(), &req, "", nil
	}
	if s.Switch != nil {
		req := *s.Switch
		req.ID, req.RequestedAt, req.Only = id[strings.IndexByte(id, '/')+1:], p.now(), only
		return events.TypeSwitchRequested, events.SwitchSubject(), &req, "", nil
	}
	c := *s.Change
	live := p.Fleet.Object(c.Object)
	spec, ok := instancetype.SpecOf(live)
	if !ok {
		return "", "", nil, "", fmt.Errorf("replay: %s no longer exists: nothing to replay for %s", c.Object, s.ID)
	}
	m := live.(metav1.Object)
	note := SupersededNote(p.Fleet, c)
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", "", nil, "", err
	}
	c.UID, c.Generation, c.NewSpec, c.ObservedAt, c.Only = string(m.GetUID()), m.GetGeneration(), raw, p.now(), only
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
