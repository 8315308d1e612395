//go:build integration

package integration

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/rollout"
)

// TestBatchedRolloutCanaryThenTenPercent rolls an edit out to 1,000 VMs
// with kvlive run's default policy: a canary of 5, then batches of 10%.
// Every VM is moved once, with its planned result; each batch starts only
// after the one before it finished (its last outcome precedes the next
// batch's first); the batches are the policy's sizes; and the trace shows
// each gated batch as a span.
func TestBatchedRolloutCanaryThenTenPercent(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 4, perIT: map[string]int{itMedium: 1000}})
	proc := e.runKvlive("all stages", "--batch-size", "10%", "--canary", "5")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	p := e.follow(eventID)
	e.checkRollout(p, rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})

	rec := e.waitPlanned(eventID)
	want := rollout.Batches(events.Policy{BatchSize: "10%", Canary: "5"}, len(edited))
	if !slices.Equal(rec.Batches, want) {
		t.Fatalf("batches %v, want %v", rec.Batches, want)
	}
	first, last := make([]time.Time, len(want)), make([]time.Time, len(want))
	sizes := make([]int, len(want))
	for _, o := range p.Outcomes {
		b := o.Batch
		sizes[b]++
		if first[b].IsZero() || o.FinishedAt.Before(first[b]) {
			first[b] = o.FinishedAt
		}
		if o.FinishedAt.After(last[b]) {
			last[b] = o.FinishedAt
		}
	}
	if !slices.Equal(sizes, want) {
		t.Errorf("outcomes per batch %v, want %v", sizes, want)
	}
	for b := 1; b < len(want); b++ {
		if !last[b-1].Before(first[b]) {
			t.Errorf("batch %d began (%s) before batch %d ended (%s)", b+1, first[b].Format(time.RFC3339Nano), b, last[b-1].Format(time.RFC3339Nano))
		}
	}
	e.waitFor("a span per gated batch in the trace", time.Minute, func() (bool, string) {
		var names []string
		for _, body := range e.streamBodies(events.StreamSpans) {
			spans, _ := events.UnmarshalSpans(body)
			for _, s := range spans {
				if s.TraceID == rec.TraceID && strings.HasPrefix(s.Name, "rollout.batch ") {
					names = append(names, s.Name)
				}
			}
		}
		return len(names) == len(want)-1, strings.Join(names, ", ")
	})
	list := e.kvliveCommand(time.Minute, "rollouts", "--nats-url", e.natsURL)
	if row := regexp.MustCompile(fmt.Sprintf(`complete\s+%d/%d\s+%d/%d\s`, len(edited), len(edited), len(want), len(want))); !row.MatchString(list) {
		t.Errorf("kvlive rollouts lacks %s:\n%s", row, list)
	}
	if st := e.status(eventID); st.Phase != rollout.PhaseComplete || st.Staged != 0 || st.Batch != len(want)-1 {
		t.Errorf("status: %s, %d staged, batch %d; want complete, none staged, the last batch released", st.Phase, st.Staged, st.Batch+1)
	}
	metrics := e.metricsOf(proc)
	for _, line := range []string{
		fmt.Sprintf("kvlive_rollout_batches_released_total %d", len(want)-1),
		fmt.Sprintf(`kvlive_rollout_gates_total{phase="running",result="passed"} %d`, len(want)-1),
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// metricsOf scrapes the /metrics of a kvlive process.
func (e *env) metricsOf(p *kvliveProc) string {
	e.t.Helper()
	_, body, err := httpGet("http://" + e.metricsAddr(p) + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	return body
}

// metricsAddr is the address a kvlive process logged it serves /metrics on.
func (e *env) metricsAddr(p *kvliveProc) string {
	e.t.Helper()
	addr, ok := servingAddr(p)
	if !ok {
		e.t.Fatalf("kvlive logged no metrics address")
	}
	return addr
}

// servingAddr is the address a kvlive process logged it serves /metrics,
// /healthz and /readyz on, if it has logged it yet.
func servingAddr(p *kvliveProc) (string, bool) {
	m := servingLine.FindStringSubmatch(p.out.String())
	if m == nil {
		return "", false
	}
	return m[1], true
}

var servingLine = regexp.MustCompile(`serving /metrics, /healthz and /readyz" addr=(\S+)`)

// TestRealKubeVirtGateHoldsOnAPendingHotplug rolls an edit out to three
// running VMs one at a time on KubeVirt's real virt-controller, with the
// hotplugs held as on a slow node: the first batch's VM never shows the
// new sockets and memory, so its gate holds until its verdict deadline
// (before the progress deadline), where KubeVirt's verdict, pending,
// differs from the prediction and fails the gate: the rollout pauses with
// the reason (in rollout status), the other two VMs untouched. Once the
// hotplugs may finish, rollout promote releases the next batch and the
// rollout completes, gate by gate.
func TestRealKubeVirtGateHoldsOnAPendingHotplug(t *testing.T) {
	e := newKubeVirtEnv(t)
	e.createInstancetype("u1.medium", 2, "2Gi")
	names := []string{"live-0", "live-1", "live-2"}
	e.createVMs("u1.medium", kvVM{name: names[0], running: true}, kvVM{name: names[1], running: true}, kvVM{name: names[2], running: true})
	e.runKvlive("all stages", "--batch-size", "1", "--progress-deadline", "30s", "--observe-timeout", "20s")
	e.waitWatched(1)

	e.kv.Handler.Hold()
	id := e.editInstancetypeTo("u1.medium", 4, "4Gi")
	var st rollout.Account
	e.waitFor("the gate to pause the rollout at its deadline", kvTimeout, func() (bool, string) {
		st = e.status(id)
		return st.Phase == rollout.PhasePaused, string(st.Phase) + ": " + st.Control.Reason
	})
	for _, want := range []string{"batch 1 of 3: 1 VMs failed", "KubeVirt's verdict differs", "predicted live, KubeVirt: pending", "HotVCPUChange"} {
		if !strings.Contains(st.Control.Reason, want) {
			t.Errorf("paused for %q, want it to say %q", st.Control.Reason, want)
		}
	}
	if st.Staged != 2 || st.Outcomes[events.ResultLive] != 1 || st.Control.By != "kvlive gate" {
		t.Errorf("paused with %d staged, outcomes %v, by %q; want 2 staged, 1 live, by the gate", st.Staged, st.Outcomes, st.Control.By)
	}
	if out := e.kvliveCommand(time.Minute, "rollout", "status", id, "--nats-url", e.natsURL); !strings.Contains(out, "batches:      1 of 3 released") {
		t.Errorf("rollout status does not show the batches:\n%s", out)
	}

	e.kv.Handler.Release()
	// Two operators promote at once: each command reads the record itself,
	// one releases batch 2, the other is told it went meanwhile (the
	// second's read may come after the first's write: batch 2 was promoted
	// and has not passed its gate), and batch 3 waits for its gate.
	var wg sync.WaitGroup
	outs, errs := make([]string, 2), make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			var stderr *testenv.LogBuffer
			outs[i], stderr, errs[i] = e.kvliveOnce(time.Minute, "rollout", "promote", id, "--nats-url", e.natsURL)
			outs[i] += stderr.String()
		})
	}
	wg.Wait()
	released := 0
	for i := range 2 {
		switch {
		case errs[i] == nil && strings.Contains(outs[i], "batch 2 of 3 released (1 VMs)"):
			released++
		case errs[i] == nil || !strings.Contains(outs[i], "released meanwhile"):
			t.Errorf("promote %d: %v, said %q; want batch 2 released or told it was released meanwhile", i+1, errs[i], outs[i])
		}
	}
	if released != 1 {
		t.Errorf("two promotes at once released batch 2 %d times, want once: %q", released, outs)
	}
	if st := e.status(id); st.Batch != 1 {
		t.Errorf("after two promotes the last released batch is %d, want 2", st.Batch+1)
	}
	p := e.follow(id)
	e.checkResults(p, map[string]events.Result{names[0]: events.ResultLive, names[1]: events.ResultLive, names[2]: events.ResultLive})
	e.checkAgainstKubeVirt(p, names)
	if _, _, err := e.kvliveOnce(time.Minute, "rollout", "promote", id, "--nats-url", e.natsURL); err == nil {
		t.Error("promote of a rollout with every batch released succeeded")
	}
}

