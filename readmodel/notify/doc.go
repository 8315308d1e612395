// Package notify tells people where they are when a rollout changes state:
// it started, a gate holds a batch (why, and the exact kvlive rollout
// promote and abort commands), it was paused, KubeVirt's verdicts differ
// from the prediction, VMs failed, it completed, was aborted, or an undo
// brought its VMs back.
//
// A Notifier does two things, each safe to run in several replicas at once.
// It watches the rollouts' records (rollout and control records, outcomes
// and verdicts: ordered consumers, new messages only) and publishes each
// state change once to the notifications stream, on a subject of its own
// that is written only where empty (events.NotifySubject), so a second
// replica or a restart cannot send it twice. And it sends the stream to
// each receiver through a durable consumer of its own, one notification at
// a time in order, retried with backoff through the consumer runtime: a
// receiver that is down loses nothing across a restart of kvlive (the
// notifications wait in JetStream), and one that stays down ends each
// notification in a dead letter, a log line and a metric, never blocking
// the pipeline. Posts go through the gate webhooks' client: the same TLS,
// address checks, timeout, and a redirect is a failure, not followed.
package notify
