package framework

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// The migration players do for a live migration what virt-handler (on the
// source and on the target node), the scheduler and the kubelet do in
// KubeVirt v1.9.0, in the order they do it, driven by the real
// virt-controller's workload updater (which creates the migration for a VMI
// whose hot-plug is pending) and migration controller (which creates the
// target pod and moves the migration's phases). The hot-plug reaches the
// guest only on the target, as pkg/virt-handler/migration-target.go
// finishes it. Each write waits for the migration's phase that calls for it.

// Nodes are the Nodes the players run VMIs on: a migration needs a target
// node other than its source, and KubeVirt runs at most two outbound
// migrations a node, so five at a time need three source nodes.
var Nodes = []string{NodeName, "node02", "node03", "node04"}

// Fault is what goes wrong in the migrations of one VMI, each counted down
// as it happens.
type Fault struct {
	// Migrations is how many of the VMI's next migrations fail: the source
	// reports the migration failed, the VMI stays where it ran.
	Migrations int
	// CPU is how many CPU hot-plugs on a migration's target fail (the
	// launcher's vCPU sync): the topology stays, so virt-controller asks
	// again and the workload updater migrates once more.
	CPU int
	// Memory makes the next memory hot-plug on a target fail: virt-handler
	// sets HotMemoryChange=False, which virt-controller turns into
	// RestartRequired.
	Memory bool
	// NotOnlined leaves the guest's current memory below what was asked
	// for after a memory hot-plug: the guest has not onlined it yet.
	NotOnlined bool
}

// Migration is one migration the players ended, as they saw it end.
type Migration struct {
	// Name is the migration object's UID; VMI its namespace/name.
	Name, VMI string
	Source    string
	Target    string
	Failed    bool
	Started   time.Time
	Ended     time.Time
}

// SetMigrationDuration sets how long a migration runs, from the source's
// start to the target's domain running: zero, the default, ends it at once.
func (h *VirtHandler) SetMigrationDuration(d time.Duration) { h.duration.Store(int64(d)) }

// Inject sets what goes wrong in the next migrations of the VMI
// namespace/name.
func (h *VirtHandler) Inject(namespace, name string, f Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.faultsOf == nil {
		h.faultsOf = map[string]*Fault{}
	}
	h.faultsOf[namespace+"/"+name] = &f
}

// Migrations lists the migrations the players ended, in the order they
// ended.
func (h *VirtHandler) Migrations() []Migration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Migration(nil), h.migrations...)
}

// faults returns what goes wrong next for key, without spending it: a
// write that fails (a conflict on a stale cache) is tried again with the
// same faults, which spend only once the write went through.
func (h *VirtHandler) faults(key string) Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f := h.faultsOf[key]; f != nil {
		return *f
	}
	return Fault{}
}

// spend records that the faults in used happened.
func (h *VirtHandler) spend(key string, used Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.faultsOf[key]
	if f == nil {
		return
	}
	if used.Migrations > 0 {
		f.Migrations--
	}
	if used.CPU > 0 {
		f.CPU--
	}
	f.Memory = f.Memory && !used.Memory
	f.NotOnlined = f.NotOnlined && !used.NotOnlined
}

// requeueAfter is an error a player's sync returns to look at the object
// again after a while, as a controller waiting on a timer would.
type requeueAfter time.Duration

func (r requeueAfter) Error() string { return fmt.Sprintf("look again in %v", time.Duration(r)) }

// syncMigration plays virt-handler on both ends of one migration, by the
// phase virt-controller's migration controller gave it.
func (h *VirtHandler) syncMigration(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration) error {
	obj, ok, err := h.vmis.GetStore().GetByKey(m.Namespace + "/" + m.Spec.VMIName)
	if err != nil || !ok {
		return err
	}
	vmi := obj.(*virtv1.VirtualMachineInstance).DeepCopy()
	state := vmi.Status.MigrationState
	ours := state != nil && state.MigrationUID == m.UID
	switch m.Status.Phase {
	case virtv1.MigrationPreparingTarget:
		// The target virt-handler, once virt-controller handed the VMI to
		// its node: its migration proxy listens.
		if !ours || state.TargetNode == "" || vmi.Labels[virtv1.MigrationTargetNodeNameLabel] != state.TargetNode || state.TargetNodeAddress != "" {
			return nil
		}
		state.TargetNodeAddress = "10.0.0." + nodeIndex(state.TargetNode)
		state.TargetDirectMigrationNodePorts = map[string]int{"49152": 0, "49153": 0}
		return h.update(ctx, vmi)
	case virtv1.MigrationTargetReady:
		// The source virt-handler starts the migration.
		if !ours || state.StartTimestamp != nil || vmi.Status.NodeName != state.SourceNode || len(state.TargetDirectMigrationNodePorts) == 0 {
			return nil
		}
		now := metav1.Now()
		state.StartTimestamp, state.Mode = &now, virtv1.MigrationPreCopy
		return h.update(ctx, vmi)
	case virtv1.MigrationRunning:
		if !ours || state.StartTimestamp == nil || state.Completed || state.Failed {
			return nil
		}
		if h.held.Load() {
			return nil
		}
		if left := time.Duration(h.duration.Load()) - time.Since(state.StartTimestamp.Time); left > 0 {
			return requeueAfter(left)
		}
		key := vmi.Namespace + "/" + vmi.Name
		if h.faults(key).Migrations > 0 {
			if err := h.failMigration(ctx, vmi); err != nil {
				return err
			}
			h.spend(key, Fault{Migrations: 1})
			return nil
		}
		if !state.TargetNodeDomainDetected || state.EndTimestamp == nil {
			return h.update(ctx, landOnTarget(vmi))
		}
		return h.finalize(ctx, key, vmi)
	case virtv1.MigrationSucceeded, virtv1.MigrationFailed:
		return h.cleanUp(ctx, m, vmi)
	}
	return nil
}

