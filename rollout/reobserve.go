package rollout

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
)

// Observer is what a re-observation reads the VMs and VMIs from: an
// informer cache over the cluster.
type Observer interface {
	VM(namespace, name string) *virtv1.VirtualMachine
	VMI(namespace, name string) *virtv1.VirtualMachineInstance
}

// Reobservation is one VM looked at again: its verdict at the deadline (or
// its latest re-observation) and what KubeVirt shows now.
type Reobservation struct {
	Before, Now events.Verdict
}

// Reobserved is what Reobserve did: the VMs it looked at again, and how
// many moved VMs have no verdict yet to look again at.
type Reobserved struct {
	Again []Reobservation
	// Awaited counts the moved VMs whose first verdict is not stored yet
	// (their deadline has not passed, or the verifier has not judged them):
	// the verifier gives it, and a re-observation has nothing to go by.
	Awaited int
}

// Reobserve looks again, at now, at every VM of eventID whose verdict is
// unsettled (pending, refused or not observed at the deadline, and not
// settled by a re-observation since), judges what its VM and VMI show as
// the verifier would at the deadline, and stores each as a re-observation
// beside the verdict, which stays as it was. It returns them in no order,
// with the count of moved VMs still awaiting their first verdict.
func Reobserve(ctx context.Context, js jetstream.JetStream, fleet Observer, eventID string, now time.Time) (Reobserved, error) {
	var done Reobserved
	stored, err := storedVerdicts(ctx, js, eventID)
	if err != nil {
		return done, err
	}
	again, err := latestReobserved(ctx, js, eventID)
	if err != nil {
		return done, err
	}
	outcomes, err := movedOutcomes(ctx, js, eventID)
	if err != nil {
		return done, err
	}
	for uid, o := range outcomes {
		if _, judged := stored[uid]; !judged && o.VerdictDeadline > 0 {
			done.Awaited++
		}
	}
	for uid, before := range stored {
		if later, ok := again[uid]; ok {
			before = later
		}
		out, ok := outcomes[uid]
		if !before.Observed.Unsettled() || !ok {
			continue
		}
		j, _ := instancetype.Judge(out, fleet.VM(out.VM.Namespace, out.VM.Name), fleet.VMI(out.VM.Namespace, out.VM.Name), now, 0)
		v := events.Verdict{EventID: out.EventID, VM: out.VM, Predicted: out.Result, Observed: j.Observed, Reason: j.Reason,
			Condition: j.Condition, Message: j.Message, Batch: out.Batch, MovedAt: out.FinishedAt, ObservedAt: now.UTC(),
			Deadline: out.VerdictDeadline, TraceID: out.TraceID, SpanID: out.SpanID, Reobserved: true}
		id := events.VerdictID(out.EventID, uid) + "/again/" + strconv.FormatInt(now.UnixNano(), 10)
		body, err := events.Encode(events.TypeVerdict, id, "kvlive/verify", out.VM.String(), now, &v)
		if err != nil {
			return done, err
		}
		if _, err := js.PublishMsg(ctx, events.NewMsg(events.ReobservedSubject(out.VM.Namespace, uid, out.EventID), id, events.TypeVerdict, body)); err != nil {
			return done, fmt.Errorf("rollout: storing the re-observation of %s: %w", out.VM, err)
		}
		done.Again = append(done.Again, Reobservation{Before: before, Now: v})
	}
	return done, nil
}

// latestReobserved reads the latest re-observation of each VM of eventID.
func latestReobserved(ctx context.Context, js jetstream.JetStream, eventID string) (map[string]events.Verdict, error) {
	latest := map[string]events.Verdict{}
	err := scanSubject(ctx, js, events.StreamOutcomes, events.ReobservedIn("", eventID), func(m jetstream.Msg) {
		var v events.Verdict
		if _, err := events.Decode(m.Data(), events.TypeVerdict, &v); err == nil {
			latest[v.VM.UID] = v
		}
	})
	return latest, err
}

// movedOutcomes reads the latest outcome that moved each VM of eventID.
func movedOutcomes(ctx context.Context, js jetstream.JetStream, eventID string) (map[string]events.Outcome, error) {
	moved := map[string]events.Outcome{}
	err := scanSubject(ctx, js, events.StreamOutcomes, events.OutcomesOf(eventID, ""), func(m jetstream.Msg) {
		var o events.Outcome
		if _, err := events.Decode(m.Data(), events.TypeOutcome, &o); err == nil && o.Result.Moves() {
			moved[o.VM.UID] = o
		}
	})
	return moved, err
}
