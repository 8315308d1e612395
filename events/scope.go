package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ScopeKey is BucketBus's key of the bus's scope claim.
const ScopeKey = "scope"

// ScopeClaim says which scope the replicas sharing a bus serve: one
// namespace, or AllNamespaces. The first replica to start on a bus makes
// it; it stays until an operator clears it (`kvlive scope --clear`).
type ScopeClaim struct {
	Scope string    `json:"scope"`
	By    string    `json:"by,omitempty"`
	At    time.Time `json:"at"`
}

// String says the claim in words: "namespace shop (claimed by host-a at …)".
func (c ScopeClaim) String() string {
	return fmt.Sprintf("%s (claimed by %s at %s)", describeScope(c.Scope), cmp.Or(c.By, "an unnamed replica"), c.At.UTC().Format(time.RFC3339))
}

// ErrNoScopeClaim is a bus no replica has claimed yet.
var ErrNoScopeClaim = errors.New("no replica has claimed this bus's scope yet")

// ReadScope reads the bus's scope claim and its KV revision;
// ErrNoScopeClaim when there is none.
func ReadScope(ctx context.Context, js jetstream.JetStream) (ScopeClaim, uint64, error) {
	kv, err := js.KeyValue(ctx, BucketBus)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return ScopeClaim{}, 0, ErrNoScopeClaim
	}
	if err != nil {
		return ScopeClaim{}, 0, fmt.Errorf("kv %s: %w", BucketBus, err)
	}
	return readScope(ctx, kv)
}

func readScope(ctx context.Context, kv jetstream.KeyValue) (ScopeClaim, uint64, error) {
	entry, err := kv.Get(ctx, ScopeKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return ScopeClaim{}, 0, ErrNoScopeClaim
	case err != nil:
		return ScopeClaim{}, 0, fmt.Errorf("the bus's scope claim: %w", err)
	}
	var c ScopeClaim
	if err := json.Unmarshal(entry.Value(), &c); err != nil {
		return ScopeClaim{}, entry.Revision(), fmt.Errorf("the bus's scope claim %q is unreadable; kvlive scope --clear --force clears it", entry.Value())
	}
	if c.Scope == "" {
		return c, entry.Revision(), ErrNoScopeClaim // cleared (by c.By at c.At)
	}
	return c, entry.Revision(), nil
}

// ClaimScope claims scope ("" or AllNamespaces: every namespace) for the
// bus, once, atomically: a KV create, so of several replicas starting on a
// fresh bus at once one claims it and the others compare theirs with it. A
// replica of another scope than the claim's is refused (ErrScopeMismatch),
// saying how to see and clear a claim no replica holds any more. A bus
// without a claim whose work consumers all show one scope (made by a
// kvlive from before claims) is claimed for that scope.
func ClaimScope(ctx context.Context, js jetstream.JetStream, scope string) error {
	want := cmp.Or(scope, AllNamespaces)
	kv, err := js.KeyValue(ctx, BucketBus)
	if err != nil {
		return fmt.Errorf("kv %s: %w", BucketBus, err)
	}
	createConflicted := false
	for range 2 {
		claim, rev, err := readScope(ctx, kv)
		if createConflicted && rev == 0 && errors.Is(err, ErrNoScopeClaim) {
			// The create conflicted, so the claim exists: a replica of a
			// replicated bucket, behind its leader, answered the read.
			claim, rev, err = readMade(ctx, kv)
		}
		if err == nil {
			return checkScope(claim, want)
		}
		if !errors.Is(err, ErrNoScopeClaim) {
			return err
		}
		claim = ScopeClaim{Scope: want, By: claimant(), At: time.Now().UTC()}
		if rev == 0 {
			// Never claimed: a bus from before claims keeps the scope its
			// consumers show. One an operator cleared goes to this replica.
			claim.Scope = cmp.Or(consumersScope(ctx, js), want)
		}
		b, err := json.Marshal(claim)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, ScopeKey, b)
		} else {
			_, err = kv.Update(ctx, ScopeKey, b, rev)
		}
		if Conflict(err) {
			createConflicted = rev == 0
			continue // another replica claimed it first: compare with its claim
		}
		if err != nil {
			return fmt.Errorf("claim the bus's scope: %w", err)
		}
		return checkScope(claim, want)
	}
	return errors.New("the bus's scope claim was made and cleared again while this replica claimed it")
}

// scopeCatchUp bounds how long a claim another replica has just made may
// read as missing, and scopeReadAgain is how often it is read meanwhile.
const (
	scopeCatchUp   = 10 * time.Second
	scopeReadAgain = 100 * time.Millisecond
)

