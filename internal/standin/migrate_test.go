package standin

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/testenv"
)

// TestMigrationsKeepKubeVirtsLimits: twelve VMIs on three nodes, each with
// a CPU hot-plug pending, are migrated at most five at a time in the
// cluster and two from a node, each change reaching the guest on its
// target; a VMI that cannot live-migrate keeps its change.
func TestMigrationsKeepKubeVirtsLimits(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.small", 1, "2Gi")
	objs := []runtime.Object{it}
	for i := range 13 {
		name := fmt.Sprintf("vm-%d", i)
		vmi := testenv.RunningVMI("ns", name)
		vmi.Status.NodeName = fmt.Sprintf("node-%d", i%3)
		vmi.Spec.Domain.CPU.Sockets = 3 // virt-controller's hot-plug, not yet in the guest
		vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 1, Threads: 1}
		vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		if i == 12 {
			vmi.Status.Conditions[0].Status = corev1.ConditionFalse // not live-migratable
		}
		objs = append(objs, testenv.VM("ns", name, it.Name), vmi)
	}
	clients := testenv.FakeClients(nil, objs...)
	fleet := testenv.StartWholeCache(t, clients)
	c := New(Config{Kube: clients.Kube, Virt: clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer(),
		Workers: 4, MigrationDuration: 200 * time.Millisecond})
	runUntilCleanup(t, c)
	ctx := t.Context()

	maxRunning, maxFromNode := 0, 0
	testenv.Eventually(t, 30*time.Second, "every migratable VMI migrated", func() bool {
		list, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		running, fromNode, finished := 0, map[string]int{}, 0
		for _, vmi := range list.Items {
			s := vmi.Status.MigrationState
			switch {
			case s == nil:
			case !s.Completed:
				running++
				fromNode[s.SourceNode]++
				maxFromNode = max(maxFromNode, fromNode[s.SourceNode])
			case vmi.Status.CurrentCPUTopology.Sockets == 3 && len(hotConditions(&vmi)) == 0 && vmi.Status.NodeName == s.TargetNode:
				finished++
			}
		}
		maxRunning = max(maxRunning, running)
		return finished == 12
	})
	if maxRunning > defaultParallelMigrations || maxFromNode > defaultOutboundPerNode {
		t.Errorf("seen %d migrations at once, %d from one node; KubeVirt runs at most %d and %d", maxRunning, maxFromNode, defaultParallelMigrations, defaultOutboundPerNode)
	}
	if s := c.Migrations(); s.Succeeded != 12 || s.MaxRunning != defaultParallelMigrations {
		t.Errorf("stats %+v, want 12 succeeded, 5 at most at once", s)
	}
	held, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Get(ctx, "vm-12", metav1.GetOptions{})
	if err != nil || held.Status.MigrationState != nil || len(hotConditions(held)) != 1 {
		t.Errorf("the VMI that cannot migrate: %+v, %v; want its hot-plug pending and no migration", held.Status, err)
	}
}

// TestAFailedMigrationLeavesItsHotplugForTheNext: the migration set to
// fail ends failed on its source, the VMI's hot-plug still pending, and
// the VMI's next migration, once the backoff passed, carries the change;
// the history keeps both.
func TestAFailedMigrationLeavesItsHotplugForTheNext(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.small", 1, "2Gi")
	vmi := testenv.RunningVMI("ns", "vm")
	vmi.Spec.Domain.CPU.Sockets = 3
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 1, Threads: 1}
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
	clients := testenv.FakeClients(nil, it, testenv.VM("ns", "vm", it.Name), vmi)
	fleet := testenv.StartWholeCache(t, clients)
	c := New(Config{Kube: clients.Kube, Virt: clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer(),
		Workers: 2, MigrationDuration: 100 * time.Millisecond, MigrationBackoff: 500 * time.Millisecond})
	c.FailMigration(1)
	runUntilCleanup(t, c)

	testenv.Eventually(t, 30*time.Second, "the second migration to carry the hot-plug", func() bool {
		return c.Migrations().Succeeded == 1
	})
	h := c.History()
	if len(h) != 2 || !h[0].Failed || h[1].Failed || h[0].UID == h[1].UID || h[0].VMI != "ns/vm" {
		t.Fatalf("history %+v; want a failed migration of ns/vm, then a succeeded one", h)
	}
	if gap := h[1].Started.Sub(h[0].Ended); gap < 500*time.Millisecond {
		t.Errorf("the next migration started %v after the failed one ended; KubeVirt waits out its backoff (here 500ms)", gap)
	}
	if s := c.Migrations(); s.Started != 2 || s.Failed != 1 {
		t.Errorf("stats %+v; want 2 started, 1 failed", s)
	}
	got, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Get(t.Context(), "vm", metav1.GetOptions{})
	if err != nil || got.Status.CurrentCPUTopology.Sockets != 3 || len(hotConditions(got)) != 0 || got.Status.MigrationState.Failed {
		t.Errorf("VMI after the second migration: %+v, %v; want 3 sockets, no hot-plug, not failed", got.Status, err)
	}
}

