package framework

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/kube"
)

// The players stand in for what runs on nodes and in the control plane
// beside KubeVirt, none of which a bare API server has: the scheduler and the
// kubelet (for virt-launcher pods) and virt-handler (for VMI status). Each
// does the least its original does that virt-controller waits for, and
// nothing kvlive reads directly.

// LabelNotMigratable, set to "true" on a VM template, makes the virt-handler
// player report the VMI as not live-migratable (LiveMigratable=False), as a
// VMI on node-local storage would be.
const LabelNotMigratable = "kvlive.test/not-migratable"

// playerResync is how often the players look at every pod and VMI again,
// beside reacting to their watches.
const playerResync = 5 * time.Second

// startPlayers runs the scheduler + kubelet player, the virt-handler
// player and the migration player until the test ends.
func startPlayers(t *testing.T, c kube.Clients) *VirtHandler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	h := &VirtHandler{clients: c}
	handler := newPlayer("virt-handler", cache.NewListWatchFromClient(c.Virt.KubevirtV1().RESTClient(), "virtualmachineinstances", "",
		fields.Everything()), &virtv1.VirtualMachineInstance{}, func(ctx context.Context, obj any) error {
		return h.sync(ctx, obj.(*virtv1.VirtualMachineInstance))
	})
	h.vmis = handler.informer
	launcher := newPlayer("scheduler+kubelet", cache.NewListWatchFromClient(c.Kube.CoreV1().RESTClient(), "pods", "",
		fields.Everything()), &corev1.Pod{}, func(ctx context.Context, obj any) error {
		return h.runLauncherPod(ctx, obj.(*corev1.Pod))
	})
	migrations := newPlayer("virt-handler migrations", cache.NewListWatchFromClient(c.Virt.KubevirtV1().RESTClient(), "virtualmachineinstancemigrations", "",
		fields.Everything()), &virtv1.VirtualMachineInstanceMigration{}, func(ctx context.Context, obj any) error {
		return h.syncMigration(ctx, obj.(*virtv1.VirtualMachineInstanceMigration))
	})
	h.requeueAll = migrations.requeueAll
	// virt-handler watches VMIs: a migration's next step (finalizing once
	// the domain landed on the target) follows its VMI's update, not the
	// migration object's next change.
	_, _ = handler.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, o any) {
		if vmi, ok := o.(*virtv1.VirtualMachineInstance); ok && vmi.Status.MigrationState != nil && !vmi.Status.MigrationState.Completed {
			migrations.requeueAll()
		}
	}})
	for _, p := range []*player{launcher, handler, migrations} {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return h
}

// player is one informer and a rate-limited work queue calling sync for
// each object that changed, retrying on error (conflicts included).
type player struct {
	name     string
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	sync     func(context.Context, any) error
}

func newPlayer(name string, lw cache.ListerWatcher, obj runtime.Object, sync func(context.Context, any) error) *player {
	p := &player{
		name:     name,
		informer: cache.NewSharedIndexInformer(lw, obj, playerResync, cache.Indexers{}),
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		sync:     sync,
	}
	enqueue := func(o any) {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			p.queue.Add(key)
		}
	}
	_, _ = p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
	})
	return p
}

func (p *player) requeueAll() {
	for _, key := range p.informer.GetStore().ListKeys() {
		p.queue.Add(key)
	}
}

func (p *player) run(ctx context.Context) {
	defer p.queue.ShutDown()
	go p.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced) {
		return
	}
	go func() { <-ctx.Done(); p.queue.ShutDown() }()
	for {
		key, quit := p.queue.Get()
		if quit {
			return
		}
		obj, exists, err := p.informer.GetStore().GetByKey(key)
		if err == nil && exists {
			err = p.sync(ctx, obj)
		}
		if d, again := asRequeue(err); again {
			p.queue.Forget(key)
			p.queue.AddAfter(key, d)
		} else if err != nil && ctx.Err() == nil {
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
}

// runLauncherPod plays the scheduler (bind a virt-launcher pod to a node:
// a new VMI's to one of Nodes, a migration target's to another node than
// its VMI runs on) and the kubelet (report it running with its containers
// started), which is what virt-controller waits for before it hands the
// VMI to virt-handler, or a migration to the target.
func (h *VirtHandler) runLauncherPod(ctx context.Context, pod *corev1.Pod) error {
	c := h.clients
	if pod.Labels[virtv1.AppLabel] != "virt-launcher" {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		if vmi := h.runsOn(pod); vmi != nil {
			// The launcher asked to stop (an eviction) shuts its domain
			// down first: virt-handler reports the VMI final, and only then
			// do its containers exit and the kubelet delete the pod. A
			// running VMI without its pod is no state a cluster shows
			// (KubeVirt v1.9.0's workload updater dereferences the missing
			// pod of an eviction candidate: workload-updater.go:617).
			vmi = vmi.DeepCopy()
			setPhase(vmi, virtv1.Succeeded)
			if err := h.update(ctx, vmi); err != nil {
				return err
			}
			return requeueAfter(250 * time.Millisecond)
		}
		return finishLauncherPod(ctx, c, pod)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	if pod.Spec.NodeName == "" {
		node := nodeFor(pod)
		if _, target := pod.Labels[virtv1.MigrationJobLabel]; target {
			source := h.vmiNode(pod)
			if source == "" {
				return requeueAfter(250 * time.Millisecond)
			}
			node = targetNodeFor(source)
		}
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}
		return ignoreGone(c.Kube.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}))
	}
	if pod.Status.Phase == corev1.PodRunning {
		return nil
	}
	pod = pod.DeepCopy()
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = nil
	for _, ctr := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, Ready: true, Started: ptr(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err := c.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return ignoreGone(err)
}

