package standin

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/internal/testenv"
)

// TestAReactionLagsTheMove: with a ReactionDelay, a running VM whose pin
// moved keeps what it showed before (an earlier change's RestartRequired)
// for the delay, and the stand-in is not idle meanwhile; then it reacts as
// virt-controller does: the condition gone, the hot-plug on the VMI, and
// status.desiredGeneration written with the conditions; its record of
// hot-plugs names the pins it answered.
func TestAReactionLagsTheMove(t *testing.T) {
	const delay = 1500 * time.Millisecond
	small, large := testenv.ClusterInstancetype("u1.small", 2, "4Gi"), testenv.ClusterInstancetype("u1.small", 4, "4Gi")
	large.Generation = 2
	vm := testenv.VM("ns", "vm", small.Name)
	vm.Generation = 3
	running := virtv1.RunStrategyAlways
	vm.Spec.RunStrategy = &running
	gen1 := testenv.Pin(t, vm, small)
	gen2 := testenv.Pin(t, vm.DeepCopy(), large)
	earlier := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	vm.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue,
		Message: "an earlier change", LastTransitionTime: earlier}}
	clients := testenv.FakeClients([]runtime.Object{gen1, gen2}, small, vm, testenv.RunningVMI("ns", "vm"))
	fleet := testenv.StartWholeCache(t, clients)
	c := New(Config{Kube: clients.Kube, Virt: clients.Virt, VMs: fleet.VMInformer(), VMIs: fleet.VMIInformer(), KubeVirts: fleet.KubeVirtInformer(),
		MigrationDuration: 100 * time.Millisecond, ReactionDelay: delay})
	runUntilCleanup(t, c)
	ctx := t.Context()
	testenv.Eventually(t, 10*time.Second, "the VMI's boot pins recorded", func() bool {
		vmi := fleet.VMI("ns", "vm")
		return vmi != nil && vmi.Annotations[AnnotationHandledPins] != ""
	})

	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"instancetypeRef": map[string]any{"controllerRevisionRef": map[string]any{"name": gen2.Name}}}})
	moved := time.Now()
	if _, err := clients.Virt.KubevirtV1().VirtualMachines("ns").Patch(ctx, "vm", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the stand-in to see the move", func() bool {
		_, idle := c.Settled()
		return !idle
	})
	for time.Since(moved) < delay/2 {
		got, err := clients.Virt.KubevirtV1().VirtualMachines("ns").Get(ctx, "vm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasRestartRequired(got) || got.Status.DesiredGeneration != 0 {
			t.Fatalf("%s after the move: conditions %+v, desiredGeneration %d; want the earlier RestartRequired, no look yet",
				time.Since(moved), got.Status.Conditions, got.Status.DesiredGeneration)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testenv.Eventually(t, 20*time.Second, "the reaction: RestartRequired gone, desiredGeneration written, 4 sockets on the VMI", func() bool {
		got, err := clients.Virt.KubevirtV1().VirtualMachines("ns").Get(ctx, "vm", metav1.GetOptions{})
		vmi := fleet.VMI("ns", "vm")
		return err == nil && !hasRestartRequired(got) && got.Status.DesiredGeneration == 3 && vmi != nil && vmi.Spec.Domain.CPU.Sockets == 4
	})
	testenv.Eventually(t, 20*time.Second, "the stand-in idle", func() bool {
		_, idle := c.Settled()
		return idle
	})
	if h := c.Hotplugs(); len(h) != 1 || h[0].VMI != "ns/vm" || h[0].Pins != gen2.Name+"," || h[0].At.Before(moved.Add(delay)) {
		t.Errorf("hot-plugs %+v; want one of ns/vm answering %s, after the delay", h, gen2.Name)
	}
}
