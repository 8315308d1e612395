//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/integration/framework"
	"kvlive/internal/kube"
	"kvlive/internal/standin"
)

// The conformance table: one KubeVirt behaviour per row, run against
// KubeVirt's real virt-controller and against internal/standin, the
// stand-in the demo and most integration tests use. Both must react the same
// way (VMI sockets, memory and nodeSelector, RestartRequired on the VM), so
// the stand-in cannot drift from KubeVirt unnoticed. kvlive moves the pins,
// as in production; the row's want is what KubeVirt v1.9.0 does.

// reaction is what a controller did to a VM and its VMI.
type reaction struct {
	sockets      uint32
	memory       string
	nodeSelector string
	restart      bool
}

// step is one edit of a row's instance type (or preference) and the
// reaction wanted once kvlive moved the pin.
type step struct {
	it   *v1beta1.VirtualMachineInstancetypeSpec
	pref *v1beta1.VirtualMachinePreferenceSpec
	want reaction
}

type conformanceRow struct {
	name          string
	it            v1beta1.VirtualMachineInstancetypeSpec
	pref          *v1beta1.VirtualMachinePreferenceSpec
	notMigratable bool
	steps         []step
}

func spec(vcpus uint32, mem string, mutate ...func(*v1beta1.VirtualMachineInstancetypeSpec)) *v1beta1.VirtualMachineInstancetypeSpec {
	s := itSpec(vcpus, mem)
	for _, m := range mutate {
		m(&s)
	}
	return &s
}

func overcommitted(s *v1beta1.VirtualMachineInstancetypeSpec) { s.Memory.OvercommitPercent = 25 }

func machinePref(machine string) *v1beta1.VirtualMachinePreferenceSpec {
	return &v1beta1.VirtualMachinePreferenceSpec{Machine: &v1beta1.MachinePreferences{PreferredMachineType: machine}}
}

