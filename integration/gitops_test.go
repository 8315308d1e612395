//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/planner/offline"
)

// gitopsManager is the field manager the test's GitOps tool applies as.
const gitopsManager = "argocd-controller"

// TestSwitchLeavesWhatAGitOpsToolOwns has a GitOps tool own one VM's
// instance type reference by server-side apply. plan --from --to and the
// switch's preview name it as managed; the switch, a server-side apply as
// kvlive, moves the other VMs (kvlive then owns their reference) and skips
// that one, naming the manager, its reference and ownership untouched;
// switched again with --force-conflicts, it moves, and kvlive owns its
// reference instead of the tool. Each VM is written once (the audit log).
func TestSwitchLeavesWhatAGitOpsToolOwns(t *testing.T) {
	e := newEnv(t, fleetOptions{namespaces: 1, perIT: map[string]int{itSmall: 4}})
	e.runKvlive("first")
	small := e.selectShapes(onInstancetype(itSmall))
	owned := small[0]
	apply := fmt.Sprintf(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":%q,"namespace":%q},"spec":{"instancetype":{"name":%q,"kind":%q}}}`,
		owned.name, owned.namespace, itSmall, events.KindClusterInstancetype)
	if _, err := e.clients.Virt.KubevirtV1().VirtualMachines(owned.namespace).Patch(e.ctx, owned.name, types.ApplyPatchType, []byte(apply),
		metav1.PatchOptions{FieldManager: gitopsManager, Force: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	from, to := "clusterinstancetype/"+itSmall, "clusterinstancetype/"+itLarge
	var preview offline.Report
	out := e.kvliveCommand(time.Minute, "plan", "--from", from, "--to", to, "-A", "-o", "json", "--kubeconfig", e.kubeconfig)
	if err := json.Unmarshal([]byte(out), &preview); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	for _, vm := range preview.VMs {
		managed := vm.Action == events.ResultSkip && strings.Contains(vm.Reason, "managed by "+gitopsManager)
		if managed != (vm.Name == owned.name) {
			t.Errorf("plan: %s/%s %s (%s); want skip, managed by %s, for %s alone", vm.Namespace, vm.Name, vm.Action, vm.Reason, gitopsManager, owned.key())
		}
	}

	out = e.kvliveCommand(2*time.Minute, "switch", "--from", from, "--to", to, "-A", "--yes", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	m := switched.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("switch printed no id:\n%s", out)
	}
	p := e.follow(m[1])
	if o := p.Outcomes[e.uids[owned.key()]]; o.Result != events.ResultSkip || !strings.Contains(o.Reason, "managed by "+gitopsManager) {
		t.Errorf("%s: %s (%s), want skip, managed by %s", owned.key(), o.Result, o.Reason, gitopsManager)
	}
	v := e.view()
	for _, s := range small {
		vm := v.vms[s.key()]
		switch {
		case s == owned:
			if vm.Spec.Instancetype.Name != itSmall || !slices.Equal(fieldManagersOf(vm), []string{gitopsManager}) {
				t.Errorf("%s: references %s, name owned by %v; want %s, owned by %s alone", s.key(), vm.Spec.Instancetype.Name, fieldManagersOf(vm), itSmall, gitopsManager)
			}
		case vm.Spec.Instancetype.Name != itLarge || !slices.Equal(fieldManagersOf(vm), []string{instancetype.FieldManager}):
			t.Errorf("%s: references %s, name owned by %v; want %s, owned by kvlive's apply", s.key(), vm.Spec.Instancetype.Name, fieldManagersOf(vm), itLarge)
		}
	}

	out = e.kvliveCommand(2*time.Minute, "switch", "--from", from, "--to", to, "-A", "--yes", "--force-conflicts", "--kubeconfig", e.kubeconfig, "--nats-url", e.natsURL)
	if m = switched.FindStringSubmatch(out); m == nil {
		t.Fatalf("switch --force-conflicts printed no id:\n%s", out)
	}
	if o := e.follow(m[1]).Outcomes[e.uids[owned.key()]]; !o.Result.Moves() || !o.Wrote {
		t.Errorf("%s with --force-conflicts: %s (%s), want it switched", owned.key(), o.Result, o.Reason)
	}
	e.waitFor("the forced VM on "+itLarge+", its reference kvlive's", time.Minute, func() (bool, string) {
		vm := e.view().vms[owned.key()]
		return vm.Spec.Instancetype.Name == itLarge && slices.Equal(fieldManagersOf(vm), []string{instancetype.FieldManager}),
			fmt.Sprintf("references %s, owned by %v", vm.Spec.Instancetype.Name, fieldManagersOf(vm))
	})
	writes := e.kvliveWrites()
	for _, s := range small {
		if w := writes[s.key()]; w.applied() != 1 || len(w.untested) > 0 {
			t.Errorf("%s: kvlive's writes %+v, want one, decided on the VM's resourceVersion", s.key(), w)
		}
	}
}

// fieldManagersOf lists who owns the VM's spec.instancetype.name by
// server-side apply.
func fieldManagersOf(vm *virtv1.VirtualMachine) []string {
	var out []string
	for _, e := range vm.ManagedFields {
		if e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var set map[string]map[string]map[string]any
		if json.Unmarshal(e.FieldsV1.Raw, &set) == nil {
			if _, ok := set["f:spec"]["f:instancetype"]["f:name"]; ok {
				out = append(out, e.Manager)
			}
		}
	}
	slices.Sort(out)
	return out
}
