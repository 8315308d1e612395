package events

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// StreamPrefix begins every kvlive stream's name, and BucketPrefix every
// kvlive bucket's: a store holding other names is not kvlive's.
const (
	StreamPrefix = "KVLIVE_"
	BucketPrefix = "kvlive-"
)

// Stream names.
const (
	StreamEvents   = "KVLIVE_EVENTS"
	StreamPlans    = "KVLIVE_PLANS"
	StreamOutcomes = "KVLIVE_OUTCOMES"
	StreamDLQ      = "KVLIVE_DLQ"
	// StreamHeld keeps the plans of paused rollouts until they are resumed
	// or aborted.
	StreamHeld = "KVLIVE_HELD"
	// StreamStaged keeps the plans of a batched rollout's later batches
	// until the previous batch passed its gate (a work queue, by batch and
	// event).
	StreamStaged = "KVLIVE_STAGED"
)

// Durable consumer names.
const (
	ConsumerPlanner = "planner"
	ConsumerApplier = "applier"
)

// KV bucket names.
const (
	// BucketGenerations maps a watched object's UID to the last generation the
	// watcher emitted (or first saw) and its spec.
	BucketGenerations = "kvlive-generations"
	// BucketRollouts maps an event id to its rollout record.
	BucketRollouts = "kvlive-rollouts"
	// BucketControl maps an event id to what an operator last asked of its
	// rollout (pause, resume, abort).
	BucketControl = "kvlive-rollout-control"
	// BucketBus holds what the replicas sharing one bus agree on: the
	// scope they serve (ScopeKey) and the migration budget's slots
	// (MigrationSlotKey).
	BucketBus = "kvlive-bus"
)

// Delivery budgets: after this many deliveries a stage gives a message up
// and dead-letters it. The consumer runtime keeps the budget, not the
// server (whose consumers have MaxDeliver -1): a message whose dead letter
// cannot be stored must come back, not vanish after its last delivery.
const (
	PlannerMaxDeliver = 5
	ApplierMaxDeliver = 8
)

// StreamOptions are the knobs an operator sets on kvlive's streams.
type StreamOptions struct {
	// Replicas is 1 on an embedded server, 3 on a NATS cluster.
	Replicas int
	// MaxAge is the replay horizon: events, outcomes and dead letters
	// older than it go, except a rollout's that has not settled (the
	// planner's keeper removes them, see rollout.Keeper), and so do spans
	// (the spans stream's age limit). Zero keeps them until MaxBytes is
	// reached.
	MaxAge time.Duration
	// MaxBytes bounds each stream's size; zero means unlimited.
	MaxBytes int64
	// DuplicateWindow is how long a Nats-Msg-Id is remembered for deduplication.
	DuplicateWindow time.Duration
	// Scope is the namespace the replica watches, plans and applies in
	// ("" for every namespace). Replicas sharing one bus share its work
	// consumers, so they must share one scope (see Setup).
	Scope string
	// VerdictDeadline is how long after its move a VM's verdict is waited
	// for (kvlive run's --observe-timeout); the verifier's consumer keeps
	// an outcome unacked as long again, at most a minute, before another
	// replica gets it. Zero is DefaultVerdictDeadline.
	VerdictDeadline time.Duration
}

// DefaultVerdictDeadline is how long a moved VM's verdict is waited for
// when StreamOptions name no deadline.
const DefaultVerdictDeadline = 2 * time.Minute

// verdictAckWait is how long an outcome may stay unacked before the
// server hands it to another replica: the verdict deadline and as long
// again, at most a minute.
func verdictAckWait(deadline time.Duration) time.Duration {
	return deadline + min(deadline, time.Minute)
}

// DefaultStreamOptions keeps a week of history on a single replica.
func DefaultStreamOptions() StreamOptions {
	return StreamOptions{Replicas: 1, MaxAge: 7 * 24 * time.Hour, DuplicateWindow: 30 * time.Minute, VerdictDeadline: DefaultVerdictDeadline}
}