// runsOn is the VMI owning pod when it runs in that pod (on its node) and
// is not final yet, or nil.
func (h *VirtHandler) runsOn(pod *corev1.Pod) *virtv1.VirtualMachineInstance {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return nil
	}
	obj, ok, _ := h.vmis.GetStore().GetByKey(pod.Namespace + "/" + owner.Name)
	if !ok {
		return nil
	}
	vmi := obj.(*virtv1.VirtualMachineInstance)
	if vmi.UID != owner.UID || vmi.IsFinal() || vmi.Status.NodeName != pod.Spec.NodeName || vmi.Status.Phase != virtv1.Running {
		return nil
	}
	return vmi
}

// vmiNode is the node the VMI owning pod runs on, "" while unknown.
func (h *VirtHandler) vmiNode(pod *corev1.Pod) string {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return ""
	}
	obj, ok, _ := h.vmis.GetStore().GetByKey(pod.Namespace + "/" + owner.Name)
	if !ok {
		return ""
	}
	return obj.(*virtv1.VirtualMachineInstance).Status.NodeName
}

// finishLauncherPod plays the kubelet ending a deleted virt-launcher pod:
// virt-controller deletes it gracefully when its VMI is deleted (a
// restart's stop), and the API server keeps a bound pod until the kubelet,
// its containers stopped, deletes it for good with grace period 0 and the
// pod's UID as precondition (the kubelet's status manager). Nothing else
// would: a bare API server runs no kubelet and no garbage collector.
func finishLauncherPod(ctx context.Context, c kube.Clients, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		return nil // an unbound pod is deleted at once by the API server
	}
	err := c.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr(int64(0)),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if apierrors.IsConflict(err) {
		return nil // the name belongs to another pod now: this one is gone
	}
	return ignoreGone(err)
}

// VirtHandler plays virt-api's VMI defaulting (the hotplug limits its
// mutating webhook sets on a new VMI) and virt-handler: once virt-controller
// schedules a VMI it reports it running (phase, Ready and LiveMigratable
// conditions, the CPU topology and memory it booted with), and it plays
// both ends of every migration virt-controller starts (migration.go), where
// a hot-plug reaches the guest, unless held.
type VirtHandler struct {
	clients    kube.Clients
	vmis       cache.SharedIndexInformer
	held       atomic.Bool
	duration   atomic.Int64
	requeueAll func()
	mu         sync.Mutex
	finished   map[string][]string
	faultsOf   map[string]*Fault
	recorded   map[types.UID]bool
	migrations []Migration
}

// Hold stops running migrations short of their end: hot-plugs stay
// pending, as on a slow network, until Release.
func (h *VirtHandler) Hold() { h.held.Store(true) }

// Release lets held migrations end.
func (h *VirtHandler) Release() {
	h.held.Store(false)
	h.requeueAll()
}

// Finished returns the hotplug conditions the player finished on a
// migration's target for the VMI namespace/name, oldest first: the proof
// that virt-controller asked for a hotplug and carried it by migration.
func (h *VirtHandler) Finished(namespace, name string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.finished[namespace+"/"+name]...)
}

func (h *VirtHandler) sync(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	if vmi.DeletionTimestamp != nil {
		// virt-handler shuts a deleted VMI's domain down and reports it
		// Succeeded; virt-controller then drops its finalizer. A VMI not
		// yet handed over (Pending, Scheduling) virt-controller fails itself.
		if vmi.Status.Phase != virtv1.Scheduled && vmi.Status.Phase != virtv1.Running {
			return nil
		}
		vmi = vmi.DeepCopy()
		setPhase(vmi, virtv1.Succeeded)
		return h.update(ctx, vmi)
	}
	if vmi = vmi.DeepCopy(); defaultHotplugLimits(vmi) {
		return h.update(ctx, vmi)
	}
	if vmi.Status.Phase == virtv1.Scheduled {
		return h.update(ctx, reportRunning(vmi))
	}
	return nil
}

