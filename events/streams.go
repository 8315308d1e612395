package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
)

// Delivery limits: after this many deliveries a message is given up on.
const (
	PlannerMaxDeliver = 5
	ApplierMaxDeliver = 8
)

// StreamOptions are the knobs an operator sets on kvlive's streams.
type StreamOptions struct {
	// Replicas is 1 on an embedded server, 3 on a NATS cluster.
	Replicas int
	// MaxAge is the replay horizon: older messages are dropped. Zero keeps them
	// until MaxBytes is reached.
	MaxAge time.Duration
	// MaxBytes bounds each stream's size; zero means unlimited.
	MaxBytes int64
	// DuplicateWindow is how long a Nats-Msg-Id is remembered for deduplication.
	DuplicateWindow time.Duration
}

// DefaultStreamOptions keeps a week of history on a single replica.
func DefaultStreamOptions() StreamOptions {
	return StreamOptions{Replicas: 1, MaxAge: 7 * 24 * time.Hour, DuplicateWindow: 30 * time.Minute}
}

// StreamConfigs returns the configurations of every kvlive stream.
func StreamConfigs(o StreamOptions) []jetstream.StreamConfig {
	mk := func(name, subject, desc string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    []string{subject + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    max(o.Replicas, 1),
			MaxAge:      o.MaxAge,
			MaxBytes:    orUnlimited(o.MaxBytes),
			Duplicates:  o.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
		}
	}
	// Held plans wait for an operator, however long that takes: the replay
	// horizon and the size limit do not apply to them.
	held := mk(StreamHeld, subjectHeld, "kvlive: plans of paused rollouts, until resumed or aborted")
	held.MaxAge, held.MaxBytes = 0, -1
	return []jetstream.StreamConfig{
		mk(StreamEvents, subjectEvents, "kvlive: instance type and preference changes, switch requests"),
		mk(StreamPlans, subjectPlans, "kvlive: one live-update plan per VM per event"),
		mk(StreamOutcomes, subjectOutcomes, "kvlive: one outcome per VM per event"),
		mk(StreamDLQ, subjectDLQ, "kvlive: messages a stage could not process, with the reason"),
		mk(StreamSpans, subjectSpans, "kvlive: finished trace spans, for kvlive trace"),
		held,
	}
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
		MaxDeliver:    PlannerMaxDeliver,
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
		MaxDeliver:    ApplierMaxDeliver,
		MaxAckPending: 4096,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// KVConfigs returns the KV buckets kvlive keeps its state in.
func KVConfigs(o StreamOptions) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketGenerations, Description: "kvlive watcher: last generation per object UID", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)},
		{Bucket: BucketRollouts, Description: "kvlive planner: rollout record per event", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1), TTL: o.MaxAge},
		// No TTL: a paused rollout stays paused until someone resumes it.
		{Bucket: BucketControl, Description: "kvlive: pause, resume and abort per event", Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)},
	}
}

// Setup creates or updates every stream, consumer and KV bucket kvlive uses.
// It is idempotent, so every process runs it at start.
func Setup(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	for _, cfg := range StreamConfigs(o) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("events: stream %s: %w", cfg.Name, err)
		}
	}
	for stream, cfg := range map[string]jetstream.ConsumerConfig{StreamEvents: PlannerConsumer(), StreamPlans: ApplierConsumer()} {
		if _, err := js.CreateOrUpdateConsumer(ctx, stream, cfg); err != nil {
			return fmt.Errorf("events: consumer %s on %s: %w", cfg.Durable, stream, err)
		}
	}
	for _, cfg := range KVConfigs(o) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("events: kv %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}