// readMade reads the scope claim a create just found made, again until a
// read sees it (every replica of the bucket has it within a moment) or
// scopeCatchUp passes.
func readMade(ctx context.Context, kv jetstream.KeyValue) (ScopeClaim, uint64, error) {
	deadline := time.Now().Add(scopeCatchUp)
	for {
		claim, rev, err := readScope(ctx, kv)
		if rev != 0 || !errors.Is(err, ErrNoScopeClaim) {
			return claim, rev, err
		}
		if time.Now().After(deadline) {
			return claim, rev, fmt.Errorf("the bus's scope claim, made by another replica, still reads as missing after %v", scopeCatchUp)
		}
		select {
		case <-ctx.Done():
			return claim, rev, ctx.Err()
		case <-time.After(scopeReadAgain):
		}
	}
}

// claimant names this process in a claim: host and pid.
func claimant() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s (pid %d)", cmp.Or(host, "?"), os.Getpid())
}

func checkScope(claim ScopeClaim, want string) error {
	if claim.Scope == want {
		return nil
	}
	return fmt.Errorf("%w: this bus serves replicas scoped to %s, this one is scoped to %s; give it the same -n, "+
		"or its own bus (another --nats-url, or an embedded server); kvlive scope shows the claim, and kvlive scope --clear "+
		"clears one no replica holds any more", ErrScopeMismatch, claim, describeScope(want))
}

// consumersScope is the one scope the work consumers of a bus from before
// scope claims show, or "" when they show none, or several (left by
// replicas of two scopes that started at once).
func consumersScope(ctx context.Context, js jetstream.JetStream) string {
	seen := ""
	for stream, durable := range map[string]string{StreamEvents: ConsumerPlanner, StreamPlans: ConsumerApplier} {
		c, err := js.Consumer(ctx, stream, durable)
		if err != nil {
			continue
		}
		scope := c.CachedInfo().Config.Metadata[ScopeMetadata]
		switch {
		case scope == "":
		case seen == "":
			seen = scope
		case seen != scope:
			return ""
		}
	}
	return seen
}

// ErrScopeHeld refuses to clear the scope claim of a bus whose work
// consumers replicas still pull from.
var ErrScopeHeld = errors.New("replicas still serve this bus")

// ClearScope clears the bus's scope claim, so the next replica to start
// claims the bus for its own scope. It refuses while a replica still
// pulls from the planner's or the applier's consumer (ErrScopeHeld),
// unless force: clearing a claim under running replicas would let a
// replica of another scope share their work. It returns the claim it
// cleared.
func ClearScope(ctx context.Context, js jetstream.JetStream, force bool) (ScopeClaim, error) {
	claim, rev, err := ReadScope(ctx, js)
	if err != nil && (rev == 0 || !force) {
		return claim, err
	}
	if !force {
		for stream, durable := range map[string]string{StreamEvents: ConsumerPlanner, StreamPlans: ConsumerApplier} {
			c, err := js.Consumer(ctx, stream, durable)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				return claim, err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return claim, err
			}
			if info.NumWaiting > 0 {
				return claim, fmt.Errorf("%w: %d pull requests wait on consumer %s; stop the replicas of %s first, or --force",
					ErrScopeHeld, info.NumWaiting, durable, describeScope(claim.Scope))
			}
		}
	}
	kv, err := js.KeyValue(ctx, BucketBus)
	if err != nil {
		return claim, err
	}
	// Cleared, not deleted: a bus with no claim at all is one from before
	// claims, which takes the scope its consumers show, and that would
	// hand the bus straight back to the scope just cleared.
	b, err := json.Marshal(ScopeClaim{By: claimant(), At: time.Now().UTC()})
	if err != nil {
		return claim, err
	}
	if _, err := kv.Update(ctx, ScopeKey, b, rev); err != nil {
		return claim, fmt.Errorf("clear the bus's scope claim: %w", err)
	}
	return claim, nil
}

// ErrOutOfScope is a request for a namespace the replicas sharing the bus
// do not serve: they would plan it as touching no VM.
var ErrOutOfScope = errors.New("the replicas on this bus do not serve that namespace")

// Serves checks that the replicas sharing the bus serve namespace ("":
// every namespace) before a request is sent to them: one scoped to another
// namespace is ErrOutOfScope (their planner would see none of its VMs and
// call the rollout complete with nothing planned). A bus no replica has
// claimed yet is no error: warning says nothing serves it yet.
func Serves(ctx context.Context, js jetstream.JetStream, namespace string) (warning string, err error) {
	claim, _, err := ReadScope(ctx, js)
	switch {
	case errors.Is(err, ErrNoScopeClaim):
		return "no kvlive run has claimed this bus yet: the request waits for one to start", nil
	case err != nil:
		return "", err
	case claim.Scope == AllNamespaces || claim.Scope == namespace:
		return "", nil
	}
	asked := "every namespace"
	if namespace != "" {
		asked = "namespace " + namespace
	}
	return "", fmt.Errorf("%w: this bus serves %s, and the request is for %s; send it to the bus of replicas that serve it (--nats-url), or ask for -n %s",
		ErrOutOfScope, claim, asked, claim.Scope)
}
