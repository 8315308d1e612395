package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
		"dev": "serves replicas scoped to namespace shop (claimed by",
		"":    "this one is scoped to every namespace; give it the same -n",
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
	// A bus of that age had no verifier consumer, and no scope claim.
	forgetClaim(t, js)
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

func setupScoped(ctx context.Context, js jetstream.JetStream, scope string) error {
	o := events.DefaultStreamOptions()
	o.Scope = scope
	return events.Setup(ctx, js, o, nil)
}

// TestTwoScopesStartedAtOnceOneWins: two replicas with different -n start
// together on a fresh bus, five times over: one starts, the other is
// refused, and from then on the winner's scope starts again and the
// loser's is refused, never both.
func TestTwoScopesStartedAtOnceOneWins(t *testing.T) {
	for i := range 5 {
		js := testenv.BareJetStream(t)
		ctx := t.Context()
		errs := make(chan error, 2)
		for _, scope := range []string{"x1", "y1"} {
			go func() { errs <- setupScoped(ctx, js, scope) }()
		}
		var failed int
		for range 2 {
			if err := <-errs; err != nil {
				failed++
				if !errors.Is(err, events.ErrScopeMismatch) {
					t.Errorf("try %d: %v, want the loser refused for its scope", i, err)
				}
			}
		}
		claim, _, err := events.ReadScope(ctx, js)
		if failed != 1 || err != nil {
			t.Fatalf("try %d: %d of 2 replicas refused, claim %v (%v); want one", i, failed, claim, err)
		}
		loser := map[string]string{"x1": "y1", "y1": "x1"}[claim.Scope]
		if err := setupScoped(ctx, js, claim.Scope); err != nil {
			t.Errorf("try %d: the winner's scope %s again: %v", i, claim.Scope, err)
		}
		if err := setupScoped(ctx, js, loser); !errors.Is(err, events.ErrScopeMismatch) {
			t.Errorf("try %d: the loser's scope %s again: %v, want refused", i, loser, err)
		}
	}
}

// TestABusTheOldRaceWedgedStartsAgain: a bus two replicas of different
// scopes wedged before kvlive claimed scopes (the planner's consumer
// stamped x1, the applier's y1, no claim) is claimed by the next replica
// to start, whose stamps replace theirs.
func TestABusTheOldRaceWedgedStartsAgain(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.Scope = "x1" })
	ctx := t.Context()
	forgetClaim(t, js)
	c, err := js.Consumer(ctx, events.StreamPlans, events.ConsumerApplier)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.CachedInfo().Config
	cfg.Metadata = map[string]string{events.ScopeMetadata: "y1"}
	if _, err := js.UpdateConsumer(ctx, events.StreamPlans, cfg); err != nil {
		t.Fatal(err)
	}
	if err := setupScoped(ctx, js, "y1"); err != nil {
		t.Fatalf("the first replica on the wedged bus: %v, want it to start", err)
	}
	if err := setupScoped(ctx, js, "x1"); !errors.Is(err, events.ErrScopeMismatch) {
		t.Errorf("a replica of the other scope after it: %v, want refused", err)
	}
	for stream, durable := range map[string]string{events.StreamEvents: events.ConsumerPlanner, events.StreamPlans: events.ConsumerApplier} {
		c, err := js.Consumer(ctx, stream, durable)
		if err != nil || c.CachedInfo().Config.Metadata[events.ScopeMetadata] != "y1" {
			t.Errorf("consumer %s: %v (%v), want stamped y1", durable, c, err)
		}
	}
}

