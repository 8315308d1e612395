package events

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Observed is KubeVirt's verdict on a VM kvlive moved, read from the VM and
// its VMI after the move.
type Observed string

// The verdicts. Live, restart and next-boot are what KubeVirt did; pending,
// refused and not-observed are what stood at the deadline.
const (
	// ObservedLive: the VMI reports the new sockets and memory, no hotplug
	// condition is left, and no RestartRequired came with the move.
	ObservedLive Observed = "live"
	// ObservedRestart: KubeVirt set RestartRequired after the move.
	ObservedRestart Observed = "restart"
	// ObservedNextBoot: the VM is stopped and its pin moved.
	ObservedNextBoot Observed = "next-boot"
	// ObservedPending: a hotplug (or the migration carrying it) was still in
	// progress at the deadline.
	ObservedPending Observed = "pending"
	// ObservedRefused: KubeVirt refused the change (HotPlugCPUError,
	// HotPlugMemoryError) and still did at the deadline.
	ObservedRefused Observed = "refused"
	// ObservedNotObserved: no signal before the deadline; the reason says
	// what was waited for.
	ObservedNotObserved Observed = "not-observed"
	// ObservedRestarted: a restart's VM runs a new VMI, with the sockets
	// and memory of its pin, and RestartRequired is gone.
	ObservedRestarted Observed = "restarted"
	// ObservedQueued: the change waited on the VMI for the live migration
	// (or eviction) that brings it to the guest, and none had started by
	// the queue deadline.
	ObservedQueued Observed = "queued"
	// ObservedEvicted: a VM predicted to be evicted no longer runs the VMI
	// it ran at the move: it runs one started since, or none (the VMI
	// shows a replacement, not who made it).
	ObservedEvicted Observed = "evicted"
)

// Verdicts lists every verdict in the order summaries print them.
var Verdicts = []Observed{ObservedLive, ObservedRestart, ObservedRestarted, ObservedEvicted, ObservedNextBoot, ObservedQueued, ObservedPending, ObservedRefused, ObservedNotObserved}

func (o Observed) valid() bool {
	for _, v := range Verdicts {
		if o == v {
			return true
		}
	}
	return false
}

// Matches reports whether the verdict is what kvlive predicted: for a
// restart's outcome (restarted, the verdict restart moves look for) a VM
// that runs a new VMI.
func (o Observed) Matches(predicted Result) bool {
	return string(o) == string(predicted) || (o == ObservedRestarted && predicted == ResultRestart) || (o == ObservedEvicted && predicted == ResultEvict)
}

// Verdict is KubeVirt's verdict on one VM kvlive moved for one event,
// stored once per VM and event (VerdictSubject, published only where the
// subject is empty).
type Verdict struct {
	EventID string `json:"eventId"`
	VM      VMRef  `json:"vm"`
	// Predicted is the outcome's result: what kvlive expected.
	Predicted Result   `json:"predicted"`
	Observed  Observed `json:"observed"`
	// Reason says what kvlive saw (or waited for, at the deadline);
	// Condition and Message are KubeVirt's own (a condition's reason and
	// message), when one decided the verdict.
	Reason    string `json:"reason,omitempty"`
	Condition string `json:"condition,omitempty"`
	Message   string `json:"message,omitempty"`
	Batch     int    `json:"batch,omitempty"`
	// MovedAt is when the outcome was recorded, ObservedAt when the
	// verdict was; Deadline is how long after the move kvlive waited.
	MovedAt    time.Time     `json:"movedAt"`
	ObservedAt time.Time     `json:"observedAt"`
	Deadline   time.Duration `json:"deadline"`
	TraceID    string        `json:"traceId,omitempty"`
	SpanID     string        `json:"spanId,omitempty"`
	// Migration is KubeVirt's live migration of the VM since the move, as
	// the VMI showed it when the verdict was read, if one was handed off.
	Migration *MigrationRecord `json:"migration,omitempty"`
	// FailedMigrations are the VM's live migrations since the move that
	// failed, as the verifier saw them while it awaited the verdict, oldest
	// first (the latest among them may be Migration). The VMI keeps only
	// its latest migration, and a verifier started since counts only what
	// it saw: there were at least these.
	FailedMigrations []MigrationRecord `json:"failedMigrations,omitempty"`
	// Reobserved marks a later look at a VM whose verdict was unsettled
	// (pending, refused or not observed at the deadline), asked for with
	// kvlive rollout verify: it follows the verdict, never replaces it.
	Reobserved bool `json:"reobserved,omitempty"`
}