// Validate says what is wrong with options JetStream would refuse, in the
// words of kvlive run's flags, before a stream is made.
func (o StreamOptions) Validate() error {
	switch {
	case o.MaxAge < 0:
		return fmt.Errorf("--max-age %s: want 0 (no age limit) or a positive duration", o.MaxAge)
	case o.Replicas < 0:
		return fmt.Errorf("--replicas %d: want 1 or more", o.Replicas)
	}
	return nil
}

// StreamConfigs returns the configurations of every kvlive stream.
//
// Work streams never drop a message no consumer has settled: plans and held
// plans are work queues (a message goes when it is acked) without size or
// age limits. Events are both pending work and the history replay reads, so
// the operator's size limit applies to them but a full stream refuses new
// events (DiscardNew) rather than discarding old ones, and the watcher
// retries until there is room. The record streams (outcomes, spans, dead
// letters) are bounded by the operator's size limit, oldest first.
//
// Only spans have a stream age limit: events, outcomes and dead letters
// age out by rollout (rollout.Keeper), kept while their rollout has not
// settled. A stream with an age limit recognises a message sent twice for
// at most that long (JetStream refuses a longer window).
func StreamConfigs(o StreamOptions) []jetstream.StreamConfig {
	mk := func(name, subject, desc string) jetstream.StreamConfig { return recordStream(o, name, subject, desc) }
	aged := func(cfg jetstream.StreamConfig) jetstream.StreamConfig { return agedStream(o, cfg) }
	work := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		cfg.Retention, cfg.MaxAge, cfg.MaxBytes, cfg.Discard = jetstream.WorkQueuePolicy, 0, -1, jetstream.DiscardNew
		// The planner publishes a rollout's plans as one fast batch
		// (nats-server 2.14 and later; an older server drops the flag,
		// and the planner publishes them one by one).
		cfg.AllowBatchPublish = true
		return cfg
	}
	withVerdicts := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		cfg.Subjects = append(cfg.Subjects, subjectVerdicts+".>")
		return cfg
	}
	evs := mk(StreamEvents, subjectEvents, "kvlive: instance type and preference changes, switch requests")
	evs.Discard = jetstream.DiscardNew
	return []jetstream.StreamConfig{
		evs,
		work(mk(StreamPlans, subjectPlans, "kvlive: one live-update plan per VM per event, until the applier settles it")),
		withVerdicts(mk(StreamOutcomes, subjectOutcomes, "kvlive: one outcome per VM per event, and KubeVirt's verdict on each VM moved")),
		mk(StreamDLQ, subjectDLQ, "kvlive: messages a stage could not process, with the reason"),
		aged(mk(StreamSpans, subjectSpans, "kvlive: finished trace spans, for kvlive trace")),
		work(mk(StreamHeld, subjectHeld, "kvlive: plans of paused rollouts, until resumed or aborted")),
		work(mk(StreamStaged, subjectStaged, "kvlive: plans of later batches, until their batch is released")),
	}
}

// NotifyStreamConfig is the notifications stream's configuration: made by
// the first notifier (kvlive run --notify), not by every kvlive run, since
// each stream more is seconds more of a start on a NATS cluster. It has no
// age limit: a stored notification is what says it was told, so it must
// last as long as its rollout's records (a rollout paused past the replay
// horizon would be told again on resume); the keeper removes it with them.
func NotifyStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return recordStream(o, StreamNotify, subjectNotify, "kvlive: notifications of rollouts' state changes, for kvlive run --notify's receivers")
}

// recordStream is a record stream's configuration: limits, the operator's
// size limit, oldest dropped first.
func recordStream(o StreamOptions, name, subject, desc string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: desc,
		Subjects:    []string{subject + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		MaxBytes:    orUnlimited(o.MaxBytes),
		Duplicates:  o.DuplicateWindow,
		Discard:     jetstream.DiscardOld,
	}
}

