package rollout

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
)

// fleetOf makes one plan and VM per spec "ns/name:action[:zone]".
func fleetOf(specs ...[3]string) ([]events.Plan, []*virtv1.VirtualMachine) {
	var plans []events.Plan
	var vms []*virtv1.VirtualMachine
	for i, s := range specs {
		uid := fmt.Sprint("uid-", i)
		plans = append(plans, events.Plan{VM: events.VMRef{Namespace: "ns", Name: s[0], UID: uid}, Action: events.Result(s[1])})
		vms = append(vms, &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: s[0], UID: types.UID(uid),
			Labels: map[string]string{"zone": s[2]}}})
	}
	return plans, vms
}

// order lists "name:batch" in publish order.
func order(plans []events.Plan) []string {
	out := make([]string, len(plans))
	for i, p := range plans {
		out[i] = fmt.Sprintf("%s:%d", p.VM.Name, p.Batch)
	}
	return out
}

func TestAssignBatches(t *testing.T) {
	specs := [][3]string{
		{"e", "live", "b"}, {"a", "next-boot", "c"}, {"d", "none", "a"}, {"c", "restart", "a"}, {"b", "live", "b"}, {"f", "skip", "a"},
	}
	for _, tt := range []struct {
		name    string
		policy  events.Policy
		want    []string
		batches []int
	}{
		{"no policy: one batch, by name", events.Policy{}, []string{"a:0", "b:0", "c:0", "d:0", "e:0", "f:0"}, nil},
		{"canary 1 then 2: what moves nothing stays in the first batch", events.Policy{Canary: "1", BatchSize: "2"},
			[]string{"a:0", "b:1", "c:1", "d:0", "e:2", "f:0"}, []int{1, 2, 1}},
		{"stopped first", events.Policy{BatchSize: "2", Order: events.OrderStoppedFirst},
			[]string{"a:0", "b:0", "c:1", "d:0", "e:1", "f:0"}, []int{2, 2}},
		{"by label, then name", events.Policy{BatchSize: "1", Order: "label=zone"},
			[]string{"c:0", "d:0", "f:0", "b:1", "e:2", "a:3"}, []int{1, 1, 1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plans, vms := fleetOf(specs...)
			batches := AssignBatches(plans, vms, tt.policy)
			if got := order(plans); !slices.Equal(got, tt.want) || !slices.Equal(batches, tt.batches) {
				t.Errorf("got %v %v, want %v %v", got, batches, tt.want, tt.batches)
			}
		})
	}
}

func TestWithPolicySkipsRestarts(t *testing.T) {
	restart := events.Plan{Action: events.ResultRestart, Reason: "cpu.model changed"}
	if p := WithPolicy(restart, events.Policy{Restart: events.RestartSkip}); p.Action != events.ResultSkip ||
		p.Reason != "rollout policy restart: skip; the change needs a restart: cpu.model changed" {
		t.Errorf("restart: skip gave %+v", p)
	}
	if p := WithPolicy(restart, events.Policy{}); p.Action != events.ResultRestart {
		t.Errorf("no policy changed the plan: %+v", p)
	}
}