// TestPolicyAnnotation: a kvlive.io/rollout-policy annotation on the
// instance type sets its rollouts' policy (two batches, the second waiting
// for rollout promote); one that does not parse pauses the rollout before
// anything moves, says why in rollout status, kvlive events and a Warning
// Event on the instance type, and rollout resume goes on in one batch.
func TestPolicyAnnotation(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 20}})
	e.runKvlive("all stages")
	e.waitGenerations()
	edited := e.selectShapes(onInstancetype(itMedium))

	e.annotate(itMedium, "batchSize: 50%\npause: manual\n")
	it, id := e.editInstancetype(itMedium, 3, "6Gi")
	var st rollout.Account
	e.waitFor("the first batch to pass its gate and wait for promote", rolloutTimeout, func() (bool, string) {
		st = e.status(id)
		return st.Phase == rollout.PhasePaused, string(st.Phase) + ": " + st.Control.Reason
	})
	if !slices.Equal(st.Batches, []int{10, 10}) || st.Staged != 10 || !strings.Contains(st.Control.Reason, "batch 1 of 2 passed its gate; rollout promote") {
		t.Errorf("waiting for promote with batches %v, %d staged, reason %q", st.Batches, st.Staged, st.Control.Reason)
	}
	e.rolloutCommand("promote", id)
	e.checkRollout(e.follow(id), rolloutWant{eventID: id, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})

	e.annotate(itMedium, "batchSize: lots\n")
	it, id = e.editInstancetype(itMedium, 4, "8Gi")
	e.waitFor("the refused policy to pause the rollout", rolloutTimeout, func() (bool, string) {
		st = e.status(id)
		return st.Phase == rollout.PhasePaused && st.Recorded, string(st.Phase)
	})
	want := `annotation kvlive.io/rollout-policy on clusterinstancetype/` + itMedium + `: rollout policy: batchSize: "lots"`
	if !strings.Contains(st.Control.Reason, want) || st.Outcomes[events.ResultLive]+st.Outcomes[events.ResultRestart]+st.Outcomes[events.ResultNextBoot] != 0 {
		t.Errorf("paused for %q with outcomes %v; want %q and nothing moved", st.Control.Reason, st.Outcomes, want)
	}
	if out := e.kvliveCommand(time.Minute, "events", "-o", "json", "--nats-url", e.natsURL); !strings.Contains(out, `"policyError": "`+strings.ReplaceAll(want, `"`, `\"`)) {
		t.Errorf("kvlive events does not say the policy was refused:\n%s", out)
	}
	e.waitFor("a RolloutPolicyRefused Event on the instance type", time.Minute, func() (bool, string) {
		list, err := e.clients.Kube.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + itMedium})
		if err != nil {
			return false, err.Error()
		}
		var reasons []string
		for _, ev := range list.Items {
			if ev.Reason == "RolloutPolicyRefused" && strings.Contains(ev.Message, want) {
				return true, ""
			}
			reasons = append(reasons, ev.Reason)
		}
		return false, strings.Join(reasons, ", ")
	})
	e.rolloutCommand("resume", id)
	e.checkRollout(e.follow(id), rolloutWant{eventID: id, shapes: edited, action: vmShape.expected, revision: revisionOf(it)})
}

