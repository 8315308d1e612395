package planner

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// publishPlans plans every VM and publishes the plans asynchronously, then
// waits for every publish ack. Plans carry deterministic Msg-Ids, so a retry
// after a partial failure or a crash is deduplicated by the stream.
func (p *Planner) publishPlans(ctx context.Context, eventID string, t instancetype.Target, vms []*virtv1.VirtualMachine) (map[events.Result]int, error) {
	ctx, span := p.tracer.Start(ctx, "publish plans", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.destination.name", events.StreamPlans), attribute.Int("messaging.batch.message_count", len(vms))))
	defer span.End()
	counts := map[events.Result]int{}
	futures := make([]jetstream.PubAckFuture, 0, len(vms))
	now := p.cfg.Clock.Now()
	ownTraces := len(vms) > p.cfg.TraceFanout
	for _, vm := range vms {
		plan := instancetype.PlanVM(p.cfg.Fleet, eventID, t, vm)
		counts[plan.Action]++
		id := events.PlanID(eventID, plan.VM.UID)
		body, err := events.Encode(events.TypePlan, id, "kvlive/planner", plan.VM.String(), now, &plan)
		if err != nil {
			return nil, err
		}
		m := events.NewMsg(events.PlanSubject(plan.VM.Namespace, eventID), id, events.TypePlan, body)
		p.prop.Inject(ctx, events.HeaderCarrier(m.Header))
		if ownTraces {
			m.Header.Set(events.HeaderTraceRoot, "true")
		}
		f, err := p.cfg.JetStream.PublishMsgAsync(m)
		if err != nil {
			return nil, fmt.Errorf("planner: publish plan %s: %w", id, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return nil, fmt.Errorf("planner: plan %s not stored: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return counts, nil
}

// recordRollout stores how many plans the event produced, by result, so
// progress and completion can be read without scanning the plans stream.
func (p *Planner) recordRollout(ctx context.Context, eventID string, t instancetype.Target, counts map[events.Result]int) error {
	kv, err := p.cfg.JetStream.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return fmt.Errorf("planner: kv %s: %w", events.BucketRollouts, err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	r := events.Rollout{
		EventID: eventID, Type: string(t.Move), Object: t.Object,
		Planned: total, Counts: counts, PlannedAt: p.cfg.Clock.Now().UTC(),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.TraceID, r.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	rec, err := events.MarshalRollout(r)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, events.RolloutKey(eventID), rec); err != nil {
		return fmt.Errorf("planner: record rollout %s: %w", eventID, err)
	}
	return nil
}
