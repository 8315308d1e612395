package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	virtfake "kubevirt.io/client-go/kubevirt/fake"

	"kvlive/cmd/kvlive/pipeline"
	"kvlive/events"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
	"kvlive/internal/testenv"
	"kvlive/internal/webhook"
	"kvlive/readmodel/notify"
)

// world is one scenario's cluster and bus: an in-memory API server whose
// VM writes go through apiServer (the write log, and the faults it
// injects), the stand-in playing virt-controller, and the replicas.
type world struct {
	t       *testing.T
	sc      scenario
	clients kube.Clients
	js      jetstream.JetStream
	api     *apiServer
	standin *standin.Controller
	// told is the receiver every replica's notifier tells (kvlive run
	// --notify).
	told *testenv.NotifyReceiver
	hook *webhook.Client

	mu       sync.Mutex
	replicas []*replica
	// steps are what the schedule did, as it did them, for the report.
	steps []string
	// started are the rollouts the schedule started, oldest first.
	started []*rolloutLog
	// budgets are the KubeVirt CR's parallelMigrationsPerCluster, from
	// the start, with the times the steps changed it.
	budgets []budgetChange
	// vmStarts are when the steps started each VM.
	vmStarts map[string]time.Time
	// promotes counts the schedule's pairs of promotes (promoteTwice).
	promotes int
	// controls is every control record written, and slots every change
	// of a migration slot, as the buckets' watches told them, oldest
	// first (watchBus).
	controls []controlEntry
	slots    []slotEntry
}

// controlEntry is one write of a rollout's control record: the event id,
// when the bus stored it, and the record.
type controlEntry struct {
	id string
	at time.Time
	events.Control
}

// slotEntry is one change of a migration budget slot: its key, when the
// bus stored it, and the VM holding it (none: the slot was freed).
type slotEntry struct {
	key string
	at  time.Time
	vm  string
	// id is the event id of the rollout whose move holds it.
	id string
}

// watchBus keeps every write of the control bucket in w.controls, and
// every change of a migration slot in w.slots, until ctx ends: what the
// checks read the rollouts' released batches, whose promote released
// each, and which VMs held slots when from (unreleased, promotedOnce,
// slotless).
func (w *world) watchBus(ctx context.Context) error {
	err := w.watch(ctx, events.BucketControl, ">", func(e jetstream.KeyValueEntry) {
		var c events.Control
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &c) == nil {
			w.controls = append(w.controls, controlEntry{id: e.Key(), at: e.Created(), Control: c})
		}
	})
	if err != nil {
		return err
	}
	return w.watch(ctx, events.BucketBus, events.MigrationKeys, func(e jetstream.KeyValueEntry) {
		if e.Key() == events.MigrationWaitKey {
			return
		}
		var ms events.MigrationSlot
		entry := slotEntry{key: e.Key(), at: e.Created()}
		if e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &ms) == nil {
			entry.vm, entry.id = ms.VM.Namespace+"/"+ms.VM.Name, ms.EventID
		}
		w.slots = append(w.slots, entry)
	})
}