// TestMigrationObjectsCountUntilFinal: with migration objects, each
// migration has a VirtualMachineInstanceMigration whose UID the VMI shows,
// made final (Succeeded) FinalizeLag after the VMI shows the end; like
// virt-controller, the stand-in counts a migration until its object is
// final, so with a budget of one, no migration starts before the last
// one's object is final.
func TestMigrationObjectsCountUntilFinal(t *testing.T) {
	it := testenv.ClusterInstancetype("u1.small", 1, "2Gi")
	one := uint32(1)
	kv := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt"},
		Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{MigrationConfiguration: &virtv1.MigrationConfiguration{ParallelMigrationsPerCluster: &one}},
			WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodLiveMigrate}}},
		Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed}}
	objs := []runtime.Object{it, kv}
	for i := range 3 {
		name := fmt.Sprintf("vm-%d", i)
		vmi := testenv.RunningVMI("ns", name)
		vmi.Status.NodeName = fmt.Sprintf("node-%d", i)
		vmi.Spec.Domain.CPU.Sockets = 3
		vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 1, Threads: 1}
		vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		objs = append(objs, testenv.VM("ns", name, it.Name), vmi)
	}
	clients := testenv.FakeClients(nil, objs...)
	fleet := testenv.StartWholeCache(t, clients)
	const lag = 300 * time.Millisecond
	c := New(Config{Kube: clients.Kube, Virt: clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer(),
		Workers: 3, MigrationDuration: 100 * time.Millisecond, MigrationObjects: true, FinalizeLag: lag})
	runUntilCleanup(t, c)

	testenv.Eventually(t, 30*time.Second, "three migrations", func() bool { return c.Migrations().Succeeded == 3 })
	h := c.History()
	objects, err := clients.Virt.KubevirtV1().VirtualMachineInstanceMigrations("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phases := map[string]virtv1.VirtualMachineInstanceMigrationPhase{}
	for _, o := range objects.Items {
		phases[string(o.UID)] = o.Status.Phase
	}
	for i, m := range h {
		if phases[m.UID] != virtv1.MigrationSucceeded {
			t.Errorf("migration %s of %s: its object's phase %q, want Succeeded (objects %v)", m.UID, m.VMI, phases[m.UID], phases)
		}
		if m.Final.Sub(m.Ended) < lag {
			t.Errorf("migration %s of %s: final %v after the VMI showed its end, want at least %v", m.UID, m.VMI, m.Final.Sub(m.Ended), lag)
		}
		if i > 0 && m.Started.Before(h[i-1].Final) {
			t.Errorf("migration of %s started at %s, before the last one's object was final (%s): two counted at once with a budget of one",
				m.VMI, m.Started.Format("05.000"), h[i-1].Final.Format("05.000"))
		}
	}
	for _, name := range []string{"vm-0", "vm-1", "vm-2"} {
		vmi, err := clients.Virt.KubevirtV1().VirtualMachineInstances("ns").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || vmi.Status.MigrationState == nil || phases[string(vmi.Status.MigrationState.MigrationUID)] != virtv1.MigrationSucceeded {
			t.Errorf("%s: its migration %+v is not one of the objects %v (%v)", name, vmi.Status.MigrationState, phases, err)
		}
	}
}