// annotate sets the rollout policy annotation of a cluster instance type;
// metadata alone moves no generation.
func (e *env) annotate(name, policy string) {
	e.t.Helper()
	its := e.clients.Virt.InstancetypeV1beta1().VirtualMachineClusterInstancetypes()
	it, err := its.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if it.Annotations == nil {
		it.Annotations = map[string]string{}
	}
	it.Annotations[events.PolicyAnnotation] = policy
	if _, err := its.Update(e.ctx, it, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestRolloutRetry: a switch whose writes an admission policy refuses for
// some VMs ends with those VMs failed; once the policy is gone, rollout
// retry rolls exactly them out again as a new event linked to the first
// (retry/…, Kvlive-Retry-Of), and they move.
func TestRolloutRetry(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itMedium: 12}})
	web := e.selectShapes(func(s vmShape) bool { return s.instancetype == itMedium && s.tier == "web" })
	if len(web) < 2 {
		t.Fatalf("the fleet has %d web VMs, want at least 2", len(web))
	}
	frozen := web[:2]
	for _, s := range frozen {
		vm, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Get(e.ctx, s.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vm.Labels["frozen"] = "true"
		if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(s.namespace).Update(e.ctx, vm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	removePolicy := e.freezeLabelledVMs()
	e.runKvlive("all stages")
	e.waitGenerations()

	out := e.kvliveCommand(rolloutTimeout, "switch", "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig, "-A", "--yes",
		"--from", "clusterinstancetype/"+itMedium, "--to", "clusterinstancetype/"+itLarge, "-l", "tier=web")
	m := regexp.MustCompile(`switch requested: (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kvlive switch printed %q", out)
	}
	p := e.follow(m[1])
	if n := p.Counts()[events.ResultFailed]; n != len(frozen) {
		t.Fatalf("%d VMs failed, want the %d frozen ones: %v", n, len(frozen), p.Counts())
	}
	removePolicy()
	out = e.kvliveCommand(time.Minute, "rollout", "retry", m[1], "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
	r := regexp.MustCompile(`retrying 2 failed VMs of \S+ as (retry/\S+)`).FindStringSubmatch(out)
	if r == nil {
		t.Fatalf("kvlive rollout retry printed %q", out)
	}
	e.checkRollout(e.follow(r[1]), rolloutWant{eventID: r[1], shapes: frozen, action: vmShape.expected, clean: true})
	large := e.instancetype(itLarge)
	e.waitSettled("the retried VMs on "+itLarge, frozen, func(v clusterView, s vmShape) string { return pinProblem(v, s, large) })
	if _, _, err := e.kvliveOnce(time.Minute, "rollout", "retry", r[1], "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig); err == nil {
		t.Error("retry of a rollout without failures succeeded")
	}

	// The original says its failures were retried, and offers them to no
	// second retry.
	status := e.kvliveCommand(time.Minute, "rollout", "status", m[1], "--nats-url", e.natsURL)
	if want := "retried:      2 failed VMs as " + r[1]; !strings.Contains(status, want) {
		t.Errorf("rollout status of the original:\n%s\nwant a line %q", status, want)
	}
	_, stderr, err := e.kvliveOnce(time.Minute, "rollout", "retry", m[1], "--nats-url", e.natsURL, "--kubeconfig", e.kubeconfig)
	if want := "2 failed VMs were retried already, as " + r[1]; err == nil || !strings.Contains(stderr.String(), want) {
		t.Errorf("a second retry of the original: %v, said %q; want refused saying %q", err, stderr, want)
	}
}

// freezeLabelledVMs makes the API server refuse every update of a VM
// labelled frozen (a ValidatingAdmissionPolicy), and returns what removes
// the policy again.
func (e *env) freezeLabelledVMs() func() {
	e.t.Helper()
	adm := e.clients.Kube.AdmissionregistrationV1()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"kubevirt.io"}, APIVersions: []string{"*"}, Resources: []string{"virtualmachines"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('frozen' in object.metadata.labels)",
				Message:    "this VM is frozen for the test",
			}},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(e.ctx, policy, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "freeze"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "freeze", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// probe updates a frozen VM, as the API server sees policies now.
	probe := func() error {
		list, err := e.clients.Virt.KubevirtV1().VirtualMachines("").List(e.ctx, metav1.ListOptions{LabelSelector: "frozen"})
		if err != nil || len(list.Items) == 0 {
			return fmt.Errorf("no frozen VM to probe with: %v", err)
		}
		vm := list.Items[0]
		vm.Annotations = map[string]string{"probe": time.Now().String()}
		_, err = e.clients.Virt.KubevirtV1().VirtualMachines(vm.Namespace).Update(e.ctx, &vm, metav1.UpdateOptions{})
		return err
	}
	// The policy takes effect once the API server has loaded it.
	e.waitFor("the admission policy to refuse updates of frozen VMs", time.Minute, func() (bool, string) {
		err := probe()
		return err != nil && strings.Contains(err.Error(), "frozen for the test"), fmt.Sprint(err)
	})
	return func() {
		e.t.Helper()
		if err := adm.ValidatingAdmissionPolicyBindings().Delete(e.ctx, "freeze", metav1.DeleteOptions{}); err != nil {
			e.t.Fatal(err)
		}
		if err := adm.ValidatingAdmissionPolicies().Delete(e.ctx, "freeze", metav1.DeleteOptions{}); err != nil {
			e.t.Fatal(err)
		}
		e.waitFor("frozen VMs to take updates again", time.Minute, func() (bool, string) {
			err := probe()
			return err == nil, fmt.Sprint(err)
		})
	}
}

// TestSupersedingEditMidRollout: an edit while the previous generation's
// batched rollout waits between batches takes its remaining VMs over: the
// older rollout is aborted saying which rollout superseded it (its staged
// VMs skipped with that reason), the newer one says what it supersedes,
// and every VM ends on the newest generation, each moved by one rollout
// or the other.
func TestSupersedingEditMidRollout(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 40}})
	e.runKvlive("all stages", "--batch-size", "50%", "--pause", "manual")
	e.waitGenerations()
	edited := e.selectShapes(onInstancetype(itMedium))

	_, older := e.editInstancetype(itMedium, 3, "6Gi")
	e.waitFor("the first batch to wait for promote", rolloutTimeout, func() (bool, string) {
		st := e.status(older)
		return st.Phase == rollout.PhasePaused && st.Staged > 0, string(st.Phase)
	})
	it, newer := e.editInstancetype(itMedium, 4, "8Gi")
	e.waitFor("the newer rollout's first batch to wait for promote", rolloutTimeout, func() (bool, string) {
		st := e.status(newer)
		return st.Phase == rollout.PhasePaused && st.Staged > 0, string(st.Phase)
	})
	e.rolloutCommand("promote", newer)
	p := e.follow(newer)
	if st := e.status(newer); !slices.Equal(st.Supersedes, []string{older}) {
		t.Errorf("the newer rollout supersedes %v, want [%s]", st.Supersedes, older)
	}
	old := e.follow(older)
	st := e.status(older)
	if st.Phase != rollout.PhaseAborted || !strings.Contains(st.Control.Reason, "superseded by "+newer) {
		t.Errorf("the older rollout is %s (%s), want aborted, superseded by %s", st.Phase, st.Control.Reason, newer)
	}
	skipped := 0
	for _, o := range old.Outcomes {
		if o.Result == events.ResultSkip {
			skipped++
			if !strings.Contains(o.Reason, "superseded by "+newer) {
				t.Errorf("%s skipped for %q, want the superseding rollout named", o.VM, o.Reason)
			}
		}
	}
	if skipped == 0 {
		t.Error("no VM of the older rollout was left to the newer one")
	}
	if len(p.Outcomes) != len(edited) {
		t.Errorf("the newer rollout has %d outcomes, want every VM's (%d)", len(p.Outcomes), len(edited))
	}
	e.waitSettled("every VM on the newest generation", edited, func(v clusterView, s vmShape) string { return pinProblem(v, s, it) })
}

// TestTwoReplicasShareABatchedRollout runs two kvlive processes, the
// watcher in one and a planner and an applier in each, on a batched
// rollout: both step its gates, yet every batch is released once, every VM
// has one outcome and was written once (the audit log), and the rollout
// completes with each batch after the one before.
func TestTwoReplicasShareABatchedRollout(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 3, perIT: map[string]int{itMedium: 300}})
	policy := []string{"--batch-size", "25%", "--canary", "3"}
	e.runKvlive("replica a", policy...)
	e.runKvlive("replica b", append([]string{"--stages", "planner,applier"}, policy...)...)
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	p := e.follow(eventID)
	e.checkRollout(p, rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	e.checkWrites(edited, nil)
	want := rollout.Batches(events.Policy{BatchSize: "25%", Canary: "3"}, len(edited))
	sizes := make([]int, len(want))
	for _, o := range p.Outcomes {
		sizes[o.Batch]++
	}
	if !slices.Equal(sizes, want) {
		t.Errorf("outcomes per batch %v, want %v", sizes, want)
	}
	released := 0
	for _, proc := range e.procs {
		released += strings.Count(proc.out.String(), `msg="batch released"`)
	}
	if released != len(want)-1 {
		t.Errorf("%d batch releases logged by the two replicas, want %d (one per batch after the first)", released, len(want)-1)
	}
}

// TestMaxInFlight: with --max-in-flight 2 the applier, for all its 16
// workers, never has more than two of the rollout's VMs in flight: no
// three of kvlive's VM writes overlap in the API server's audit log.
func TestMaxInFlight(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 2, perIT: map[string]int{itMedium: 60}})
	e.runKvlive("all stages", "--max-in-flight", "2")
	e.waitGenerations()

	it, eventID := e.editInstancetype(itMedium, 3, "6Gi")
	edited := e.selectShapes(onInstancetype(itMedium))
	e.checkRollout(e.follow(eventID), rolloutWant{eventID: eventID, shapes: edited, action: vmShape.expected, revision: revisionOf(it), clean: true})
	e.checkWrites(edited, nil)
	if n := e.maxConcurrentVMWrites(); n > 2 || n == 0 {
		t.Errorf("%d of kvlive's VM writes overlapped, want at most 2 (and some writes)", n)
	}
}

// maxConcurrentVMWrites is the most of kvlive's VM patches the API server
// was handling at once, from the audit log's received and completed times.
func (e *env) maxConcurrentVMWrites() int {
	e.t.Helper()
	var spans []span
	for _, ev := range e.kvlivePatches() {
		spans = append(spans, span{ev.Received, ev.Done})
	}
	return maxOverlap(spans)
}

// span is a stretch of time, from start to end.
type span struct{ start, end time.Time }

// maxOverlap is the most spans under way at one instant (one ending at the
// instant another starts does not overlap it).
func maxOverlap(spans []span) int {
	type edge struct {
		at    time.Time
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	most, now := 0, 0
	for _, x := range edges {
		now += x.delta
		most = max(most, now)
	}
	return most
}