// update writes the VMI whole: KubeVirt's VMI CRD has no status subresource.
func (h *VirtHandler) update(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	_, err := h.clients.Virt.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Update(ctx, vmi, metav1.UpdateOptions{})
	return ignoreGone(err)
}

// reportRunning is virt-handler's first report of a started VMI. Conditions
// carry an explicit lastProbeTime (null): virt-controller's condition patches
// test the whole list.
func reportRunning(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	now := metav1.Now()
	migratable := virtv1.VirtualMachineInstanceCondition{
		Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue, LastTransitionTime: now,
	}
	if vmi.Labels[LabelNotMigratable] == "true" {
		migratable.Status, migratable.Reason = corev1.ConditionFalse, virtv1.VirtualMachineInstanceReasonDisksNotMigratable
		migratable.Message = "cannot migrate VMI: PVC is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
	}
	setPhase(vmi, virtv1.Running)
	vmi.Status.Conditions = append(withoutConditions(vmi.Status.Conditions, virtv1.VirtualMachineInstanceReady, virtv1.VirtualMachineInstanceIsMigratable),
		virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		migratable)
	if cpu := vmi.Spec.Domain.CPU; cpu != nil {
		vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
	}
	if guest := guestMemory(vmi); guest != nil {
		vmi.Status.Memory = &virtv1.MemoryStatus{GuestAtBoot: guest, GuestCurrent: copyQuantity(guest), GuestRequested: copyQuantity(guest)}
	}
	vmi.Status.SelinuxContext = "none"
	if vmi.Status.NodeName == "" {
		vmi.Status.NodeName = NodeName
	}
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[virtv1.NodeNameLabel] = vmi.Status.NodeName
	return vmi
}

// setPhase moves the VMI to phase and records when, as virt-handler does
// (controller.SetVMIPhaseTransitionTimestamp). virt-controller reads the
// Running entry to tell a VMI that ran from one that failed to start: a
// final VMI without it counts as a start failure and delays the next start
// of an Always or RerunOnFailure VM by 10 s or more.
func setPhase(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == phase {
			return
		}
	}
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
}

// maxHotplugRatio is KubeVirt's default ratio of maxSockets to sockets and
// of maxGuest to guest memory (spec.configuration.liveUpdateConfiguration).
const maxHotplugRatio = 4

// defaultHotplugLimits sets the maxSockets and maxGuest virt-api's mutating
// webhook gives a new VMI under LiveUpdate (pkg/defaults setupHotplug): the
// ratio times what it boots with, at most 512 vCPUs; no maxGuest where memory
// hotplug cannot work (under 1Gi, or not 2Mi aligned). It reports whether it
// changed the VMI.
func defaultHotplugLimits(vmi *virtv1.VirtualMachineInstance) bool {
	changed := false
	if cpu := vmi.Spec.Domain.CPU; cpu != nil && cpu.MaxSockets == 0 && cpu.Sockets > 0 {
		const maxVCPUs = 512
		cpu.MaxSockets = cpu.Sockets * maxHotplugRatio
		if perSocket := max(cpu.Cores, 1) * max(cpu.Threads, 1); cpu.MaxSockets*perSocket > maxVCPUs {
			cpu.MaxSockets = max(maxVCPUs/perSocket, cpu.Sockets)
		}
		changed = true
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil && m.MaxGuest == nil && !vmi.IsFinal() && vmi.Status.Phase != virtv1.Running {
		const align, minGuest = 2 << 20, 1 << 30
		if g := m.Guest.Value(); g >= minGuest && g%align == 0 {
			m.MaxGuest = resource.NewQuantity(g*maxHotplugRatio, resource.BinarySI)
			changed = true
		}
	}
	return changed
}

func guestMemory(vmi *virtv1.VirtualMachineInstance) *resource.Quantity {
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		q := m.Guest.DeepCopy()
		return &q
	}
	if q, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
		return &q
	}
	return nil
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	c := q.DeepCopy()
	return &c
}

func withoutConditions(cs []virtv1.VirtualMachineInstanceCondition, drop ...virtv1.VirtualMachineInstanceConditionType) []virtv1.VirtualMachineInstanceCondition {
	var out []virtv1.VirtualMachineInstanceCondition
	for _, c := range cs {
		keep := true
		for _, d := range drop {
			keep = keep && c.Type != d
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("player: %w", err)
	}
	return nil
}
