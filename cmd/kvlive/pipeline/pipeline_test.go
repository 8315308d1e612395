package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	virtfake "kubevirt.io/client-go/kubevirt/fake"

	"github.com/nats-io/nats.go/jetstream"
	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
	"kvlive/internal/testenv"
	"kvlive/readmodel/inspect"
	"kvlive/rollout"
)

const fleetSize = 40

// fleet: fleetSize VMs on u1 (every other one running, labelled by parity),
// and a few on u3 that no test touches.
func fleet() []runtime.Object {
	objs := []runtime.Object{testenv.ClusterInstancetype("u1", 2, "4Gi"), testenv.ClusterInstancetype("u2", 4, "8Gi"), testenv.ClusterInstancetype("u3", 1, "2Gi")}
	for i := range fleetSize + 5 {
		it, running := "u1", i%2 == 0
		if i >= fleetSize {
			it = "u3"
		}
		strategy := virtv1.RunStrategyHalted
		if running {
			strategy = virtv1.RunStrategyAlways
		}
		name := fmt.Sprintf("vm-%02d", i)
		objs = append(objs, &virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fmt.Sprintf("ns-%d", i%3), UID: types.UID("uid-" + name),
				Labels: map[string]string{"parity": fmt.Sprint(i % 2)}},
			Spec: virtv1.VirtualMachineSpec{RunStrategy: &strategy, Instancetype: &virtv1.InstancetypeMatcher{Name: it},
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"}}},
		})
		if running && it == "u1" {
			objs = append(objs, testenv.RunningVMI(fmt.Sprintf("ns-%d", i%3), name))
		}
	}
	return objs
}

// writes counts kvlive's writes per VM: its JSON patches and server-side
// applies (the stand-in writes merge patches).
type writes struct {
	mu    sync.Mutex
	perVM map[string]int
}

func countWrites(clients kube.Clients) *writes {
	w := &writes{perVM: map[string]int{}}
	clients.Virt.(*virtfake.Clientset).PrependReactor("patch", "virtualmachines", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p := a.(k8stesting.PatchAction); p.GetPatchType() == types.JSONPatchType || p.GetPatchType() == types.ApplyPatchType {
			w.mu.Lock()
			w.perVM[p.GetNamespace()+"/"+p.GetName()]++
			w.mu.Unlock()
		}
		return false, nil, nil
	})
	return w
}

func (w *writes) get(vm string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perVM[vm]
}

func start(t *testing.T, configure ...func(*pipeline.Config, jetstream.JetStream)) (kube.Clients, jetstream.JetStream, *writes) {
	t.Helper()
	return startOn(t, testenv.JetStream(t), configure...)
}

// startOn is start on a bus of the test's own.
func startOn(t *testing.T, js jetstream.JetStream, configure ...func(*pipeline.Config, jetstream.JetStream)) (kube.Clients, jetstream.JetStream, *writes) {
	t.Helper()
	clients := testenv.FakeClients(nil, fleet()...)
	w := countWrites(clients)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := pipeline.Config{Clients: clients, JetStream: js, Stages: pipeline.AllStages, StandIn: true, ApplierWorkers: 8}
	for _, c := range configure {
		c(&cfg, js)
	}
	r, err := pipeline.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := r.Wait(); err != nil {
			t.Error(err)
		}
	})
	testenv.Eventually(t, time.Minute, "the fleet pinned and the watcher primed", func() bool {
		vms, _ := clients.Virt.KubevirtV1().VirtualMachines("").List(ctx, metav1.ListOptions{})
		for _, vm := range vms.Items {
			if vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil {
				return false
			}
		}
		vmis, _ := clients.Virt.KubevirtV1().VirtualMachineInstances("").List(ctx, metav1.ListOptions{})
		for _, vmi := range vmis.Items {
			if vmi.Annotations[standin.AnnotationBootPins] == "" {
				return false
			}
		}
		kv, _ := js.KeyValue(ctx, events.BucketGenerations)
		keys, _ := kv.Keys(ctx)
		return len(keys) == 3
	})
	return clients, js, w
}