// MigrationRecord is one live migration of a VM as its VMI reports it
// (status.migrationState): KubeVirt's migration object's UID, the node it
// went to, when the source started it and when it ended, and whether it
// failed and why.
type MigrationRecord struct {
	UID           string     `json:"uid"`
	Target        string     `json:"target,omitempty"`
	Started       *time.Time `json:"started,omitempty"`
	Ended         *time.Time `json:"ended,omitempty"`
	Failed        bool       `json:"failed,omitempty"`
	FailureReason string     `json:"failureReason,omitempty"`
}

// Unsettled reports a verdict that says what stood at the deadline rather
// than what KubeVirt did: queued, pending, refused, not observed. Such a VM
// can be observed again later.
func (o Observed) Unsettled() bool {
	return o == ObservedQueued || o == ObservedPending || o == ObservedRefused || o == ObservedNotObserved
}

// Validate checks a verdict names its event, VM and a known verdict.
func (v *Verdict) Validate() error {
	switch {
	case v.EventID == "":
		return errors.New("eventId is required")
	case v.VM.Namespace == "" || v.VM.Name == "" || v.VM.UID == "":
		return errors.New("vm namespace, name and uid are required")
	case !v.Predicted.Moves():
		return fmt.Errorf("predicted %q: only a VM that moves gets a verdict", v.Predicted)
	case !v.Observed.valid():
		return fmt.Errorf("unknown verdict %q", v.Observed)
	}
	return nil
}

const subjectVerdicts = "kvlive.verdicts"

// VerdictSubject is where the verdict on one VM of one event is stored:
// kvlive.verdicts.<namespace>.<vm-uid>.<event>, in the outcomes stream. A
// subject per VM and event lets a verdict be published only where none is
// (jetstream.WithExpectLastSequencePerSubject(0)): a redelivery or a
// second replica cannot store two.
func VerdictSubject(namespace, vmUID, eventID string) string {
	return subjectVerdicts + "." + namespace + "." + vmUID + "." + EventToken(eventID)
}

// VerdictsOf filters the verdicts of eventID.
func VerdictsOf(eventID string) string { return subjectVerdicts + ".*.*." + EventToken(eventID) }

// reobserved is the token that follows a verdict's subject for its
// re-observations, which VerdictsOf and VerdictsIn therefore never match.
const reobserved = "again"

// ReobservedSubject is where the re-observations of one VM of one event
// are kept, the latest last: the verdict's subject and "again".
func ReobservedSubject(namespace, vmUID, eventID string) string {
	return VerdictSubject(namespace, vmUID, eventID) + "." + reobserved
}

// ReobservedIn filters the re-observations in namespace ("" for all) of
// eventID ("" for every event).
func ReobservedIn(namespace, eventID string) string {
	return VerdictsIn(namespace, eventID) + "." + reobserved
}

// VerdictID is the Nats-Msg-Id and CloudEvents id of a verdict.
func VerdictID(eventID, vmUID string) string { return "verdict/" + eventID + "/" + vmUID }

// ConsumerVerifier is the durable consumer on the outcomes the verifier
// reads moved VMs from.
const ConsumerVerifier = "verifier"

// VerifierConsumer is the verifier's durable pull consumer on the outcomes
// of namespace ("" for all), made by Setup before any stage runs, so it
// delivers every outcome stored since. A moved VM's outcome stays unacked
// until its verdict is stored, so the consumer's pending messages are the
// VMs awaiting a verdict: ackWait (past the verdict deadline) hands those
// of a replica that died to another. MaxAckPending is unlimited: there is
// no cap on VMs awaited.
func VerifierConsumer(ackWait time.Duration, namespace string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerVerifier,
		Description:   "kvlive verifier: KubeVirt's verdict on every VM kvlive moved",
		FilterSubject: OutcomesIn(namespace),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverNewPolicy,
	}
}

// VerdictsIn filters the verdicts in namespace ("" for all) of eventID
// ("" for every event).
func VerdictsIn(namespace, eventID string) string {
	ns, ev := "*", "*"
	if namespace != "" {
		ns = namespace
	}
	if eventID != "" {
		ev = EventToken(eventID)
	}
	return subjectVerdicts + "." + ns + ".*." + ev
}
