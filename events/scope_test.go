package events_test

import (
	"errors"
	"strings"
	"testing"

	"kvlive/events"
	"kvlive/internal/testenv"
)

// TestReplicasOfAnotherScopeAreRefused: the first replica on a bus records
// its scope on the work consumers; a replica with another -n (or none) is
// refused, saying why, and one with the same scope starts. Consumers made
// before kvlive recorded scopes take the first scope that meets them.
func TestReplicasOfAnotherScopeAreRefused(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.Scope = "shop" })
	ctx := t.Context()
	setup := func(scope string) error {
		o := events.DefaultStreamOptions()
		o.Scope = scope
		return events.Setup(ctx, js, o, nil)
	}
	if err := setup("shop"); err != nil {
		t.Errorf("a replica of the same scope: %v", err)
	}
	for scope, want := range map[string]string{
		"dev": "serves replicas scoped to namespace shop, this one is scoped to namespace dev",
		"":    "serves replicas scoped to namespace shop, this one is scoped to every namespace",
	} {
		if err := setup(scope); !errors.Is(err, events.ErrScopeMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("a replica scoped to %q: %v, want %q", scope, err, want)
		}
	}

	for stream, cfg := range map[string]string{events.StreamEvents: events.ConsumerPlanner, events.StreamPlans: events.ConsumerApplier} {
		c, err := js.Consumer(ctx, stream, cfg)
		if err != nil {
			t.Fatal(err)
		}
		legacy := c.CachedInfo().Config
		legacy.Metadata = nil
		if _, err := js.UpdateConsumer(ctx, stream, legacy); err != nil {
			t.Fatal(err)
		}
	}
	// A bus of that age had no verifier consumer either.
	if err := js.DeleteConsumer(ctx, events.StreamOutcomes, events.ConsumerVerifier); err != nil {
		t.Fatal(err)
	}
	if err := setup(""); err != nil {
		t.Errorf("consumers without a scope: %v, want them adopted", err)
	}
	if err := setup("shop"); !errors.Is(err, events.ErrScopeMismatch) {
		t.Errorf("after the adoption, a replica scoped to shop: %v, want refused", err)
	}
}
