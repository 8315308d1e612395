package planner

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"kvlive/events"
	"kvlive/internal/testenv"
	"kvlive/internal/webhook"
)

// TestATenantsPolicyNamesOnlyAllowedWebhooks: a policy annotated on a
// namespaced instance type (a tenant's to set) may name webhooks only on
// hosts the operator allowed, or it is refused (and the default applies,
// paused); the same policy on a cluster instance type (the operator's) is
// taken as it is.
func TestATenantsPolicyNamesOnlyAllowedWebhooks(t *testing.T) {
	annotated := func(policy string) map[string]string { return map[string]string{events.PolicyAnnotation: policy} }
	const allowed, other = `{confirmWebhook: "https://gate.example/confirm"}`, `{checkWebhook: "http://10.0.0.1:9090/metrics"}`
	objs := []*v1beta1.VirtualMachineInstancetype{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "allowed", Annotations: annotated(allowed)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "other", Annotations: annotated(other)}},
	}
	cluster := testenv.ClusterInstancetype("operators", 2, "4Gi")
	cluster.Annotations = annotated(other)
	clients := testenv.FakeClients(nil, objs[0], objs[1], cluster)
	hooks, err := webhook.New(webhook.TLS{}, "gate.example")
	if err != nil {
		t.Fatal(err)
	}
	p := &Planner{cfg: Config{Fleet: testenv.StartCache(t, clients), Webhooks: hooks}}
	for _, tc := range []struct {
		ref     events.Ref
		refused string
	}{
		{events.Ref{Kind: events.KindInstancetype, Namespace: "team", Name: "allowed"}, ""},
		{events.Ref{Kind: events.KindInstancetype, Namespace: "team", Name: "other"}, `names host "10.0.0.1"`},
		{events.Ref{Kind: events.KindClusterInstancetype, Name: "operators"}, ""},
	} {
		policy, refused := p.policyOf(nil, tc.ref)
		if (tc.refused == "") != (refused == "") || !strings.Contains(refused, tc.refused) {
			t.Errorf("%s: policy %+v, refused %q; want refused %q", tc.ref, policy, refused, tc.refused)
		}
	}
}