// agedStream adds the replay horizon's age limit to cfg.
func agedStream(o StreamOptions, cfg jetstream.StreamConfig) jetstream.StreamConfig {
	cfg.MaxAge = o.MaxAge
	if o.MaxAge > 0 {
		cfg.Duplicates = min(cfg.Duplicates, o.MaxAge)
	}
	return cfg
}

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// PlannerConsumer is the planner's durable pull consumer on the events stream.
func PlannerConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerPlanner,
		Description:   "kvlive planner: fans events out to per-VM plans",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    -1,
		MaxAckPending: 64,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// ApplierConsumer is the applier's durable pull consumer on the plans stream.
func ApplierConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerApplier,
		Description:   "kvlive applier: moves each VM's pin and records the outcome",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 4096,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// KVConfigs returns the KV buckets kvlive keeps its state in.
func KVConfigs(o StreamOptions) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketGenerations, Description: "kvlive watcher: last generation per object UID", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)},
		// No bucket TTL on either: a rollout's records are kept until it
		// settles, then age out with the replay horizon (rollout.Keeper
		// purges them; LimitMarkerTTL lets the purge markers expire).
		{Bucket: BucketRollouts, Description: "kvlive planner: rollout record per event", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1),
			LimitMarkerTTL: time.Minute},
		{Bucket: BucketControl, Description: "kvlive: pause, resume and abort per event", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1),
			LimitMarkerTTL: time.Minute},
		{Bucket: BucketBus, Description: "kvlive: what the replicas sharing this bus agree on: their scope, the migration budget", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)},
	}
}

// Setup timing: a JetStream cluster that has just elected its meta leader,
// or lost a node, answers stream and consumer requests with timeouts or
// "unavailable" for a while, and nats-server (2.15.2) never answers the
// losers of concurrent creates of one replicated stream, which is what
// several kvlive replicas starting together send: the stream exists, but
// their requests time out. Setup gives each request setupAttemptTimeout and
// retries (the retry finds the stream and updates it) for up to
// SetupTimeout. It asks for every stream and bucket at once, then for every
// consumer at once, so such a cluster costs a start one unanswered attempt
// per stage, not one per stream (eleven, 58 s, for three replicas starting
// together on a fresh three-node cluster).
const (
	SetupTimeout        = 2 * time.Minute
	setupAttemptTimeout = 5 * time.Second
	setupRetryWait      = 250 * time.Millisecond
)

// Setup creates or updates every stream, consumer and KV bucket kvlive uses.
// It is idempotent, so every process runs it at start. A JetStream that is
// not ready yet is waited for (SetupTimeout), each retry logged to log
// (which may be nil).
func Setup(ctx context.Context, js jetstream.JetStream, o StreamOptions, log *slog.Logger) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	deadline := time.Now().Add(SetupTimeout)
	step := func(ctx context.Context, what string, do func(context.Context) error) error {
		for {
			actx, cancel := context.WithTimeout(ctx, setupAttemptTimeout)
			err := do(actx)
			cancel()
			if err == nil || !Transient(err) || ctx.Err() != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("JetStream did not answer for %s within %v: %w", what, SetupTimeout, err)
			}
			log.Warn("JetStream not ready; retrying", "for", what, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(setupRetryWait):
			}
		}
	}

	// The streams and the buckets need nothing of each other.
	stores, sctx := errgroup.WithContext(ctx)
	for _, cfg := range StreamConfigs(o) {
		stores.Go(func() error {
			return step(sctx, "stream "+cfg.Name, func(ctx context.Context) error { return setupStream(ctx, js, cfg) })
		})
	}
	for _, cfg := range KVConfigs(o) {
		stores.Go(func() error {
			err := step(sctx, "kv "+cfg.Bucket, func(ctx context.Context) error { return ensureBucket(ctx, js, cfg) })
			if err != nil {
				return fmt.Errorf("events: kv %s: %w", cfg.Bucket, err)
			}
			return nil
		})
	}
	if err := stores.Wait(); err != nil {
		return err
	}
	// The scope claim (in BucketBus) decides whether this replica may stamp
	// the consumers.
	if err := step(ctx, "the bus's scope", func(ctx context.Context) error { return ClaimScope(ctx, js, o.Scope) }); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	scoped := o.Scope
	if scoped == AllNamespaces {
		scoped = ""
	}
	verifier := VerifierConsumer(verdictAckWait(cmp.Or(o.VerdictDeadline, DefaultVerdictDeadline)), scoped)
	consumers, cctx := errgroup.WithContext(ctx)
	for stream, cfg := range map[string]jetstream.ConsumerConfig{StreamEvents: PlannerConsumer(), StreamPlans: ApplierConsumer(), StreamOutcomes: verifier} {
		consumers.Go(func() error {
			err := step(cctx, "consumer "+cfg.Durable, func(ctx context.Context) error {
				return setupConsumer(ctx, js, stream, cfg, o.Scope)
			})
			if err != nil {
				return fmt.Errorf("events: consumer %s on %s: %w", cfg.Durable, stream, err)
			}
			return nil
		})
	}
	return consumers.Wait()
}

