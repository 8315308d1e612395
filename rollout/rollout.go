package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// RequestSwitch publishes a switch request and returns its event id.
func RequestSwitch(ctx context.Context, js jetstream.JetStream, req events.SwitchRequest) (string, error) {
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if req.RequestedAt.IsZero() {
		req.RequestedAt = time.Now().UTC()
	}
	id := events.SwitchEventID(req.ID)
	body, err := events.Encode(events.TypeSwitchRequested, id, "kvlive/switch", req.From.String(), req.RequestedAt, &req)
	if err != nil {
		return "", err
	}
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.SwitchSubject(), id, events.TypeSwitchRequested, body)); err != nil {
		return "", fmt.Errorf("rollout: publish switch %s: %w", id, err)
	}
	return id, nil
}

// RequestRestart publishes a restart request and returns its event id
// (restart/<uuid>): a running kvlive restarts, within the request's
// restart budget, the running VMs of its object that wait for a restart.
func RequestRestart(ctx context.Context, js jetstream.JetStream, req events.RestartRequest) (string, error) {
	if req.ID == "" {
		req.ID = events.NewRestartID()
	}
	if req.RequestedAt.IsZero() {
		req.RequestedAt = time.Now().UTC()
	}
	id := events.RestartEventID(req.ID)
	body, err := events.Encode(events.TypeRestartRequested, id, "kvlive/restart", req.Object.String(), req.RequestedAt, &req)
	if err != nil {
		return "", err
	}
	if _, err := js.PublishMsg(ctx, events.NewMsg(events.RestartSubject(), id, events.TypeRestartRequested, body)); err != nil {
		return "", fmt.Errorf("rollout: publish restart %s: %w", id, err)
	}
	return id, nil
}

// pollInterval is how long Follow waits for an outcome before it looks at
// the rollout record again.
const pollInterval = 250 * time.Millisecond

// Progress is a snapshot of one event's rollout.
type Progress struct {
	EventID string
	// Planned is zero until the planner has recorded the rollout.
	Planned int
	// Outcomes holds the latest outcome per VM UID.
	Outcomes map[string]events.Outcome
	// Account is the latest accounting read, once the rollout was planned.
	Account *Account
}

// Done reports whether every planned VM has an outcome, or the accounting
// says the rollout will change no further (dead letters, an abort, VMs
// unaccounted for).
func (p Progress) Done() bool {
	return (p.Planned > 0 && len(p.Outcomes) >= p.Planned) || (p.Account != nil && p.Account.Done())
}

// Counts tallies outcomes by result.
func (p Progress) Counts() map[events.Result]int {
	c := map[events.Result]int{}
	for _, o := range p.Outcomes {
		c[o.Result]++
	}
	return c
}

// Follow reads the outcomes stream for eventID and calls update after each
// outcome, until every planned VM has one or ctx ends. It reads from the
// start of the stream, so following an event that already finished returns
// at once. An event that reaches no VM completes with zero outcomes.
func Follow(ctx context.Context, js jetstream.JetStream, eventID string, update func(Progress)) (Progress, error) {
	return follow(ctx, js, eventID, update, nil)
}

// follow is Follow telling afterRead (if set) of each of its account's
// reads, as accountOf does.
func follow(ctx context.Context, js jetstream.JetStream, eventID string, update func(Progress), afterRead func(what string)) (Progress, error) {
	p := Progress{EventID: eventID, Outcomes: map[string]events.Outcome{}}
	kv, err := js.KeyValue(ctx, events.BucketRollouts)
	if err != nil {
		return p, fmt.Errorf("rollout: kv: %w", err)
	}
	// One read for the whole follow; a NATS leader election that breaks
	// it is ridden out where it stopped (bus.Tail).
	tail := bus.NewTail(js, events.StreamOutcomes, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.OutcomesOf(eventID, "")}})
	defer tail.Stop()
	for ctx.Err() == nil {
		if p.Planned == 0 {
			if planned, ok := plannedCount(ctx, kv, eventID); ok {
				if planned == 0 {
					return p, nil
				}
				p.Planned = planned
			}
		}
		if p.Done() {
			return p, nil
		}
		msg, err := tail.Next(ctx, pollInterval)
		switch {
		case errors.Is(err, nats.ErrTimeout):
			// Quiet: see whether the rollout ended without an outcome
			// for every VM (dead letters, an abort). It has not while
			// any of its plans is staged, held or in flight; the
			// account, which reads every outcome so far again, waits
			// until none is (a lull in a long rollout's outcomes would
			// read them all each time).
			if p.Planned > 0 && !pending(ctx, js, eventID) {
				if a, err := accountOf(ctx, js, eventID, afterRead); err == nil {
					p.Account = &a
					// An outcome stored after the quiet read and before
					// the account's is in the account: take it, or a
					// rollout the account finds complete would return
					// without it.
					for uid, o := range a.Latest {
						if _, ok := p.Outcomes[uid]; !ok {
							p.Outcomes[uid] = o
						}
					}
				}
			}
			continue
		case err != nil:
			return p, fmt.Errorf("rollout: read outcomes: %w", err)
		}
		var o events.Outcome
		if _, err := events.Decode(msg.Data(), events.TypeOutcome, &o); err != nil || o.EventID != eventID {
			continue
		}
		p.Outcomes[o.VM.UID] = o
		if update != nil {
			update(p)
		}
	}
	return p, ctx.Err()
}

// pending reports whether eventID has a plan staged, held or in flight,
// as the work streams' per-subject counts say: a rollout that has is not
// over. An unreadable count is not pending (the account says).
func pending(ctx context.Context, js jetstream.JetStream, eventID string) bool {
	a := Account{EventID: eventID}
	for _, w := range a.work() {
		if n, err := CountSubjects(ctx, js, w.stream, w.filter); err == nil && n > 0 {
			return true
		}
	}
	return false
}

func plannedCount(ctx context.Context, kv jetstream.KeyValue, eventID string) (int, bool) {
	entry, err := kv.Get(ctx, events.RolloutKey(eventID))
	if errors.Is(err, jetstream.ErrKeyNotFound) || err != nil {
		return 0, false
	}
	r, err := events.UnmarshalRollout(entry.Value())
	if err != nil {
		return 0, false
	}
	return r.Planned, true
}