// watch hands every change of bucket's keys, from the first, to keep
// (under w.mu) until ctx ends, waiting for the bucket to exist (a
// replica's start creates it).
func (w *world) watch(ctx context.Context, bucket, keys string, keep func(jetstream.KeyValueEntry)) error {
	var kv jetstream.KeyValue
	for {
		var err error
		if kv, err = w.js.KeyValue(ctx, bucket); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the %s bucket: %w", bucket, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	watch, err := kv.Watch(ctx, keys, jetstream.IncludeHistory())
	if err != nil {
		return fmt.Errorf("watch the %s bucket: %w", bucket, err)
	}
	go func() {
		for e := range watch.Updates() {
			if e == nil {
				continue
			}
			w.mu.Lock()
			keep(e)
			w.mu.Unlock()
		}
	}()
	return nil
}

func (w *world) vmStarted(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.vmStarts == nil {
		w.vmStarts = map[string]time.Time{}
	}
	w.vmStarts[key] = time.Now()
}

func (w *world) startedVM(key string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.vmStarts[key]
	return at, ok
}

// budgetChange is the KubeVirt CR's migration budget from a time on.
type budgetChange struct {
	at time.Time
	n  int
}

// replica is one `kvlive run` of the scenario, which a fault kills
// (its context cut) and a later step starts again.
type replica struct {
	name    string
	cancel  context.CancelFunc
	running *pipeline.Running
	// notifying ends with the replica's notifier.
	notifying chan error
}

// write is one write of kvlive's that the API server carried out: a pin
// moved (from → to) on a VM, at a time.
type write struct {
	vm       string
	from, to string
	at       time.Time
}

// apiServer is the in-memory API server's handling of kvlive's writes to
// VMs (JSON patches): it logs those it carried out, and injects the
// faults the scenario draws: refused before the write (a conflict, or the
// server unavailable), or carried out and answered with a timeout (the
// client cannot tell it happened).
type apiServer struct {
	// next are the reactors it hands a write on to: the in-memory API
	// server's own, which store it and tell its watchers.
	next    []k8stesting.Reactor
	tracker k8stesting.ObjectTracker

	// order serializes the writes to VMs, each with its new
	// resourceVersion (serial, as an API server's for one object), which
	// the in-memory server does not keep: a write that tests the version
	// it read fails on a VM changed since, as on a real server.
	order   sync.Mutex
	version int

	mu     sync.Mutex
	rng    *rand.Rand
	faulty float64 // chance a write meets a fault; 0 turns faults off
	lose   int     // the next lose pin writes are carried out and answered with a timeout
	writes []write
	faults int
}

// serve takes every write to a VM: kvlive's JSON patches through react
// (the log, the faults), the others straight to the in-memory server; each
// write carried out then gets the VM's next resourceVersion.
func (s *apiServer) serve(a k8stesting.Action) (bool, runtime.Object, error) {
	switch a.GetVerb() {
	case "create", "update", "patch":
	default:
		return false, nil, nil
	}
	s.order.Lock()
	defer s.order.Unlock()
	handled, obj, err := s.react(a)
	if !handled {
		obj, err = s.pass(a)
	}
	if err != nil && !apierrors.IsTimeout(err) {
		return true, obj, err
	}
	stored, gerr := s.tracker.Get(a.GetResource(), a.GetNamespace(), nameOf(a))
	if gerr != nil {
		return true, obj, err
	}
	vm := stored.(*virtv1.VirtualMachine).DeepCopy()
	s.version++
	vm.ResourceVersion = strconv.Itoa(s.version)
	if uerr := s.tracker.Update(a.GetResource(), vm, a.GetNamespace()); uerr != nil {
		return true, obj, err
	}
	if err != nil {
		return true, nil, err // carried out, answered with a timeout
	}
	return true, vm, nil
}

// nameOf is the name of the object a create, update or patch writes.
func nameOf(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.PatchAction:
		return a.GetName()
	case k8stesting.CreateAction: // an update is one too: both carry the object
		if m, ok := a.GetObject().(metav1.Object); ok {
			return m.GetName()
		}
	}
	return ""
}

func (s *apiServer) react(a k8stesting.Action) (bool, runtime.Object, error) {
	p, ok := a.(k8stesting.PatchAction)
	if !ok || p.GetPatchType() != types.JSONPatchType {
		return false, nil, nil
	}
	from, to, pin := pinOf(p.GetPatch())
	s.mu.Lock()
	fault := 0
	switch {
	case s.lose > 0 && pin:
		fault = 3
		s.lose--
		s.faults++
	case s.faulty > 0 && s.rng.Float64() < s.faulty:
		fault = 1 + s.rng.IntN(3)
		s.faults++
	}
	s.mu.Unlock()
	gr := schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}
	switch fault {
	case 1:
		return true, nil, apierrors.NewConflict(gr, p.GetName(), fmt.Errorf("injected by the soak"))
	case 2:
		return true, nil, apierrors.NewServiceUnavailable("injected by the soak")
	}
	obj, err := s.pass(a)
	if err == nil && pin {
		s.mu.Lock()
		s.writes = append(s.writes, write{vm: p.GetNamespace() + "/" + p.GetName(), from: from, to: to, at: time.Now()})
		s.mu.Unlock()
	}
	if fault == 3 && err == nil {
		return true, nil, apierrors.NewTimeoutError("injected by the soak after the write", 1)
	}
	return true, obj, err
}

