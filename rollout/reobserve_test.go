package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// storeVerdict stores a verdict on the VM as the verifier would.
func storeVerdict(t *testing.T, js jetstream.JetStream, name string, observed events.Observed) {
	t.Helper()
	v := events.Verdict{EventID: verifyEvent, VM: events.VMRef{Namespace: "ns", Name: name, UID: "uid-" + name},
		Predicted: events.ResultLive, Observed: observed, Reason: "at the deadline", MovedAt: time.Now(), ObservedAt: time.Now()}
	id := events.VerdictID(verifyEvent, v.VM.UID)
	body, err := events.Encode(events.TypeVerdict, id, "kvlive/verifier", v.VM.String(), time.Now(), &v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), events.NewMsg(events.VerdictSubject("ns", v.VM.UID, verifyEvent), id, events.TypeVerdict, body)); err != nil {
		t.Fatal(err)
	}
}

// TestReobserveLooksAgainAtUnsettledVerdicts: a VM pending at the deadline
// is looked at again once its hotplug is done and recorded live beside its
// verdict, which stays pending; it is not looked at again, and neither is a
// VM whose verdict was settled.
func TestReobserveLooksAgainAtUnsettledVerdicts(t *testing.T) {
	js := testenv.JetStream(t)
	held := testenv.RunningVMI("ns", "held")
	clients := testenv.FakeClients(nil, verifyVM("held"), held, verifyVM("done"), testenv.RunningVMI("ns", "done"))
	cache := testenv.StartCache(t, clients)
	for name, observed := range map[string]events.Observed{"held": events.ObservedPending, "done": events.ObservedRestart} {
		moved(t, js, name, events.ResultLive, 1, time.Second)
		storeVerdict(t, js, name, observed)
	}
	ctx := t.Context()

	got, err := Reobserve(ctx, js, cache, verifyEvent, time.Now())
	seen := got.Again
	if err != nil || len(seen) != 1 || seen[0].Now.VM.Name != "held" || seen[0].Now.Observed != events.ObservedNotObserved {
		t.Fatalf("before the hotplug: %+v, %v; want held not observed (its VMI still has 2 sockets)", seen, err)
	}
	held = held.DeepCopy()
	testenv.MigratedTo(held, 4, time.Now())
	if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the cache to show the hotplug", func() bool {
		return cache.VMI("ns", "held").Spec.Domain.CPU.Sockets == 4
	})
	got, err = Reobserve(ctx, js, cache, verifyEvent, time.Now())
	seen = got.Again
	if err != nil || len(seen) != 1 || seen[0].Before.Observed != events.ObservedNotObserved || seen[0].Now.Observed != events.ObservedLive || !seen[0].Now.Reobserved {
		t.Fatalf("after the hotplug: %+v, %v; want held not observed → live", seen, err)
	}
	if got, err = Reobserve(ctx, js, cache, verifyEvent, time.Now()); err != nil || len(got.Again) != 0 || got.Awaited != 0 {
		t.Fatalf("once settled: %+v, %v; want nothing looked at again", got, err)
	}
	if v, n := verdictOf(t, js, "held"); n != 1 || v.Observed != events.ObservedPending {
		t.Errorf("the verdict: %d stored, the last %s; want the one pending verdict, unchanged", n, v.Observed)
	}
	// The re-observation is the VM's verdict from now on: status and
	// gates count it, not the first one.
	a := Account{EventID: verifyEvent, Latest: map[string]events.Outcome{}}
	for uid, o := range must(movedOutcomes(ctx, js, verifyEvent)) {
		a.Latest[uid] = o
	}
	if err := CountVerdicts(ctx, js, &a); err != nil || a.Verdicts[events.ObservedLive] != 1 || a.Verdicts[events.ObservedPending] != 0 || a.Differ != 1 {
		t.Errorf("counted %v, %d differ, %v; want held counted live by its re-observation (done's restart still differs)", a.Verdicts, a.Differ, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestReobserveCountsVerdictsStillAwaited: a moved VM whose verdict is not
// stored yet is not looked at, and is counted as awaited, so verify never
// says that no verdict is unsettled while verdicts are still to come.
func TestReobserveCountsVerdictsStillAwaited(t *testing.T) {
	js := testenv.JetStream(t)
	clients := testenv.FakeClients(nil, verifyVM("early"), testenv.RunningVMI("ns", "early"))
	cache := testenv.StartCache(t, clients)
	moved(t, js, "early", events.ResultLive, 1, time.Hour)
	got, err := Reobserve(t.Context(), js, cache, verifyEvent, time.Now())
	if err != nil || len(got.Again) != 0 || got.Awaited != 1 {
		t.Errorf("a VM whose verdict is awaited: %+v, %v; want it counted as awaited, not looked at", got, err)
	}
}