// ScopeMetadata is the metadata key of the planner's and the applier's
// consumers that names the scope of the replicas sharing them: a
// namespace, or AllNamespaces.
const ScopeMetadata = "kvlive.io/scope"

// AllNamespaces is the ScopeMetadata of replicas that watch every namespace.
const AllNamespaces = "*"

// ErrScopeMismatch is a replica started on a bus whose work consumers
// belong to replicas of another scope. Two replicas with different -n on
// one bus would split the planner's and the applier's consumers between
// them, each planning and moving only its own namespace's VMs of the
// events it happens to get, while every rollout read complete.
var ErrScopeMismatch = errors.New("replicas sharing one bus must share one scope")

// setupConsumer creates (or updates) one of the work consumers, recording
// scope in its metadata. The bus's scope claim (ClaimScope), made before,
// decides which scope the replicas sharing the consumers serve; the
// consumers' metadata only shows it, so a stamp that differs (left by two
// replicas of different scopes that raced before kvlive claimed scopes) is
// overwritten.
func setupConsumer(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig, scope string) error {
	cfg.Metadata = map[string]string{ScopeMetadata: cmp.Or(scope, AllNamespaces)}
	for range 2 {
		_, err := js.Consumer(ctx, stream, cfg.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			_, err = js.CreateConsumer(ctx, stream, cfg)
			if errors.Is(err, jetstream.ErrConsumerExists) {
				continue // another replica made it meanwhile
			}
			return err
		}
		if err != nil {
			return err
		}
		_, err = js.UpdateConsumer(ctx, stream, cfg)
		return err
	}
	return fmt.Errorf("consumer %s on %s: created and gone again while being set up", cfg.Durable, stream)
}

// describeScope says a scope in words: "namespace shop", "every namespace".
func describeScope(scope string) string {
	if scope == AllNamespaces {
		return "every namespace"
	}
	return "namespace " + scope
}

// Transient reports whether a JetStream request failed in a way that goes
// away by itself: no answer in time, no responders (JetStream not up yet, a
// stream between leaders), or a 503 (no meta leader, cluster temporarily
// unavailable).
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503
	}
	return false
}

// EnsureStream makes the stream cfg names, or updates it when it differs
// from cfg. A create with the config the stream already has changes
// nothing, so replicas starting at once leave a current stream alone: an
// update is sent only when the stream differs (an upgrade). nats-server
// v2.15.3 reads a stream's config unguarded while it adds a consumer, so an
// update on every start raced the consumers other replicas were adding.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	_, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = js.UpdateStream(ctx, cfg)
	}
	return err
}

