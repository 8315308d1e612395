package planner

import (
	"errors"
	"strings"
	"testing"

	"kvlive/events"
	"kvlive/internal/webhook"
)

// TestATenantsPolicyNamesOnlyAllowedWebhooks: a policy annotated on a
// namespaced instance type (a tenant's to set) may name webhooks only on
// hosts the operator allowed; without a webhook client it may name none.
func TestATenantsPolicyNamesOnlyAllowedWebhooks(t *testing.T) {
	hooks, err := webhook.New(webhook.TLS{}, "gate.example")
	if err != nil {
		t.Fatal(err)
	}
	p := &Planner{cfg: Config{Webhooks: hooks}}
	if err := p.tenantWebhooks(events.Policy{ConfirmWebhook: "https://gate.example/confirm"}); err != nil {
		t.Errorf("an allowed host: %v", err)
	}
	err = p.tenantWebhooks(events.Policy{ConfirmWebhook: "https://gate.example/confirm", CheckWebhook: "http://10.0.0.1:9090/metrics"})
	if !errors.Is(err, webhook.ErrNotAllowed) || !strings.Contains(err.Error(), `names host "10.0.0.1"`) {
		t.Errorf("a host the operator did not allow: %v", err)
	}
	if err := (&Planner{}).tenantWebhooks(events.Policy{CheckWebhook: "https://gate.example/check"}); !errors.Is(err, webhook.ErrNotAllowed) {
		t.Errorf("no webhook client: %v, want refused", err)
	}
}
