package applier

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/consumer"
)

// A paused rollout's plans are parked, untouched, in events.StreamHeld (a
// work queue, under the event's subject) and acked on the plans stream, so
// a pause of any length uses none of their deliveries. The rollout
// controller sends them back once the rollout leaves the pause
// (rollout/release.go).

// controlled handles a plan whose rollout is not running. A non-nil held
// is the fate of a plan it parked; for an aborted rollout it returns the
// outcome of a VM that will not be moved.
func (a *Applier) controlled(ctx context.Context, msg jetstream.Msg, plan events.Plan, d consumer.Delivery) (held *consumer.Fate, out *events.Outcome) {
	st := a.watch.Of(plan.EventID)
	switch st.State {
	case events.StatePaused:
		f := a.hold(ctx, msg, plan, d)
		return &f, nil
	case events.StateAborted:
		if !plan.Action.Moves() && !plan.Recheck {
			return nil, nil
		}
		return nil, &events.Outcome{Result: events.ResultSkip, Reason: joinReason("rollout aborted before the VM moved", st.Describe())}
	}
	return nil, nil
}

// errSteered stops a move whose rollout was paused or aborted while it
// waited for its turn under --rate. It is transient: should the rollout be
// running again by the time handle looks, the plan is simply retried.
var errSteered = fmt.Errorf("%w: rollout paused or aborted while the VM waited its turn", errTransient)

// turn is what a plan's move took on its way to the write: the rollout's
// migration budget it takes a slot of, and whether it took one, which
// handle gives back when the move wrote nothing.
type turn struct {
	budget   int
	tookSlot bool
	// lastTry is the plan's last delivery: a move that would wait for
	// another (a starting VM's) is made now instead.
	lastTry bool
}

type turnKey struct{}

func withTurn(ctx context.Context, t *turn) context.Context {
	return context.WithValue(ctx, turnKey{}, t)
}

// last reports whether t is the plan's last delivery (false for none).
func (t *turn) last() bool { return t != nil && t.lastTry }

func turnOf(ctx context.Context) *turn {
	t, _ := ctx.Value(turnKey{}).(*turn)
	return t
}

// errStale stops a move whose VM no longer moves as planned at all once it
// is its turn (decided again as it is now, it needs no move): the caller
// plans it again from the VM as the API server has it.
var errStale = fmt.Errorf("%w: the VM changed since it was planned, and no longer moves as planned", errTransient)

// errStarting retries a move whose VM was asked to start and runs no VMI
// yet, until one runs (its move is then decided as a running VM's). On the
// plan's last delivery the move goes as planned: a start that has run no
// VMI through all the others (a VM that fails to start) is past
// virt-controller's cache, which then holds the move too.
var errStarting = fmt.Errorf("%w: the VM was asked to start and no VMI runs yet: its move waits for the VMI", errTransient)

// takeTurn makes every check a move's write waits on, in one place and in
// this order, right before the write: its turn under --rate; the plan's
// action decided again for the VM as it is now (redecide); for a move
// KubeVirt answers with an eviction (a restart of its own), the rollout's
// restart window, as for a restart; for a live move a migration carries, a
// slot of the migration budget, taken at the write (a slot taken before the
// rate's wait would count from the take, not the move, how long KubeVirt
// takes to react); last, that the rollout was not paused or aborted
// meanwhile, so a pause stops moves already queued (a slot just taken is
// then given back).
func (a *Applier) takeTurn(ctx context.Context, plan *events.Plan, vm *virtv1.VirtualMachine) error {
	if err := a.limiter.Wait(ctx); err != nil {
		return err
	}
	if err := a.redecide(ctx, plan, vm); err != nil {
		return err
	}
	if plan.Action == events.ResultEvict {
		if err := a.withinWindow(ctx, *plan); err != nil {
			return err
		}
	}
	t := turnOf(ctx)
	took := false
	if t != nil && a.budget != nil && needsMigration(*plan) {
		var err error
		if took, err = a.takeSlot(ctx, *plan, t.budget); err != nil {
			return fmt.Errorf("waiting for a slot of the migration budget: %w", err)
		}
		t.tookSlot = t.tookSlot || took
	}
	if a.watch != nil && a.watch.Of(plan.EventID).State != events.StateRunning {
		if took {
			a.giveBack(ctx, *plan)
			t.tookSlot = false
		}
		return errSteered
	}
	return nil
}

