//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/integration/framework"
	"kvlive/rollout"
)

// The tests in this file run KubeVirt v1.9.0's own virt-controller (see
// framework.StartKubeVirt) and judge every outcome kvlive records by
// what the controller then did to the VM and its VMI. They skip, saying why,
// where hack/tools.sh could not build the controller.

// kvNamespace holds the real-KubeVirt tests' VMs.
const kvNamespace = "fleet"

// kvTimeout bounds waiting for virt-controller (and the players) to act.
const kvTimeout = 3 * time.Minute

// kvVM is one VM of a real-KubeVirt fleet.
type kvVM struct {
	name    string
	running bool
	// notMigratable makes the virt-handler player report LiveMigratable=False.
	notMigratable bool
	// instancetype, when set, is the cluster instance type the VM refers to
	// instead of the one createVMs is given; preference a cluster preference.
	instancetype, preference string
}

// kvEnv is env on a real virt-controller instead of the stand-in.
type kvEnv struct {
	*env
	kv *framework.KubeVirt
}

func newKubeVirtEnv(t *testing.T) *kvEnv {
	t.Helper()
	kv := framework.StartKubeVirt(t)
	e := &env{t: t, ctx: t.Context(), kubeconfig: kv.Kubeconfig, auditLog: kv.AuditLog, clients: kv.Clients, uids: map[string]string{}}
	e.nats = framework.StartNATS(t)
	e.natsURL = e.nats.URL
	e.js = connect(t, e.natsURL)
	e.plansTap = tapPlans(t, e.js)
	if _, err := e.clients.Kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kvNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &kvEnv{env: e, kv: kv}
}

// createInstancetype creates a cluster instance type of vcpus and mem.
func (e *kvEnv) createInstancetype(name string, vcpus uint32, mem string) {
	e.t.Helper()
	it := &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: itSpec(vcpus, mem)}
	if _, err := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes().Create(e.ctx, it, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// createVMs creates VMs on the cluster instance type it, carrying what
// virt-api's defaulting would have set (amd64, machine type q35), and waits
// until virt-controller pinned each and every running one's VMI runs.
func (e *kvEnv) createVMs(it string, vms ...kvVM) {
	e.t.Helper()
	for _, v := range vms {
		created, err := e.clients.Virt.KubevirtV1().VirtualMachines(kvNamespace).Create(e.ctx, e.newVM(it, v), metav1.CreateOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		e.uids[kvNamespace+"/"+v.name] = string(created.UID)
	}
	e.waitFor("virt-controller to pin every VM and start every running one", kvTimeout, func() (bool, string) {
		v := e.view()
		var waiting []string
		for _, want := range vms {
			key := kvNamespace + "/" + want.name
			vm := v.vms[key]
			if vm == nil || vm.Status.InstancetypeRef == nil || vm.Status.InstancetypeRef.ControllerRevisionRef == nil {
				waiting = append(waiting, want.name+" unpinned")
				continue
			}
			if vmi := v.vmis[key]; want.running && (vmi == nil || vmi.Status.Phase != virtv1.Running || vmi.Status.Memory == nil) {
				waiting = append(waiting, want.name+" not running")
			}
		}
		return len(waiting) == 0, strings.Join(waiting, ", ")
	})
}

// newVM is a VM on the cluster instance type it (or v's own), carrying
// what virt-api's defaulting would have set (amd64, machine type q35).
func (e *kvEnv) newVM(it string, v kvVM) *virtv1.VirtualMachine {
	strategy := virtv1.RunStrategyHalted
	if v.running {
		strategy = virtv1.RunStrategyAlways
	}
	if v.instancetype != "" {
		it = v.instancetype
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: kvNamespace, Name: v.name},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy:  &strategy,
			Instancetype: &virtv1.InstancetypeMatcher{Name: it},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Architecture: "amd64",
					Domain:       virtv1.DomainSpec{Machine: &virtv1.Machine{Type: "q35"}},
				},
			},
		},
	}
	if v.preference != "" {
		vm.Spec.Preference = &virtv1.PreferenceMatcher{Name: v.preference}
	}
	if v.notMigratable {
		vm.Spec.Template.ObjectMeta.Labels[framework.LabelNotMigratable] = "true"
	}
	return vm
}