// pass hands the action to the next reactor that takes it.
func (s *apiServer) pass(a k8stesting.Action) (runtime.Object, error) {
	for _, r := range s.next {
		if !r.Handles(a) {
			continue
		}
		if handled, obj, err := r.React(a); handled {
			return obj, err
		}
	}
	return nil, fmt.Errorf("soak: nothing handled %s %s", a.GetVerb(), a.GetResource().Resource)
}

// pinOf reads a pin move out of a JSON patch: the revision it tests the
// pin for and the one it replaces it with.
func pinOf(patch []byte) (from, to string, ok bool) {
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if json.Unmarshal(patch, &ops) != nil {
		return "", "", false
	}
	for _, o := range ops {
		if !strings.HasSuffix(o.Path, "controllerRevisionRef/name") && !strings.HasSuffix(o.Path, "/revisionName") {
			continue
		}
		v, _ := o.Value.(string)
		switch o.Op {
		case "test":
			from = v
		case "replace", "add":
			to, ok = v, true
		}
	}
	return from, to, ok
}

func (s *apiServer) setFaulty(p float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faulty = p
}

func (s *apiServer) log() []write {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]write(nil), s.writes...)
}

// newWorld builds the scenario's cluster and bus and starts the stand-in;
// the replicas start with start.
func newWorld(t *testing.T, sc scenario) *world {
	objs := []runtime.Object{kubeVirtCR(sc.budget), testenv.ClusterInstancetype("u1", 2, "4Gi"), testenv.ClusterInstancetype("u2", 4, "8Gi")}
	for i := range sc.vms {
		objs = append(objs, sc.vm(i)...)
	}
	hook, err := webhook.New(webhook.TLS{}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, sc: sc, clients: testenv.FakeClients(nil, objs...), js: testenv.JetStream(t),
		budgets: []budgetChange{{n: sc.budget}}, told: testenv.NewNotifyReceiver(t, testenv.ReceiverOK), hook: hook}
	virt := w.clients.Virt.(*virtfake.Clientset)
	w.api = &apiServer{next: slices.Clone(virt.ReactionChain), rng: rand.New(rand.NewPCG(uint64(sc.seed), 7))}
	w.api.tracker = virt.Tracker()
	virt.PrependReactor("*", "virtualmachines", w.api.serve)

	ctx, cancel := context.WithCancel(context.Background())
	sr, err := pipeline.Start(ctx, pipeline.Config{Clients: w.clients, JetStream: w.js, StandIn: true,
		StandInMigration: sc.migration, StandInFinalizeLag: sc.finalizeLag, StandInStarted: func(c *standin.Controller) { w.standin = c }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.stopAll()
		cancel()
		if err := sr.Wait(); err != nil {
			t.Errorf("the stand-in: %v", err)
		}
	})
	testenv.Eventually(t, time.Minute, "the stand-in pinned the fleet and its VMIs", func() bool {
		vms, _ := w.clients.Virt.KubevirtV1().VirtualMachines("").List(ctx, metav1.ListOptions{})
		for _, vm := range vms.Items {
			if vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil {
				return false
			}
		}
		vmis, _ := w.clients.Virt.KubevirtV1().VirtualMachineInstances("").List(ctx, metav1.ListOptions{})
		for _, vmi := range vmis.Items {
			if vmi.Annotations[standin.AnnotationBootPins] == "" {
				return false
			}
		}
		return len(vms.Items) == sc.vms
	})
	return w
}