func follow(t *testing.T, js jetstream.JetStream, eventID string) rollout.Progress {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := rollout.Follow(ctx, js, eventID, nil)
	if err != nil {
		t.Fatalf("following %s: %v (%d of %d outcomes)", eventID, err, len(p.Outcomes), p.Planned)
	}
	return p
}

func TestEditReachesEveryReferencingVMOnce(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	p := follow(t, js, edit(t, clients))
	if p.Planned != fleetSize || len(p.Outcomes) != fleetSize {
		t.Fatalf("planned %d, outcomes %d, want %d", p.Planned, len(p.Outcomes), fleetSize)
	}
	for i := range fleetSize {
		name, ns := fmt.Sprintf("vm-%02d", i), fmt.Sprintf("ns-%d", i%3)
		o := p.Outcomes["uid-"+name]
		want := events.ResultNextBoot
		if i%2 == 0 {
			want = events.ResultLive
		}
		if o.Result != want || !o.Wrote || o.TraceID == "" {
			t.Errorf("%s: outcome %+v, want %s written with a trace id", name, o, want)
		}
		vm, _ := clients.Virt.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
		wantRev := name + "-u1-v1beta1-uid-u1-2"
		if got := vm.Status.InstancetypeRef.ControllerRevisionRef.Name; got != wantRev || o.Revision != wantRev {
			t.Errorf("%s pinned to %s (outcome %s), want %s", name, got, o.Revision, wantRev)
		}
		if n := w.get(ns + "/" + name); n != 1 {
			t.Errorf("%s patched %d times, want once", name, n)
		}
		if _, err := clients.Kube.AppsV1().ControllerRevisions(ns).Get(ctx, wantRev, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: revision: %v", name, err)
		}
	}
	for i := fleetSize; i < fleetSize+5; i++ {
		if n := w.get(fmt.Sprintf("ns-%d/vm-%02d", i%3, i)); n != 0 {
			t.Errorf("vm-%02d on u3 was patched %d times", i, n)
		}
	}
}