// editInstancetypeTo changes a cluster instance type to vcpus and mem and
// returns the event id the edit must cause.
func (e *kvEnv) editInstancetypeTo(name string, vcpus uint32, mem string) string {
	e.t.Helper()
	its := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	it, err := its.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	it.Spec = itSpec(vcpus, mem)
	if it, err = its.Update(e.ctx, it, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return events.EventID(events.KindClusterInstancetype, string(it.UID), it.Generation)
}

// waitWatched waits until the watcher recorded n instance types' generations.
func (e *kvEnv) waitWatched(n int) {
	e.t.Helper()
	e.waitFor("the watcher to record every instance type", time.Minute, func() (bool, string) {
		kv, err := e.js.KeyValue(e.ctx, events.BucketGenerations)
		if err != nil {
			return false, err.Error()
		}
		keys, _ := kv.Keys(e.ctx)
		return len(keys) == n, plural(len(keys), "key")
	})
}

// realProblem compares, field by field, what kvlive recorded for a VM with
// what KubeVirt did: every live change reached the guest (the VMI's
// status), every restart change did not, RestartRequired is on the VM
// exactly when kvlive said KubeVirt sets it, and a stopped VM has no VMI.
// It returns "" when they agree.
func realProblem(v clusterView, key string, out events.Outcome) string {
	vm, vmi := v.vms[key], v.vmis[key]
	if vm == nil {
		return "VM gone"
	}
	// A restart kvlive predicts for a hot-plug no migration carries comes
	// without RestartRequired (KubeVirt sets none for it).
	wantRR := out.Result == events.ResultRestart && strings.HasPrefix(out.Reason, "RestartRequired")
	if restartRequired(vm) != wantRR {
		return fmt.Sprintf("kvlive said %s, RestartRequired on the VM is %v (%s)", out.Result, restartRequired(vm), restartMessage(vm))
	}
	if out.Result == events.ResultNextBoot {
		if vmi != nil {
			return "kvlive said next-boot but a VMI runs"
		}
		return ""
	}
	if vmi == nil {
		return "no VMI"
	}
	for _, c := range out.Changes {
		onVMI, known := vmiValue(vmi, c.Field)
		if !known {
			continue
		}
		switch c.Class {
		case instancetype.ClassLive:
			if onVMI != c.To {
				return fmt.Sprintf("%s is live per kvlive (%s → %s), the VMI has %s", c.Field, c.From, c.To, onVMI)
			}
		case instancetype.ClassRestart:
			// Not c.From: a VM already waiting for a restart runs with less
			// than its pinned generation says.
			if onVMI == c.To {
				return fmt.Sprintf("%s waits for a restart per kvlive (%s → %s), the VMI has it", c.Field, c.From, c.To)
			}
		}
	}
	if out.Result != events.ResultLive {
		return ""
	}
	for _, t := range []virtv1.VirtualMachineInstanceConditionType{virtv1.VirtualMachineInstanceVCPUChange, virtv1.VirtualMachineInstanceMemoryChange} {
		if slices.ContainsFunc(vmi.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool { return c.Type == t }) {
			return string(t) + " still pending"
		}
	}
	return ""
}

// vmiValue renders what the guest runs of a plan field as plans render
// it: the VMI's status (a hot-plug is in the VMI's spec as soon as
// virt-controller takes it, in its status once a migration carried it).
func vmiValue(vmi *virtv1.VirtualMachineInstance, field string) (string, bool) {
	switch field {
	case "cpu.sockets":
		if vmi.Status.CurrentCPUTopology == nil {
			return "(unset)", true
		}
		return strconv.FormatUint(uint64(vmi.Status.CurrentCPUTopology.Sockets), 10), true
	case "memory.guest":
		if vmi.Status.Memory == nil || vmi.Status.Memory.GuestRequested == nil {
			return "(unset)", true
		}
		return vmi.Status.Memory.GuestRequested.String(), true
	}
	return "", false
}

func restartMessage(vm *virtv1.VirtualMachine) string {
	for _, c := range vm.Status.Conditions {
		if c.Type == virtv1.VirtualMachineRestartRequired {
			return c.Message
		}
	}
	return "no condition"
}

// checkAgainstKubeVirt waits until every VM of the rollout agrees with
// what virt-controller did, and fails with the disagreements.
func (e *kvEnv) checkAgainstKubeVirt(p rollout.Progress, names []string) {
	e.t.Helper()
	var last []string
	deadline := time.Now().Add(kvTimeout)
	for {
		v := e.view()
		last = last[:0]
		for _, n := range names {
			key := kvNamespace + "/" + n
			out, ok := p.Outcomes[e.uids[key]]
			if !ok {
				last = append(last, n+": no outcome")
				continue
			}
			if problem := realProblem(v, key, out); problem != "" {
				last = append(last, n+": "+problem)
			}
		}
		if len(last) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for key, out := range p.Outcomes {
				e.t.Logf("outcome %s: %s %s %+v", key, out.Result, out.Reason, out.Changes)
			}
			report(e.t, "kvlive's outcomes against virt-controller", last)
			return
		}
		time.Sleep(pollInterval)
	}
}