// kubeVirtCR is a deployed KubeVirt CR with LiveUpdate, live migration as
// the workload update method, and budget migrations at once.
func kubeVirtCR(budget int) *virtv1.KubeVirt {
	strategy := virtv1.VMRolloutStrategyLiveUpdate
	n := uint32(budget)
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt", Namespace: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{
			Configuration: virtv1.KubeVirtConfiguration{
				VMRolloutStrategy:      &strategy,
				MigrationConfiguration: &virtv1.MigrationConfiguration{ParallelMigrationsPerCluster: &n},
			},
			WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{
				WorkloadUpdateMethods: []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodLiveMigrate},
			},
		},
		Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed},
	}
}

// start starts replica i, or starts it again once killed.
func (w *world) start(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.replicas) <= i {
		w.replicas = append(w.replicas, &replica{name: fmt.Sprintf("replica-%d", len(w.replicas))})
	}
	r := w.replicas[i]
	if r.running != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	running, err := pipeline.Start(ctx, pipeline.Config{
		Clients: w.clients, JetStream: w.js, Stages: pipeline.AllStages,
		ApplierWorkers: 4, PlannerWorkers: 2, Rate: w.sc.rate, SlotReactions: w.sc.slotReactions,
		// Cut short: a kill ends its writes in flight.
		ShutdownGrace: time.Millisecond,
		LeaderElection: &pipeline.LeaderElection{Namespace: "kvlive", Name: "kvlive-watcher", Identity: r.name,
			LeaseDuration: time.Second, RenewDeadline: 700 * time.Millisecond, RetryPeriod: 200 * time.Millisecond},
	})
	if err != nil {
		cancel()
		w.t.Errorf("start %s: %v", r.name, err)
		return
	}
	n, err := notify.New(notify.Config{JetStream: w.js, Client: w.hook, OutcomesEvery: time.Second,
		Receivers: []notify.Receiver{{URL: w.told.URL(), Format: notify.FormatCloudEvents}}})
	if err != nil {
		cancel()
		_ = running.Wait()
		w.t.Errorf("start %s's notifier: %v", r.name, err)
		return
	}
	r.notifying = make(chan error, 1)
	go func() { r.notifying <- n.Run(ctx) }()
	r.cancel, r.running = cancel, running
}

// kill cuts replica i's context and waits until it stopped.
func (w *world) kill(i int) {
	w.mu.Lock()
	r := (*replica)(nil)
	if i < len(w.replicas) {
		r = w.replicas[i]
	}
	w.mu.Unlock()
	if r == nil || r.running == nil {
		return
	}
	r.cancel()
	if err := r.running.Wait(); err != nil {
		w.note("%s stopped: %v", r.name, err)
	}
	if err := <-r.notifying; err != nil {
		w.note("%s's notifier stopped: %v", r.name, err)
	}
	r.running = nil
}

func (w *world) stopAll() {
	for i := range w.replicas {
		w.kill(i)
	}
}

// note records what a step did, and when, for the report of a failing
// seed.
func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.steps = append(w.steps, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// update changes VM namespace/name as someone else would, retrying on a
// conflict.
func (w *world) update(ctx context.Context, namespace, name string, change func(*virtv1.VirtualMachine)) error {
	vms := w.clients.Virt.KubevirtV1().VirtualMachines(namespace)
	for {
		vm, err := vms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(vm)
		if _, err = vms.Update(ctx, vm, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
}

// setBudget sets the KubeVirt CR's parallelMigrationsPerCluster.
func (w *world) setBudget(ctx context.Context, n int) error {
	kvs := w.clients.Virt.KubevirtV1().KubeVirts("kubevirt")
	kv, err := kvs.Get(ctx, "kubevirt", metav1.GetOptions{})
	if err != nil {
		return err
	}
	m := uint32(n)
	kv.Spec.Configuration.MigrationConfiguration.ParallelMigrationsPerCluster = &m
	before := time.Now()
	if _, err = kvs.Update(ctx, kv, metav1.UpdateOptions{}); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.budgets = append(w.budgets, budgetChange{at: before, n: n})
	return nil
}