// ensureBucket is EnsureStream for a key-value bucket.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	_, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		_, err = js.UpdateKeyValue(ctx, cfg)
	}
	return err
}

// setupStream creates or updates one stream. JetStream cannot change a
// stream's retention in place: a work stream an older kvlive made with
// limits retention is re-created, but only when it holds nothing, so no
// pending work is lost; otherwise the error says what to do.
func setupStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	err := EnsureStream(ctx, js, cfg)
	if err == nil || cfg.Retention != jetstream.WorkQueuePolicy {
		if err != nil {
			return fmt.Errorf("events: stream %s: %w", cfg.Name, err)
		}
		return nil
	}
	s, serr := js.Stream(ctx, cfg.Name)
	if serr != nil {
		return fmt.Errorf("events: stream %s: %w", cfg.Name, err)
	}
	info, serr := s.Info(ctx)
	if serr != nil || info.Config.Retention == jetstream.WorkQueuePolicy {
		return fmt.Errorf("events: stream %s: %w", cfg.Name, err)
	}
	if pending := unsettled(ctx, s, info); pending > 0 {
		return fmt.Errorf("events: stream %s was made by an older kvlive with limits retention and still holds %d unsettled messages; "+
			"run that version until they are applied, then start this one: %w", cfg.Name, pending, err)
	}
	if derr := js.DeleteStream(ctx, cfg.Name); derr != nil {
		return fmt.Errorf("events: re-create empty stream %s as a work queue: %w", cfg.Name, derr)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return fmt.Errorf("events: stream %s: %w", cfg.Name, err)
	}
	return nil
}

// unsettled counts what a limits-retention stream still owes its consumer:
// for the plans stream what the applier has not acked, for any other every
// message.
func unsettled(ctx context.Context, s jetstream.Stream, info *jetstream.StreamInfo) uint64 {
	if info.Config.Name == StreamPlans {
		if c, err := s.Consumer(ctx, ConsumerApplier); err == nil {
			if ci, err := c.Info(ctx); err == nil {
				return ci.NumPending + uint64(ci.NumAckPending)
			}
		}
	}
	return info.State.Msgs
}

// ReleaseConsumer is the durable consumer that sends eventID's held plans
// back to the plans stream once its rollout is resumed or aborted. Every
// replica releasing the event binds the same one and shares the work; the
// server removes it when no one has used it for a while.
func ReleaseConsumer(eventID string) jetstream.ConsumerConfig {
	sum := sha256.Sum256([]byte(eventID))
	return jetstream.ConsumerConfig{
		Durable:           "release-" + hex.EncodeToString(sum[:12]),
		Description:       "kvlive applier: releases the held plans of " + eventID,
		FilterSubject:     HeldOf(eventID),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           30 * time.Second,
		MaxDeliver:        -1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 10 * time.Minute,
	}
}

// OpenBatchConsumer is the durable consumer that sends the staged plans of
// eventID's batch to the plans stream when the batch is released; every
// replica releasing it shares it.
func OpenBatchConsumer(eventID string, batch int) jetstream.ConsumerConfig {
	sum := sha256.Sum256([]byte(eventID))
	return jetstream.ConsumerConfig{
		Durable:           fmt.Sprintf("batch-%s-%d", hex.EncodeToString(sum[:12]), batch),
		Description:       fmt.Sprintf("kvlive applier: releases batch %d of %s", batch, eventID),
		FilterSubject:     StagedSubject(batch, eventID),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           30 * time.Second,
		MaxDeliver:        -1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 10 * time.Minute,
	}
}

// OpenedID is the Nats-Msg-Id of a staged plan sent to the plans stream
// when its batch is released: one per staged message, so two replicas
// releasing a batch at once publish each plan once.
func OpenedID(planID string, stagedSequence uint64) string {
	return fmt.Sprintf("%s/opened/%d", planID, stagedSequence)
}

// ReleaseMaxDeliver is the releaser's delivery budget per held plan.
const ReleaseMaxDeliver = 8
