package applier

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/internal/consumer"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// slowTurn is a rate limiter whose turn comes after d on clock.
type slowTurn struct {
	clock *clocktesting.FakeClock
	d     time.Duration
}

func (s slowTurn) Wait(context.Context) error {
	s.clock.Step(s.d)
	return nil
}

// restartFixture is a running VM "r" flagged RestartRequired, its VMI
// "vmi-1" (stopped within grace), and a restart rollout of it recorded
// with policy, on a bus and fake clients of its own.
func restartFixture(t *testing.T, clk *clocktesting.FakeClock, grace int64, policy events.Policy) (*Applier, kube.Clients, events.Plan) {
	t.Helper()
	ctx := context.Background()
	always := virtv1.RunStrategyAlways
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "uid-r", ResourceVersion: "7"},
		Spec:       virtv1.VirtualMachineSpec{RunStrategy: &always},
		Status: virtv1.VirtualMachineStatus{Conditions: []virtv1.VirtualMachineCondition{
			{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue}}},
	}
	vmi := testenv.RunningVMI("ns", "r")
	vmi.UID, vmi.Spec.TerminationGracePeriodSeconds = "vmi-1", &grace
	clients := testenv.FakeClients(nil, vm, vmi)
	js := testenv.JetStream(t)
	const eventID = "restart/window"
	plan := events.Plan{EventID: eventID, VM: events.VMRef{Namespace: "ns", Name: "r", UID: "uid-r"}, Action: events.ResultRestart,
		Target: events.Target{Move: events.MoveRestart, VMI: "vmi-1"}}
	if _, _, err := rollout.Create(ctx, js, events.Rollout{EventID: eventID, Type: string(events.MoveRestart), Planned: 1,
		Counts: map[events.Result]int{events.ResultRestart: 1}, Policy: policy},
		[]events.PlannedVM{{VMRef: plan.VM}}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Clients: clients, Fleet: testenv.StartCache(t, clients), JetStream: js, Clock: clk, ObserveTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if a.control, err = rollout.Open(ctx, js); err != nil {
		t.Fatal(err)
	}
	return a, clients, plan
}

// TestARestartsVerdictWaitsOutTheGracePeriod: the verdict on a restart
// is waited for as long as the old VMI may take to shut down (its
// terminationGracePeriodSeconds, 180 s here) and the verdict deadline
// after, so a guest that takes its grace period is not judged pending.
func TestARestartsVerdictWaitsOutTheGracePeriod(t *testing.T) {
	a, _, plan := restartFixture(t, clocktesting.NewFakeClock(time.Now()), 180, events.Policy{})
	out, err := a.restartVM(context.Background(), plan)
	if err != nil || !out.Wrote {
		t.Fatalf("restart: %+v, %v", out, err)
	}
	a.complete(&out, plan, consumer.Delivery{Attempt: 1}, trace.SpanFromContext(context.Background()))
	if want := 180*time.Second + 2*time.Minute; out.VerdictDeadline != want {
		t.Errorf("the restart's verdict deadline is %s, want %s (grace period and verdict deadline)", out.VerdictDeadline, want)
	}
}

// TestARestartWaitsNoTurnPastItsWindow: a restart whose rollout's window
// (22:00 for an hour) is open when its worker takes it, at 22:59:59, but
// whose turn under --rate comes at 23:00:01, is not sent: the window is
// the last thing checked before the write. The VM is not written and the
// rollout waits, paused, for the window to open again.
func TestARestartWaitsNoTurnPastItsWindow(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 4, 22, 59, 59, 0, time.UTC))
	window := events.Window{Schedule: "0 22 * * *", Duration: "1h"}
	a, clients, plan := restartFixture(t, clk, 30, events.Policy{RestartWindow: window})
	eventID := plan.EventID
	a.limiter = slowTurn{clock: clk, d: 2 * time.Second}

	if _, err := a.restartVM(ctx, plan); !errors.Is(err, errOutsideWindow) {
		t.Errorf("a restart whose turn came at %s: %v; want it held outside its window", clk.Now().Format(time.TimeOnly), err)
	}
	got, err := clients.Virt.KubevirtV1().VirtualMachines("ns").Get(ctx, "r", metav1.GetOptions{})
	if err != nil || len(got.Status.StateChangeRequests) != 0 {
		t.Errorf("the VM's state change requests: %+v (%v); want none", got.Status.StateChangeRequests, err)
	}
	c, _, err := a.control.Get(ctx, eventID)
	if err != nil || c.State != events.StatePaused || !c.ResumeAt.Equal(time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)) || !strings.Contains(c.Reason, "restart window") {
		t.Errorf("control record %s %q until %s (%v); want paused until tomorrow's window", c.State, c.Reason, c.ResumeAt, err)
	}
}

// TestAnEvictionWaitsForTheRestartWindow: a move KubeVirt answers with an
// eviction restarts the VM as surely as kvlive restart does, so outside
// its rollout's restart window the pin does not move: the rollout pauses
// until the window opens and the plan is held.
func TestAnEvictionWaitsForTheRestartWindow(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	window := events.Window{Schedule: "0 22 * * *", Duration: "1h"}
	a, _, plan := restartFixture(t, clk, 30, events.Policy{RestartWindow: window})
	plan.Action, plan.Target = events.ResultEvict, events.Target{Move: events.MoveRepin}
	if err := a.takeTurn(ctx, &plan, nil); !errors.Is(err, errOutsideWindow) {
		t.Fatalf("an eviction's turn at noon: %v; want it held outside its 22:00 window", err)
	}
	c, _, err := a.control.Get(ctx, plan.EventID)
	if err != nil || c.State != events.StatePaused || !c.ResumeAt.Equal(time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)) {
		t.Errorf("control record %s %q until %s (%v); want paused until tonight's window", c.State, c.Reason, c.ResumeAt, err)
	}
	clk.SetTime(time.Date(2026, 12, 5, 22, 30, 0, 0, time.UTC))
	if _, _, err := a.control.Apply(ctx, plan.EventID, events.ActionResume, "the window opened", "test", clk.Now(), false); err != nil {
		t.Fatal(err)
	}
	if err := a.takeTurn(ctx, &plan, nil); err != nil {
		t.Errorf("an eviction's turn inside its window: %v", err)
	}
	plan.Action = events.ResultLive
	clk.SetTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	if err := a.takeTurn(ctx, &plan, nil); err != nil {
		t.Errorf("a live move outside the restart window: %v; want it to go", err)
	}
}