// landOnTarget is the target virt-handler's write once the migrated domain
// runs there: the domain detected and ready, the migration's end and the
// VMI's node moved in the same update (else the source, seeing a ready
// target domain without an end, marks the VMI failed), and the VMI no
// longer outdated (virt-controller reads its launcher from the new pod).
func landOnTarget(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	state, now := vmi.Status.MigrationState, metav1.Now()
	state.TargetNodeDomainDetected = true
	state.TargetNodeDomainReadyTimestamp, state.EndTimestamp = &now, &now
	vmi.Status.Conditions = withoutConditions(vmi.Status.Conditions, virtv1.VirtualMachineInstanceMigrationRequired)
	vmi.Status.NodeName = state.TargetNode
	vmi.Labels[virtv1.NodeNameLabel] = state.TargetNode
	delete(vmi.Labels, virtv1.OutdatedLauncherImageLabel)
	vmi.Status.LauncherContainerImageVersion = ""
	vmi.Status.EvacuationNodeName = ""
	vmi.Status.MigrationTransport = virtv1.MigrationTransportUnix
	if state.TargetMemoryOverhead != nil && vmi.Status.Memory != nil {
		vmi.Status.Memory.MemoryOverhead = state.TargetMemoryOverhead
	}
	return vmi
}

// finalize is the target virt-handler finishing the migration
// (finalizeMigration): the hot-plugs virt-controller asked for reach the
// guest, or fail as the fault says, and the migration is completed, in one
// update.
func (h *VirtHandler) finalize(ctx context.Context, key string, vmi *virtv1.VirtualMachineInstance) error {
	var done []string
	faults, used := h.faults(key), Fault{}
	if hasCondition(vmi, virtv1.VirtualMachineInstanceVCPUChange) {
		if faults.CPU > 0 {
			used.CPU = 1
		} else {
			cpu := vmi.Spec.Domain.CPU
			vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
			done = append(done, string(virtv1.VirtualMachineInstanceVCPUChange))
		}
		vmi.Status.Conditions = withoutConditions(vmi.Status.Conditions, virtv1.VirtualMachineInstanceVCPUChange)
	}
	delete(vmi.Labels, virtv1.VirtualMachinePodCPULimitsLabel)
	if hasCondition(vmi, virtv1.VirtualMachineInstanceMemoryChange) && vmi.Status.Memory != nil {
		if faults.Memory {
			used.Memory = true
			for i := range vmi.Status.Conditions {
				if c := &vmi.Status.Conditions[i]; c.Type == virtv1.VirtualMachineInstanceMemoryChange {
					c.Status, c.Reason = corev1.ConditionFalse, "Memory Hotplug Failed"
					c.Message, c.LastTransitionTime = "memory hotplug failed, the VM configuration is not supported", metav1.Now()
				}
			}
		} else {
			vmi.Status.Conditions = withoutConditions(vmi.Status.Conditions, virtv1.VirtualMachineInstanceMemoryChange)
			guest := guestMemory(vmi)
			vmi.Status.Memory.GuestRequested = guest
			if faults.NotOnlined {
				used.NotOnlined = true
			} else {
				// What the domain reports once the guest onlined it.
				vmi.Status.Memory.GuestCurrent = copyQuantity(guest)
			}
			done = append(done, string(virtv1.VirtualMachineInstanceMemoryChange))
		}
	}
	delete(vmi.Labels, virtv1.VirtualMachinePodMemoryRequestsLabel)
	delete(vmi.Labels, virtv1.MemoryHotplugOverheadRatioLabel)
	vmi.Status.Conditions = withoutConditions(vmi.Status.Conditions, virtv1.VirtualMachineInstanceVolumesChange)
	vmi.Status.MigratedVolumes = nil
	vmi.Status.MigrationState.Completed = true
	if err := h.update(ctx, vmi); err != nil {
		return err
	}
	h.spend(key, used)
	h.recordFinished(key, done)
	h.recordMigration(vmi)
	return nil
}