// TestRealKubeVirtEditAndSwitch edits an instance type under a fleet of
// running migratable, running non-migratable and stopped VMs (one created
// after kvlive started, so virt-controller pinned it under kvlive's eyes),
// then switches the fleet to another instance type, and holds every outcome
// against what KubeVirt's own virt-controller did.
func TestRealKubeVirtEditAndSwitch(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.medium", 2, "2Gi")
	e.createInstancetype("u1.large", 4, "8Gi")
	fleet := []kvVM{
		{name: "live-0", running: true}, {name: "live-1", running: true},
		{name: "local-0", running: true, notMigratable: true},
		{name: "stopped-0"}, {name: "stopped-1"},
	}
	e.createVMs("u1.medium", fleet...)
	e.runKvlive("all stages")
	e.waitWatched(2)
	late := kvVM{name: "late-0", running: true}
	e.createVMs("u1.medium", late)
	fleet = append(fleet, late)
	names := make([]string, len(fleet))
	for i, v := range fleet {
		names[i] = v.name
	}

	eventID := e.editInstancetypeTo("u1.medium", 4, "4Gi")
	progress := e.follow(eventID)
	want := map[string]events.Result{"live-0": events.ResultLive, "live-1": events.ResultLive, "late-0": events.ResultLive,
		"local-0": events.ResultRestart, "stopped-0": events.ResultNextBoot, "stopped-1": events.ResultNextBoot}
	e.checkResults(progress, want)
	e.checkAgainstKubeVirt(progress, names)
	// KubeVirt's verdict, one per moved VM, is what kvlive predicted,
	// and each VM's trace carries it.
	e.checkVerdicts(eventID, kvTimeout)
	for _, n := range names {
		e.waitVerdictSpan(eventID, n)
	}
	for _, n := range []string{"live-0", "live-1", "late-0"} {
		if got := e.kv.Handler.Finished(kvNamespace, n); !slices.Contains(got, "HotVCPUChange") || !slices.Contains(got, "HotMemoryChange") {
			t.Errorf("%s: virt-controller asked for hotplugs %v, want HotVCPUChange and HotMemoryChange", n, got)
		}
	}

	out := e.kvliveCommand(rolloutTimeout, "switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-n", kvNamespace,
		"--from", "clusterinstancetype/u1.medium", "--to", "clusterinstancetype/u1.large", "--wait")
	m := switchOutput.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive switch printed %q", out)
	}
	progress = e.follow(m[1])
	// local-0 already waits for a restart (its memory); the switch adds more.
	e.checkResults(progress, want)
	e.checkAgainstKubeVirt(progress, names)
}

// waitVerdictSpan waits until eventID's trace holds the verdict span of
// the VM, with what kvlive predicted and what KubeVirt did.
func (e *kvEnv) waitVerdictSpan(eventID, vm string) {
	e.t.Helper()
	name := "verdict " + kvNamespace + "/" + vm
	e.waitFor("the trace of "+eventID+" to show KubeVirt's verdict on "+vm, kvTimeout, func() (bool, string) {
		out, _, err := e.kvliveOnce(time.Minute, "trace", eventID, "-o", "json", "--nats-url", e.natsURL)
		if err != nil {
			return false, err.Error()
		}
		var spans []events.Span
		if err := json.Unmarshal([]byte(out), &spans); err != nil {
			return false, err.Error()
		}
		for _, s := range spans {
			if s.Name == name {
				_, predicted := s.Attributes["kvlive.predicted"]
				_, observed := s.Attributes["kvlive.observed"]
				return predicted && observed, fmt.Sprintf("span %s attributes %v", name, s.Attributes)
			}
		}
		return false, "no span " + name
	})
}