// TestAClaimHeldByRunningReplicasIsNotCleared: while a replica pulls from
// the work consumers, clearing the claim is refused unless forced.
func TestAClaimHeldByRunningReplicasIsNotCleared(t *testing.T) {
	js := testenv.JetStream(t, func(o *events.StreamOptions) { o.Scope = "shop" })
	ctx := t.Context()
	c, err := js.Consumer(ctx, events.StreamPlans, events.ConsumerApplier)
	if err != nil {
		t.Fatal(err)
	}
	pulling, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer pulling.Stop()
	go func() { _, _ = pulling.Next() }() // pulls until stopped
	testenv.Eventually(t, 10*time.Second, "the pull to wait on the consumer", func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumWaiting > 0
	})
	if _, err := events.ClearScope(ctx, js, false); !errors.Is(err, events.ErrScopeHeld) {
		t.Errorf("clear under a running replica: %v, want refused", err)
	}
	if claim, err := events.ClearScope(ctx, js, true); err != nil || claim.Scope != "shop" {
		t.Errorf("clear --force: %v (%v), want the shop claim cleared", claim, err)
	}
	if _, _, err := events.ReadScope(ctx, js); !errors.Is(err, events.ErrNoScopeClaim) {
		t.Errorf("after the clear: %v, want no claim", err)
	}
	// The next replica claims the bus for its own scope, whatever the
	// consumers still show of the cleared one.
	if err := setupScoped(ctx, js, "dev"); err != nil {
		t.Errorf("a replica of another scope after the clear: %v, want it to start", err)
	}
	if err := setupScoped(ctx, js, "shop"); !errors.Is(err, events.ErrScopeMismatch) {
		t.Errorf("the cleared scope after that: %v, want refused", err)
	}
}

// forgetClaim removes the bus's scope claim altogether, as on a bus a
// kvlive from before claims made.
func forgetClaim(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	kv, err := js.KeyValue(t.Context(), events.BucketBus)
	if err == nil {
		err = kv.Purge(t.Context(), events.ScopeKey)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestServesNamesTheNamespacesOfTheBus: a request for a namespace the
// replicas on the bus do not serve is refused before it is sent; every
// namespace is served by replicas of every namespace; a bus nobody
// claimed yet is a warning.
func TestServesNamesTheNamespacesOfTheBus(t *testing.T) {
	ctx := t.Context()
	if warning, err := events.Serves(ctx, testenv.BareJetStream(t), "shop"); err != nil || !strings.Contains(warning, "no kvlive run has claimed") {
		t.Errorf("an unclaimed bus: %q, %v; want a warning", warning, err)
	}
	shop := testenv.JetStream(t, func(o *events.StreamOptions) { o.Scope = "shop" })
	for namespace, ok := range map[string]bool{"shop": true, "dev": false, "": false} {
		_, err := events.Serves(ctx, shop, namespace)
		if ok != (err == nil) || (!ok && !errors.Is(err, events.ErrOutOfScope)) {
			t.Errorf("replicas of shop asked for %q: %v", namespace, err)
		}
	}
	all := testenv.JetStream(t)
	for _, namespace := range []string{"shop", ""} {
		if _, err := events.Serves(ctx, all, namespace); err != nil {
			t.Errorf("replicas of every namespace asked for %q: %v", namespace, err)
		}
	}
}

// TestAClaimReadBehindItsCreateIsWaitedFor: on a replicated bucket a read
// may be answered by a replica behind the leader. A replica whose create
// of the claim conflicted (another made it) and whose next read still
// misses it reads again until it sees the claim, instead of failing its
// start ("made and cleared again"; CI saw it with three replicas on a
// NATS cluster).
func TestAClaimReadBehindItsCreateIsWaitedFor(t *testing.T) {
	js := testenv.JetStream(t) // its set-up claimed every namespace
	ctx := t.Context()
	behind := &readsBehind{JetStream: js, misses: 3}
	if err := events.ClaimScope(ctx, behind, ""); err != nil {
		t.Fatalf("a replica reading behind the claim: %v", err)
	}
	if err := events.ClaimScope(ctx, &readsBehind{JetStream: js, misses: 3}, "y1"); !errors.Is(err, events.ErrScopeMismatch) {
		t.Errorf("a replica of another scope reading behind the claim: %v, want refused for its scope", err)
	}
}

// readsBehind's bus bucket reads its first misses keys as missing, as a
// replica behind the leader answers.
type readsBehind struct {
	jetstream.JetStream
	misses int
}

func (r *readsBehind) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := r.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != events.BucketBus {
		return kv, err
	}
	return &kvBehind{KeyValue: kv, r: r}, nil
}

type kvBehind struct {
	jetstream.KeyValue
	r *readsBehind
}

func (kv *kvBehind) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if kv.r.misses > 0 {
		kv.r.misses--
		return nil, jetstream.ErrKeyNotFound
	}
	return kv.KeyValue.Get(ctx, key)
}
