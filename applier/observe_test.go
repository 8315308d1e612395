package applier

import (
	"context"
	"slices"
	"testing"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"kvlive/events"
	"kvlive/instancetype"
)

// TestObserverReadsKubeVirtsHotplugConditions walks one VM through what
// KubeVirt's virt-controller and virt-handler report during a CPU and memory
// hotplug, and a refused second one, and checks the span events the
// observer records at each step.
func TestObserverReadsKubeVirtsHotplugConditions(t *testing.T) {
	mem := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	vm := &virtv1.VirtualMachine{}
	vmi := &virtv1.VirtualMachineInstance{
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
			CPU: &virtv1.CPU{Sockets: 2}, Memory: &virtv1.Memory{Guest: mem("2Gi")},
		}},
		Status: virtv1.VirtualMachineInstanceStatus{
			CurrentCPUTopology: &virtv1.CPUTopology{Sockets: 2},
			Memory:             &virtv1.MemoryStatus{GuestCurrent: mem("2Gi")},
		},
	}
	want := instancetype.ExpectLive([]events.Change{
		{Field: "cpu.sockets", From: "2", To: "4", Class: "live"},
		{Field: "memory.guest", From: "2Gi", To: "4Gi", Class: "live"},
	})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	_, span := tp.Tracer("test").Start(context.Background(), "applier.apply")
	var seen reactionSeen
	steps := []struct {
		name   string
		change func()
		done   events.Result
	}{
		{"nothing yet", func() {}, ""},
		{"virt-controller patches the VMI and raises the hotplug conditions", func() {
			vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.Memory.Guest = 4, mem("4Gi")
			vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: k8scorev1.ConditionTrue},
				{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: k8scorev1.ConditionTrue},
			}
		}, ""},
		{"a later move is refused while one is in progress", func() {
			vm.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineFailure, Status: k8scorev1.ConditionTrue,
				Reason: "HotPlugCPUError", Message: "another CPU hotplug is in progress"}}
		}, ""},
		{"the conditions are gone but the status lags", func() { vmi.Status.Conditions = nil }, ""},
		{"virt-handler reports the new topology and memory", func() {
			vmi.Status.CurrentCPUTopology.Sockets, vmi.Status.Memory.GuestCurrent = 4, mem("4Gi")
		}, events.ResultLive},
	}
	for _, s := range steps {
		s.change()
		if done := seen.look(span, events.ResultLive, want, vm, vmi); done != s.done {
			t.Fatalf("%s: observed %q, want %q", s.name, done, s.done)
		}
	}
	span.End()
	var names []string
	for _, ev := range rec.Ended()[0].Events() {
		names = append(names, ev.Name)
	}
	wantNames := []string{"hotplug requested", "hotplug refused for now (KubeVirt retries)", "live change seen on the VMI"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("span events %q, want %q", names, wantNames)
	}
}