func TestSwitchMovesOnlySelectedVMs(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	id, err := rollout.RequestSwitch(ctx, js, events.SwitchRequest{
		From:     events.Ref{Kind: events.KindClusterInstancetype, Name: "u1"},
		To:       events.Ref{Kind: events.KindClusterInstancetype, Name: "u2"},
		Selector: "parity=0",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := follow(t, js, id)
	if len(p.Outcomes) != fleetSize/2 {
		t.Fatalf("%d outcomes, want %d", len(p.Outcomes), fleetSize/2)
	}
	for i := range fleetSize {
		name, ns := fmt.Sprintf("vm-%02d", i), fmt.Sprintf("ns-%d", i%3)
		vm, _ := clients.Virt.KubevirtV1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
		selected := i%2 == 0
		if got := vm.Spec.Instancetype.Name; (got == "u2") != selected {
			t.Errorf("%s references %s (selected: %v)", name, got, selected)
		}
		wantWrites := 0
		if selected {
			wantWrites = 1
			if o := p.Outcomes["uid-"+name]; o.Result != events.ResultLive || !o.Wrote {
				t.Errorf("%s: outcome %+v, want a live switch", name, o)
			}
		}
		if n := w.get(ns + "/" + name); n != wantWrites {
			t.Errorf("%s patched %d times, want %d", name, n, wantWrites)
		}
	}
	// The stand-in (virt-controller) then pins the switched VMs to u2 and
	// hot-plugs its 4 sockets and 8Gi.
	testenv.Eventually(t, time.Minute, "switched VMs live on u2", func() bool {
		for i := 0; i < fleetSize; i += 2 {
			vmi, err := clients.Virt.KubevirtV1().VirtualMachineInstances(fmt.Sprintf("ns-%d", i%3)).Get(ctx, fmt.Sprintf("vm-%02d", i), metav1.GetOptions{})
			if err != nil || vmi.Spec.Domain.CPU.Sockets != 4 || vmi.Spec.Domain.Memory.Guest.String() != "8Gi" {
				return false
			}
		}
		return true
	})
}

func TestPoisonPlanIsDeadLettered(t *testing.T) {
	_, js, _ := start(t)
	ctx := context.Background()
	if _, err := js.Publish(ctx, events.PlanSubject("ns-0", "poison"), []byte(`{"not":"a cloudevent"}`)); err != nil {
		t.Fatal(err)
	}
	dlq, err := js.Stream(ctx, events.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the poison plan in the dead-letter stream", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	m, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Header.Get(events.HeaderDeadReason), "malformed") || m.Header.Get(events.HeaderDeadSubject) != events.PlanSubject("ns-0", "poison") ||
		string(m.Data) != `{"not":"a cloudevent"}` {
		t.Errorf("dead letter: headers %v, body %s", m.Header, m.Data)
	}
}

// steer pauses, resumes or aborts eventID's rollout, as kvlive rollout does.
func steer(t *testing.T, js jetstream.JetStream, eventID string, action events.ControlAction, reason string) {
	t.Helper()
	ctx := context.Background()
	store, err := rollout.Open(ctx, js)
	if err == nil {
		_, _, err = store.Apply(ctx, eventID, action, reason, "ops", time.Now(), false)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", action, eventID, err)
	}
}

// pauseAhead pauses the event the next edit of u1 makes, before it exists,
// makes that edit, and waits until every one of its plans is held.
func pauseAhead(t *testing.T, clients kube.Clients, js jetstream.JetStream) string {
	t.Helper()
	ctx := context.Background()
	eventID := events.EventID(events.KindClusterInstancetype, "uid-u1", 2)
	steer(t, js, eventID, events.ActionPause, "checking")
	edit(t, clients)
	testenv.Eventually(t, time.Minute, "every plan held", func() bool {
		st, err := rollout.AccountOf(ctx, js, eventID)
		return err == nil && st.Held == fleetSize
	})
	return eventID
}

func TestPausedRolloutHoldsEveryPlanUntilResumed(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	eventID := pauseAhead(t, clients, js)
	st, err := rollout.AccountOf(ctx, js, eventID)
	if err != nil || len(st.Outcomes) != 0 {
		t.Fatalf("paused rollout has outcomes %v (%v)", st.Outcomes, err)
	}
	for i := range fleetSize {
		if n := w.get(fmt.Sprintf("ns-%d/vm-%02d", i%3, i)); n != 0 {
			t.Fatalf("vm-%02d patched %d times while paused", i, n)
		}
	}
	steer(t, js, eventID, events.ActionResume, "")
	p := follow(t, js, eventID)
	for i := range fleetSize {
		name, ns := fmt.Sprintf("vm-%02d", i), fmt.Sprintf("ns-%d", i%3)
		if o := p.Outcomes["uid-"+name]; !o.Wrote || o.Result == events.ResultSkip {
			t.Errorf("%s: outcome %+v after resume, want it moved", name, o)
		}
		if n := w.get(ns + "/" + name); n != 1 {
			t.Errorf("%s patched %d times, want once", name, n)
		}
	}
	if st, err := rollout.AccountOf(ctx, js, eventID); err != nil || st.Held != 0 {
		t.Errorf("%d plans still held after resume (%v)", st.Held, err)
	}
}

func TestAbortedRolloutSkipsEveryHeldVM(t *testing.T) {
	clients, js, w := start(t)
	ctx := context.Background()
	eventID := pauseAhead(t, clients, js)
	steer(t, js, eventID, events.ActionAbort, "wrong size")
	p := follow(t, js, eventID)
	for i := range fleetSize {
		name, ns := fmt.Sprintf("vm-%02d", i), fmt.Sprintf("ns-%d", i%3)
		if o := p.Outcomes["uid-"+name]; o.Wrote || o.Result != events.ResultSkip || !strings.Contains(o.Reason, "aborted") || !strings.Contains(o.Reason, "wrong size") {
			t.Errorf("%s: outcome %+v, want skipped as aborted", name, o)
		}
		if n := w.get(ns + "/" + name); n != 0 {
			t.Errorf("%s patched %d times after the abort", name, n)
		}
	}
	list, err := inspect.NewReader(js).Events(ctx, 0)
	if err != nil || len(list) != 1 || list[0].ID != eventID || list[0].State != rollout.PhaseAborted {
		t.Errorf("kvlive events: %+v (%v), want the event marked aborted", list, err)
	}
}