// checkResults fails when a VM's result is not the one wanted.
func (e *kvEnv) checkResults(p rollout.Progress, want map[string]events.Result) {
	e.t.Helper()
	var problems []string
	for name, result := range want {
		out, ok := p.Outcomes[e.uids[kvNamespace+"/"+name]]
		if !ok || out.Result != result {
			problems = append(problems, fmt.Sprintf("%s: %s (%s), want %s", name, out.Result, out.Reason, result))
		}
	}
	report(e.t, "results", problems)
}

// TestRealKubeVirtVerdictsOfAHeldAndARefusedHotplug rolls edits over
// running migratable, running non-migratable and stopped VMs while
// virt-handler holds every hotplug past the verdict deadline, and kills
// kvlive with SIGKILL while the verdicts are awaited. KubeVirt asks for the
// first hotplug of each VM and, while live-0's is pending, refuses its
// second ("another CPU hotplug is in progress"); it applies the second once
// the first is reported done. Every moved VM gets exactly one verdict per
// edit from the restarted kvlive, and each is what the VM and VMI showed:
// a held hotplug pending, the refused one refused with KubeVirt's reason,
// the non-migratable VM's memory a restart with KubeVirt's message, the
// stopped VM's next boot. Once virt-handler lets go, the refused hotplug,
// if it was not refused at its deadline, is carried by a migration of its
// own (live), and kvlive rollout verify looks again at the unsettled
// ones: the held VM and the refused one are live, beside their verdicts.
func TestRealKubeVirtVerdictsOfAHeldAndARefusedHotplug(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.medium", 2, "2Gi")
	e.createInstancetype("u1.small", 2, "2Gi")
	e.createVMs("u1.medium", kvVM{name: "live-0", running: true}, kvVM{name: "local-0", running: true, notMigratable: true}, kvVM{name: "stopped-0"})
	e.createVMs("u1.small", kvVM{name: "live-1", running: true})
	const deadline = "20s"
	first := e.runKvlive("all stages", "--observe-timeout", deadline)
	e.waitWatched(2)

	e.kv.Handler.Hold()
	held := e.follow(e.editInstancetypeTo("u1.medium", 4, "4Gi"))
	small := e.follow(e.editInstancetypeTo("u1.small", 4, "4Gi"))
	e.waitFor("virt-controller to hot-plug the first edit into the VMI's spec", kvTimeout, func() (bool, string) {
		vmi := e.view().vmis[kvNamespace+"/live-0"]
		if vmi == nil || vmi.Spec.Domain.CPU == nil {
			return false, "no VMI CPU"
		}
		return vmi.Spec.Domain.CPU.Sockets == 4, fmt.Sprintf("sockets %d", vmi.Spec.Domain.CPU.Sockets)
	})
	refused := e.follow(e.editInstancetypeTo("u1.medium", 6, "6Gi"))
	want := map[string]events.Result{"live-0": events.ResultLive, "local-0": events.ResultRestart, "stopped-0": events.ResultNextBoot}
	e.checkResults(held, want)
	e.checkResults(refused, want)
	e.checkResults(small, map[string]events.Result{"live-1": events.ResultLive})
	// The hotplugs await their verdicts (the deadline has not passed): a
	// crash now must lose none of them.
	first.kill()
	e.runKvlive("all stages, after a SIGKILL", "--observe-timeout", deadline)

	e.checkVerdictsAre(held.EventID, map[string]verdictWant{
		"live-0":    {events.ObservedPending, "HotVCPUChange", nil},
		"local-0":   {events.ObservedRestart, "only available for migratable VMs", nil},
		"stopped-0": {events.ObservedNextBoot, "", nil},
	})
	e.checkVerdictsAre(small.EventID, map[string]verdictWant{"live-1": {events.ObservedPending, "HotVCPUChange", nil}})
	// virt-controller keeps its HotPlugCPUError only between its failed
	// retries: at the deadline the refused hotplug shows refused or, the
	// condition cleared for the moment, its change waits on the VMI behind
	// the first one's held migration, which is not this move's: its
	// verdict waits for a migration of its own (the queue deadline), which
	// comes once virt-handler lets go, and is then live.
	// On the non-migratable VM a sync whose CPU hotplug is refused never
	// reaches the memory handler, so its RestartRequired comes and goes
	// with the retries too: restart, pending behind the first hotplug,
	// (caught between two retries, as live-0 may be) refused, or, with the
	// condition gone at the deadline, restart for its sockets, which no
	// migration of a VMI that cannot migrate carries.
	refusedWant := map[string]verdictWant{
		"local-0": {events.ObservedRestart, "only available for migratable VMs", &verdictWant{events.ObservedPending, "HotVCPUChange",
			&verdictWant{events.ObservedRefused, "HotPlugCPUError", &verdictWant{events.ObservedRestart, "no migration carries it", nil}}}},
		"stopped-0": {events.ObservedNextBoot, "", nil},
	}
	e.checkVerdictsAre(refused.EventID, refusedWant)

	e.kv.Handler.Release()
	// Under load virt-controller may not have put the change on the VMI by
	// the deadline at all: not observed, which says so.
	refusedWant["live-0"] = verdictWant{events.ObservedRefused, "HotPlugCPUError", &verdictWant{events.ObservedPending, "HotVCPUChange",
		&verdictWant{events.ObservedLive, "migration", &verdictWant{events.ObservedNotObserved, "did not put the new sockets and memory on the VMI", nil}}}}
	refusedNow := e.checkVerdictsAre(refused.EventID, refusedWant)["live-0"]
	e.checkAgainstKubeVirt(refused, []string{"live-0"})
	if q := e.view().vmis[kvNamespace+"/live-0"].Spec.Domain.Memory.Guest; q == nil || !q.Equal(resource.MustParse("6Gi")) {
		t.Errorf("VMI memory %v, want 6Gi", q)
	}
	e.checkAgainstKubeVirt(small, []string{"live-1"})
	again := map[string]string{small.EventID: kvNamespace + "/live-1: pending → live"}
	if refusedNow != events.ObservedLive { // settled live, it is not looked at again
		again[refused.EventID] = kvNamespace + "/live-0: " + string(refusedNow) + " → live"
	}
	for id, line := range again {
		out := e.kvliveCommand(time.Minute, "rollout", "verify", id, "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
		if !strings.Contains(out, line) {
			t.Errorf("kvlive rollout verify %s printed %q, want a line %q", id, out, line)
		}
	}
	e.checkVerdictsAre(small.EventID, map[string]verdictWant{"live-1": {events.ObservedPending, "HotVCPUChange", nil}}) // the verdict stays
	out := e.kvliveCommand(time.Minute, "outcomes", "--event", small.EventID, "--nats-url", e.natsURL)
	if !strings.Contains(out, "pending→live") {
		t.Errorf("kvlive outcomes --event %s printed %q, want OBSERVED pending→live", small.EventID, out)
	}
}

// verdictWant is the verdict a VM should get, and a word its reason or
// KubeVirt's condition must carry; orElse, when set, is the other verdict
// KubeVirt's state may as truly give.
type verdictWant struct {
	observed events.Observed
	says     string
	orElse   *verdictWant
}

func (w verdictWant) matches(v events.Verdict) bool {
	if v.Observed == w.observed && strings.Contains(v.Reason+" "+v.Condition+" "+v.Message, w.says) {
		return true
	}
	return w.orElse != nil && w.orElse.matches(v)
}

// checkVerdictsAre waits until every VM in want has its verdict on eventID,
// checks each VM has exactly one, the wanted one, and returns them.
func (e *kvEnv) checkVerdictsAre(eventID string, want map[string]verdictWant) map[string]events.Observed {
	e.t.Helper()
	var got map[string][]events.Verdict
	e.waitFor("a verdict on "+strconv.Itoa(len(want))+" VMs of "+eventID, kvTimeout, func() (bool, string) {
		got = map[string][]events.Verdict{}
		for _, body := range e.streamBodies(events.StreamOutcomes, events.VerdictsOf(eventID)) {
			var v events.Verdict
			if _, err := events.Decode(body, events.TypeVerdict, &v); err != nil {
				e.t.Fatalf("verdicts: %v", err)
			}
			got[v.VM.Name] = append(got[v.VM.Name], v)
		}
		// Every VM named, not as many VMs: a VM the test does not name
		// (live-0 in a refused hotplug's event) may have its verdict first.
		have := 0
		for name := range want {
			if len(got[name]) > 0 {
				have++
			}
		}
		return have == len(want), fmt.Sprintf("%d of %d VMs have a verdict", have, len(want))
	})
	var problems []string
	observed := map[string]events.Observed{}
	for name, w := range want {
		vs := got[name]
		switch {
		case len(vs) != 1:
			problems = append(problems, fmt.Sprintf("%s: %d verdicts, want one", name, len(vs)))
		case !w.matches(vs[0]):
			problems = append(problems, fmt.Sprintf("%s: %s (%s; %s: %s), want %s saying %q", name, vs[0].Observed, vs[0].Reason, vs[0].Condition, vs[0].Message, w.observed, w.says))
		default:
			observed[name] = vs[0].Observed
		}
	}
	report(e.t, "verdicts on "+eventID, problems)
	return observed
}

// TestRealKubeVirtRestartsPendingVMsTwoAtATime shrinks an instance type
// under five running VMs, which virt-controller flags RestartRequired,
// and has kvlive restart --pending restart them two at a time: one
// annotated kvlive.io/do-not-disrupt is left, a stopped one too. Each
// other VM's restart request (a Stop naming its VMI, then a Start) is
// carried out by virt-controller: a new VMI at the new sockets and memory, the
// condition cleared, KubeVirt's verdict restarted, and never more than two
// restarts under way at once (the audit log).
func TestRealKubeVirtRestartsPendingVMsTwoAtATime(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.medium", 4, "4Gi")
	fleet := []kvVM{{name: "r-0", running: true}, {name: "r-1", running: true}, {name: "r-2", running: true},
		{name: "r-3", running: true}, {name: "keep-0", running: true}, {name: "stopped-0"}}
	e.createVMs("u1.medium", fleet...)
	e.runKvlive("all stages")
	e.waitWatched(1)
	restarted := []string{"r-0", "r-1", "r-2", "r-3"}
	running := append(slices.Clone(restarted), "keep-0")

	eventID := e.editInstancetypeTo("u1.medium", 2, "2Gi") // fewer sockets and less memory: a restart, never a hotplug
	e.follow(eventID)
	e.waitFor("virt-controller to flag every running VM RestartRequired", kvTimeout, func() (bool, string) {
		v := e.view()
		var waiting []string
		for _, n := range running {
			if _, ok := instancetype.RestartRequired(v.vms[kvNamespace+"/"+n]); !ok {
				waiting = append(waiting, n)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, ", ") + " not flagged"
	})
	e.optOut(vmShape{namespace: kvNamespace, name: "keep-0"})
	before := e.view()

	out := e.kvliveCommand(rolloutTimeout, "restart", "--pending", "clusterinstancetype/u1.medium", "-n", kvNamespace, "--restart-budget", "2",
		"--yes", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
	m := restartRequested.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive restart printed %q", out)
	}
	progress := e.follow(m[1])
	want := map[string]events.Result{"keep-0": events.ResultSkip, "stopped-0": events.ResultSkip}
	for _, n := range restarted {
		want[n] = events.ResultRestart
	}
	e.checkResults(progress, want)
	e.checkVerdicts(m[1], kvTimeout)
	e.waitFor("a new VMI at 2 sockets and 2Gi, without RestartRequired, for every VM restarted", kvTimeout, func() (bool, string) {
		v := e.view()
		var waiting []string
		for _, n := range restarted {
			key := kvNamespace + "/" + n
			vmi := v.vmis[key]
			_, flagged := instancetype.RestartRequired(v.vms[key])
			memory := ""
			if vmi != nil {
				memory, _ = vmiValue(vmi, "memory.guest")
			}
			if vmi == nil || vmi.UID == before.vmis[key].UID || vmi.Status.Phase != virtv1.Running || vmi.Spec.Domain.CPU == nil ||
				vmi.Spec.Domain.CPU.Sockets != 2 || memory != "2Gi" || flagged {
				waiting = append(waiting, n)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, ", ") + " not restarted at 2 sockets and 2Gi"
	})
	after := e.view()
	if vmi := after.vmis[kvNamespace+"/keep-0"]; vmi == nil || vmi.UID != before.vmis[kvNamespace+"/keep-0"].UID {
		t.Errorf("keep-0, opted out, was restarted")
	}
	if most := e.restartsUnderWay(); most > 2 {
		t.Errorf("%d restarts were under way at once, over the budget of 2", most)
	}
}
