package instancetype_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/kube"
	"kvlive/internal/testenv"
)

// TestPlanLeavesAReferenceAGitOpsToolApplied: a switch plans a skip,
// naming the manager, for a VM whose reference another manager owns by
// server-side apply, and moves it when forced; a writer by update (the
// VM's creator) owns nothing kvlive respects; kvlive's own apply neither.
func TestPlanLeavesAReferenceAGitOpsToolApplied(t *testing.T) {
	small, large := testenv.ClusterInstancetype("u1.small", 1, "2Gi"), testenv.ClusterInstancetype("u1.large", 4, "8Gi")
	owned := func(manager string, op metav1.ManagedFieldsOperationType) []metav1.ManagedFieldsEntry {
		return []metav1.ManagedFieldsEntry{{Manager: manager, Operation: op, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:instancetype":{"f:name":{}}}}`)}}}
	}
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		force   bool
		skip    bool
	}{
		{"applied by a GitOps tool", owned("argocd-controller", metav1.ManagedFieldsOperationApply), false, true},
		{"applied by a GitOps tool, forced", owned("argocd-controller", metav1.ManagedFieldsOperationApply), true, false},
		{"created by kubectl", owned("kubectl-create", metav1.ManagedFieldsOperationUpdate), false, false},
		{"switched by kvlive before", owned(instancetype.FieldManager, metav1.ManagedFieldsOperationApply), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := testenv.VM("ns", "vm", "u1.small")
			rev := testenv.Pin(t, vm, small)
			vm.ManagedFields = tc.entries
			c, err := kube.CacheOf(vm, rev, small, large)
			if err != nil {
				t.Fatal(err)
			}
			from, to := events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.small"}, events.Ref{Kind: events.KindClusterInstancetype, Name: "u1.large"}
			target := instancetype.SwitchTarget(c, c.Cluster(), from, to)
			target.Force = tc.force
			p := instancetype.PlanVM(c, "switch/x", target, c.VM("ns", "vm"))
			managed := p.Action == events.ResultSkip && strings.Contains(p.Reason, "managed by argocd-controller (spec.instancetype.name")
			if managed != tc.skip || (!tc.skip && !p.Action.Moves()) {
				t.Errorf("%s (%s); want skip managed by argocd-controller: %t", p.Action, p.Reason, tc.skip)
			}
		})
	}
}