// redecide plans the VM again as it is at its move (vm, as the move read
// it, with the VMI the cache shows now, or the API server when the plan
// and the cache say it is stopped) and takes the new action where it
// differs from the plan's: a VM stopped when planned and running at its
// move is moved live, with a slot of the migration budget, or by an
// eviction within the restart window, not at its next boot; a VM no longer
// live-migratable needs no slot. The plan's target stays (the move checked
// it just before). It returns errStale when the VM needs no move at all
// any more. Repins and switches only: an undo keeps the action it was
// planned with.
func (a *Applier) redecide(ctx context.Context, plan *events.Plan, vm *virtv1.VirtualMachine) error {
	if vm == nil || (plan.Target.Move != events.MoveRepin && plan.Target.Move != events.MoveSwitch) {
		return nil
	}
	fleet := a.cfg.Fleet
	vmi := fleet.VMI(vm.Namespace, vm.Name)
	running := vmi != nil && !vmi.IsFinal()
	asked := false
	if !running && wantsToRun(vm) {
		// Not running by the cache, but asked to run: a VMI just started
		// may not be in the cache yet, and the server is asked.
		fresh, err := a.cfg.Clients.Virt.KubevirtV1().VirtualMachineInstances(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("%w: reading whether %s runs: %w", errTransient, plan.VM, err)
		case (err != nil || fresh.IsFinal()) && !turnOf(ctx).last():
			// Starting, and no VMI runs yet: moved now, the VM could boot
			// from the old pin (virt-controller starting it from a cache
			// without the move) and take the new one by a migration no
			// slot counted. The move waits for the VMI.
			a.cfg.Log.Info("applier: the VM was asked to start and no VMI runs yet; its move waits for the VMI", "vm", plan.VM.String(), "event", plan.EventID)
			return errStarting
		case err != nil || fresh.IsFinal():
			// No VMI through every delivery but this one: the start asked
			// for is long past virt-controller's cache (a VM that fails
			// to start, say), and the move goes as planned.
			a.cfg.Log.Info("applier: the VM was asked to start and ran no VMI through its move's deliveries; moved as planned", "vm", plan.VM.String(), "event", plan.EventID, "action", plan.Action)
			return nil
		}
		vmi, running, asked = fresh, true, true
		fleet = withVMI(a.cfg.Fleet, fresh)
	}
	switch {
	case running != (plan.Action != events.ResultNextBoot):
	case running && needsMigration(*plan) && !instancetype.Migratable(vmi):
	case asked:
	default:
		return nil // as planned: the VM runs, and can migrate, as the plan says
	}
	fresh, err := a.replanOn(fleet, *plan, vm)
	if err != nil {
		return fmt.Errorf("%w: deciding %s's move again: %w", errTransient, plan.VM, err)
	}
	if fresh.Action == plan.Action && needsMigration(fresh) == needsMigration(*plan) {
		return nil
	}
	now := string(fresh.Action)
	if !fresh.Action.Moves() {
		now = "none"
	}
	a.cfg.Metrics.Redecided(string(plan.Action), now)
	a.cfg.Log.Info("applier: the VM changed since it was planned; its move decided again", "vm", plan.VM.String(), "event", plan.EventID,
		"planned", plan.Action, "now", fresh.Action, "reason", fresh.Reason)
	if !fresh.Action.Moves() {
		return errStale
	}
	plan.Reason = joinReason(fmt.Sprintf("decided again at the move (planned %s; the VM changed since)", plan.Action), fresh.Reason)
	plan.Action, plan.Changes = fresh.Action, fresh.Changes
	return nil
}

// hold parks the plan. Should the rollout leave the pause while it does,
// the rollout controller's sweep of held plans sends it back.
func (a *Applier) hold(ctx context.Context, msg jetstream.Msg, plan events.Plan, d consumer.Delivery) consumer.Fate {
	planID := events.PlanID(plan.EventID, plan.VM.UID)
	parked := nats.NewMsg(events.HeldSubject(plan.VM.Namespace, plan.EventID))
	parked.Data = msg.Data()
	events.CopyHeaders(parked.Header, msg.Headers())
	if _, err := a.cfg.JetStream.PublishMsg(ctx, parked, jetstream.WithMsgID(events.HeldID(planID, d.Sequence))); err != nil {
		return consumer.Retry(fmt.Errorf("could not hold the plan of paused rollout %s for %s: %w", plan.EventID, plan.VM.String(), err))
	}
	a.cfg.Metrics.Held()
	a.cfg.Log.Debug("applier: plan held, rollout paused", "event", plan.EventID, "vm", plan.VM.String())
	// A mark in the event's trace: the gap before this VM's apply span is a pause.
	_, span := a.tracer.Start(ctx, "applier.hold "+plan.VM.String(), trace.WithAttributes(
		attribute.String("kvlive.event.id", plan.EventID), attribute.Int("kvlive.attempt", d.Attempt)))
	span.End()
	return consumer.Done()
}

// withVMI is fleet with vmi in place of what its cache shows of that VMI.
func withVMI(fleet Fleet, vmi *virtv1.VirtualMachineInstance) Fleet {
	f := vmiFleet{Fleet: fleet, vmi: vmi}
	if sl, ok := fleet.(instancetype.StartLookup); ok {
		return startVMIFleet{vmiFleet: f, starts: sl}
	}
	return f
}

type vmiFleet struct {
	Fleet
	vmi *virtv1.VirtualMachineInstance
}

func (f vmiFleet) VMI(namespace, name string) *virtv1.VirtualMachineInstance {
	if f.vmi.Namespace == namespace && f.vmi.Name == name {
		return f.vmi
	}
	return f.Fleet.VMI(namespace, name)
}

// startVMIFleet keeps the fleet's StartLookup, which planning asks for.
type startVMIFleet struct {
	vmiFleet
	starts instancetype.StartLookup
}

func (f startVMIFleet) StartedSpec(vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineSpec, error) {
	return f.starts.StartedSpec(vmi)
}

// wantsToRun reports whether the VM is asked to run: a run strategy that
// starts it, or a start request virt-controller has not carried out yet.
func wantsToRun(vm *virtv1.VirtualMachine) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == virtv1.StartRequest {
			return true
		}
	}
	s := vm.Spec.RunStrategy
	return s != nil && (*s == virtv1.RunStrategyAlways || *s == virtv1.RunStrategyRerunOnFailure)
}