var conformanceTable = []conformanceRow{
	{name: "cpu and memory hot-plug", it: *spec(2, "2Gi"),
		steps: []step{{it: spec(4, "4Gi"), want: reaction{sockets: 4, memory: "4Gi"}}}},
	{name: "memory needs a migratable VMI", it: *spec(2, "2Gi"), notMigratable: true,
		steps: []step{{it: spec(4, "4Gi"), want: reaction{sockets: 4, memory: "2Gi", restart: true}}}},
	{name: "a cpu model change needs a restart", it: *spec(2, "2Gi"),
		steps: []step{{it: spec(4, "2Gi", hostPassthrough),
			want: reaction{sockets: 2, memory: "2Gi", restart: true}}}},
	{name: "sockets beyond maxSockets", it: *spec(2, "2Gi"),
		steps: []step{{it: spec(9, "2Gi"), want: reaction{sockets: 2, memory: "2Gi", restart: true}}}},
	{name: "fewer sockets", it: *spec(4, "2Gi"),
		steps: []step{{it: spec(2, "2Gi"), want: reaction{sockets: 4, memory: "2Gi", restart: true}}}},
	{name: "memory below what it booted with", it: *spec(2, "4Gi"),
		steps: []step{{it: spec(2, "2Gi"), want: reaction{sockets: 2, memory: "4Gi", restart: true}}}},
	{name: "a nodeSelector goes live", it: *spec(2, "2Gi"),
		steps: []step{{it: spec(2, "2Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) { s.NodeSelector = map[string]string{"zone": "a"} }),
			want: reaction{sockets: 2, memory: "2Gi", nodeSelector: `{"zone":"a"}`}}}},
	{name: "a preferred machine type the VM overrides changes nothing", it: *spec(2, "2Gi"), pref: machinePref("pc-q35-rhel9.4.0"),
		steps: []step{{pref: machinePref("pc-q35-rhel9.6.0"), want: reaction{sockets: 2, memory: "2Gi"}}}},
	{name: "memory under overcommit moves the derived memory request", it: *spec(2, "2Gi", overcommitted),
		steps: []step{{it: spec(2, "4Gi", overcommitted), want: reaction{sockets: 2, memory: "2Gi", restart: true}}}},
	{name: "a GPU needs a restart", it: *spec(2, "2Gi"),
		steps: []step{{it: spec(2, "2Gi", func(s *v1beta1.VirtualMachineInstancetypeSpec) {
			s.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/A100"}}
		}), want: reaction{sockets: 2, memory: "2Gi", restart: true}}}},
	{name: "an earlier RestartRequired does not hold a later hotplug", it: *spec(2, "2Gi"), notMigratable: true,
		steps: []step{
			{it: spec(2, "4Gi"), want: reaction{sockets: 2, memory: "2Gi", restart: true}},
			{it: spec(4, "4Gi"), want: reaction{sockets: 4, memory: "2Gi", restart: true}},
		}},
	// virt-controller recomputes RestartRequired on every sync against the
	// spec the VMI started from, and each hotplug handler judges its own
	// change: a refused CPU change holds no memory hotplug, and undoing it
	// clears the condition.
	{name: "sockets beyond maxSockets hold no memory hotplug, and undone clear RestartRequired", it: *spec(2, "2Gi"),
		steps: []step{
			{it: spec(9, "2Gi"), want: reaction{sockets: 2, memory: "2Gi", restart: true}},
			{it: spec(9, "4Gi"), want: reaction{sockets: 2, memory: "4Gi", restart: true}},
			{it: spec(2, "4Gi"), want: reaction{sockets: 2, memory: "4Gi"}},
		}},
	{name: "a non-live change undone clears RestartRequired", it: *spec(2, "2Gi"),
		steps: []step{
			{it: spec(2, "2Gi", hostPassthrough), want: reaction{sockets: 2, memory: "2Gi", restart: true}},
			{it: spec(2, "2Gi"), want: reaction{sockets: 2, memory: "2Gi"}},
		}},
	{name: "a non-live change undone lets a hotplug through", it: *spec(2, "2Gi"),
		steps: []step{
			{it: spec(2, "2Gi", hostPassthrough), want: reaction{sockets: 2, memory: "2Gi", restart: true}},
			{it: spec(4, "2Gi"), want: reaction{sockets: 4, memory: "2Gi"}},
		}},
}

func hostPassthrough(s *v1beta1.VirtualMachineInstancetypeSpec) {
	model := "host-passthrough"
	s.CPU.Model = &model
}

// conformanceWorld is a cluster with one of the two controllers.
type conformanceWorld struct {
	*env
	name string
	// boot creates a row's VM, running, and waits until the controller
	// pinned it and its VMI runs.
	boot func(row int, r conformanceRow)
}

// conformanceDeadline is kvlive's --observe-timeout in the conformance
// runs: how long a VM's verdict is waited for.
const conformanceDeadline = 20 * time.Second

func rowName(i int) string { return fmt.Sprintf("row-%d", i) }

// TestConformanceStandin runs the conformance table against the stand-in.
func TestConformanceStandin(t *testing.T) {
	runConformance(t, standinWorld(t))
}

// TestConformanceRealKubeVirt runs the conformance table against KubeVirt's
// own virt-controller.
func TestConformanceRealKubeVirt(t *testing.T) {
	e := newKubeVirtEnv(t)
	runConformance(t, &conformanceWorld{env: e.env, name: "virt-controller", boot: func(i int, r conformanceRow) {
		e.createVMs("", kvVM{name: rowName(i), running: true, notMigratable: r.notMigratable, instancetype: rowName(i), preference: prefName(i, r)})
	}})
}

func prefName(i int, r conformanceRow) string {
	if r.pref == nil {
		return ""
	}
	return rowName(i)
}

func runConformance(t *testing.T, w *conformanceWorld) {
	its := w.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	prefs := w.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterPreferences()
	objects := 0
	for i, r := range conformanceTable {
		if _, err := its.Create(w.ctx, &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: rowName(i)}, Spec: r.it}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		objects++
		if r.pref != nil {
			if _, err := prefs.Create(w.ctx, &v1beta1.VirtualMachineClusterPreference{ObjectMeta: metav1.ObjectMeta{Name: rowName(i)}, Spec: *r.pref}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			objects++
		}
	}
	for i, r := range conformanceTable {
		w.boot(i, r)
	}
	// Verdicts are checked too: a prediction the controller contradicts
	// is a verdict that differs. Changes without a hotplug are judged at
	// the deadline.
	w.runKvlive("all stages", "--observe-timeout", conformanceDeadline.String())
	(&kvEnv{env: w.env}).waitWatched(objects)

	for round := 0; ; round++ {
		var eventIDs []string
		wants := map[int]reaction{}
		for i, r := range conformanceTable {
			if round >= len(r.steps) {
				continue
			}
			s := r.steps[round]
			wants[i] = s.want
			eventIDs = append(eventIDs, w.editRow(i, s))
		}
		if len(wants) == 0 {
			return
		}
		for _, id := range eventIDs {
			w.follow(id)
		}
		w.waitReactions(round, wants)
		for _, id := range eventIDs {
			w.checkVerdicts(id, conformanceDeadline+kvTimeout)
		}
	}
}

// editRow applies a step's edit and returns the event id it causes.
func (w *conformanceWorld) editRow(i int, s step) string {
	w.t.Helper()
	c := w.clients.Virt.InstancetypeV1beta1()
	if s.pref != nil {
		p, err := c.VirtualMachineClusterPreferences().Get(w.ctx, rowName(i), metav1.GetOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		p.Spec = *s.pref
		if p, err = c.VirtualMachineClusterPreferences().Update(w.ctx, p, metav1.UpdateOptions{}); err != nil {
			w.t.Fatal(err)
		}
		return events.EventID(events.KindClusterPreference, string(p.UID), p.Generation)
	}
	it, err := c.VirtualMachineClusterInstancetypes().Get(w.ctx, rowName(i), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	it.Spec = *s.it
	if it, err = c.VirtualMachineClusterInstancetypes().Update(w.ctx, it, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	return events.EventID(events.KindClusterInstancetype, string(it.UID), it.Generation)
}

// waitReactions waits until every row's VM shows the wanted reaction and
// fails with every row that does not.
func (w *conformanceWorld) waitReactions(round int, wants map[int]reaction) {
	w.t.Helper()
	deadline := time.Now().Add(kvTimeout)
	for {
		v := w.view()
		var problems []string
		for i, want := range wants {
			key := kvNamespace + "/" + rowName(i)
			got := reactionOf(v.vms[key], v.vmis[key])
			if got != want {
				problems = append(problems, fmt.Sprintf("%s (%s): got %+v, want %+v (%s)", rowName(i), conformanceTable[i].name, got, want, restartMessage(v.vms[key])))
			}
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			report(w.t, fmt.Sprintf("%s, step %d, against the conformance table", w.name, round+1), problems)
			w.t.FailNow()
		}
		time.Sleep(pollInterval)
	}
}

func reactionOf(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) reaction {
	var r reaction
	if vm != nil {
		r.restart = restartRequired(vm)
	}
	if vmi == nil {
		return r
	}
	if c := vmi.Spec.Domain.CPU; c != nil {
		r.sockets = c.Sockets
	}
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		r.memory = m.Guest.String()
	}
	sel := maps.Clone(vmi.Spec.NodeSelector)
	delete(sel, virtv1.NodeSchedulable) // virt-controller's own
	if len(sel) > 0 {
		b, _ := json.Marshal(sel) // sorted keys
		r.nodeSelector = string(b)
	}
	return r
}

// standinWorld is a real API server (kvlive's generated CRDs) with the
// stand-in playing virt-controller; the test starts each VMI as
// virt-controller and virt-api would (hotplug limits 4× boot).
func standinWorld(t *testing.T) *conformanceWorld {
	t.Helper()
	cfg, kubeconfig := framework.StartAPIServer(t)
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	clients, err := kube.NewClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: t.Context(), kubeconfig: kubeconfig, clients: clients, uids: map[string]string{}}
	e.nats = framework.StartNATS(t)
	e.natsURL = e.nats.URL
	e.js = connect(t, e.natsURL)
	e.plansTap = tapPlans(t, e.js)
	for _, ns := range []string{framework.KubeVirtNamespace, kvNamespace} {
		if _, err := clients.Kube.CoreV1().Namespaces().Create(e.ctx, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := createDeployedKubeVirt(e.ctx, clients); err != nil {
		t.Fatal(err)
	}
	e.startStandin(0)
	kv := &kvEnv{env: e}
	return &conformanceWorld{env: e, name: "stand-in", boot: func(i int, r conformanceRow) {
		vm := kvVM{name: rowName(i), running: true, notMigratable: r.notMigratable, instancetype: rowName(i), preference: prefName(i, r)}
		created, err := clients.Virt.KubevirtV1().VirtualMachines(kvNamespace).Create(e.ctx, kv.newVM("", vm), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.uids[kvNamespace+"/"+vm.name] = string(created.UID)
		guest := r.it.Memory.Guest.DeepCopy()
		migratable := k8scorev1.ConditionTrue
		if r.notMigratable {
			migratable = k8scorev1.ConditionFalse
		}
		vmi := &virtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: vm.name, Namespace: kvNamespace},
			Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64", Domain: virtv1.DomainSpec{
				Machine: &virtv1.Machine{Type: "q35"},
				CPU:     &virtv1.CPU{Sockets: r.it.CPU.Guest, Cores: 1, Threads: 1, MaxSockets: r.it.CPU.Guest * hotplugRatio},
				Memory:  &virtv1.Memory{Guest: &guest, MaxGuest: resource.NewQuantity(guest.Value()*hotplugRatio, resource.BinarySI)},
			}},
			Status: virtv1.VirtualMachineInstanceStatus{
				Phase: virtv1.Running,
				Conditions: []virtv1.VirtualMachineInstanceCondition{
					{Type: virtv1.VirtualMachineInstanceReady, Status: k8scorev1.ConditionTrue},
					{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: migratable},
				},
				CurrentCPUTopology: &virtv1.CPUTopology{Sockets: r.it.CPU.Guest, Cores: 1, Threads: 1},
				Memory:             &virtv1.MemoryStatus{GuestAtBoot: &guest, GuestCurrent: &guest, GuestRequested: &guest},
			},
		}
		if _, err := clients.Virt.KubevirtV1().VirtualMachineInstances(kvNamespace).Create(e.ctx, vmi, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the stand-in to pin "+vm.name+" and record its boot pins", kvTimeout, func() (bool, string) {
			v := e.view()
			key := kvNamespace + "/" + vm.name
			pinned := v.vms[key] != nil && v.vms[key].Status.InstancetypeRef != nil && v.vms[key].Status.InstancetypeRef.ControllerRevisionRef != nil
			booted := v.vmis[key] != nil && v.vmis[key].Annotations[standin.AnnotationBootPins] != ""
			return pinned && booted, fmt.Sprintf("pinned %v, boot pins %v", pinned, booted)
		})
	}}
}