// failMigration is the source virt-handler reporting the migration failed,
// as the launcher reports a migration that did not converge.
func (h *VirtHandler) failMigration(ctx context.Context, vmi *virtv1.VirtualMachineInstance) error {
	state, now := vmi.Status.MigrationState, metav1.Now()
	state.Failed, state.Completed, state.EndTimestamp = true, true, &now
	state.FailureReason = "Live migration failed: injected by the test (the migration did not converge)"
	if err := h.update(ctx, vmi); err != nil {
		return err
	}
	h.recordMigration(vmi)
	return nil
}

// cleanUp ends a finished migration on both nodes: the target virt-handler
// drops its node label, and the kubelet reports the launcher that no longer
// runs the VM (the source after a success, the target after a failure)
// Succeeded, which a next migration of the VMI waits for. Nothing deletes
// it: virt-controller collects old migrations' pods itself.
func (h *VirtHandler) cleanUp(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) error {
	state := m.Status.MigrationState
	if state == nil {
		return nil // failed before any hand-off: no pod of it ran
	}
	if vmi.Labels[virtv1.MigrationTargetNodeNameLabel] == state.TargetNode && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == m.UID {
		delete(vmi.Labels, virtv1.MigrationTargetNodeNameLabel)
		if err := h.update(ctx, vmi); err != nil {
			return err
		}
	}
	gone := state.SourcePod
	if m.Status.Phase == virtv1.MigrationFailed {
		gone = state.TargetPod
	}
	if gone != "" {
		return h.podEnded(ctx, m.Namespace, gone)
	}
	return nil
}

// podEnded plays the kubelet reporting a launcher pod whose VM left it.
func (h *VirtHandler) podEnded(ctx context.Context, namespace, name string) error {
	pod, err := h.clients.Kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ignoreGone(err)
	}
	pod.Status.Phase = corev1.PodSucceeded
	now := metav1.Now()
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		cs.Ready, cs.State = false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}
	_, err = h.clients.Kube.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return ignoreGone(err)
}

func (h *VirtHandler) recordFinished(key string, done []string) {
	if len(done) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished == nil {
		h.finished = map[string][]string{}
	}
	h.finished[key] = append(h.finished[key], done...)
}

// recordMigration keeps a migration as the players ended it, once.
func (h *VirtHandler) recordMigration(vmi *virtv1.VirtualMachineInstance) {
	s := vmi.Status.MigrationState
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.recorded == nil {
		h.recorded = map[types.UID]bool{}
	}
	if h.recorded[s.MigrationUID] {
		return
	}
	h.recorded[s.MigrationUID] = true
	rec := Migration{Name: string(s.MigrationUID), VMI: vmi.Namespace + "/" + vmi.Name, Source: s.SourceNode, Target: s.TargetNode, Failed: s.Failed}
	if s.StartTimestamp != nil {
		rec.Started = s.StartTimestamp.Time
	}
	if s.EndTimestamp != nil {
		rec.Ended = s.EndTimestamp.Time
	}
	h.migrations = append(h.migrations, rec)
}

// nodeFor is the node the scheduler player binds a new VMI's launcher to:
// spread over Nodes by the VMI, so migrations leave from several nodes.
func nodeFor(pod *corev1.Pod) string {
	f := fnv.New32a()
	_, _ = f.Write([]byte(pod.Labels[virtv1.CreatedByLabel]))
	return Nodes[int(f.Sum32())%len(Nodes)]
}

// targetNodeFor is the node a migration target pod is bound to: another
// than its VMI's (the pod's required anti-affinity), the next in Nodes.
func targetNodeFor(source string) string {
	for i, n := range Nodes {
		if n == source {
			return Nodes[(i+1)%len(Nodes)]
		}
	}
	return Nodes[0]
}

func nodeIndex(node string) string {
	for i, n := range Nodes {
		if n == node {
			return fmt.Sprint(i + 1)
		}
	}
	return "99"
}

func hasCondition(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return true
		}
	}
	return false
}

// asRequeue tells a requeueAfter from a failure.
func asRequeue(err error) (time.Duration, bool) {
	var r requeueAfter
	if errors.As(err, &r) {
		return time.Duration(r), true
	}
	return 0, false
}
