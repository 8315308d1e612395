package events

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamNotify keeps the notifications of rollouts' state changes until
// every receiver's consumer has taken them (and, as a record, for the
// replay horizon).
const StreamNotify = "KVLIVE_NOTIFY"

// TypeNotification is a notification's CloudEvents type.
const TypeNotification = "io.kvlive.rollout.notification.v1"

const subjectNotify = "kvlive.notify"

// Notification kinds: the state changes of a rollout a person is told of.
const (
	NotifyStarted   = "started"
	NotifyHeld      = "held"
	NotifyPaused    = "paused"
	NotifyDiffer    = "differ"
	NotifyFailed    = "failed"
	NotifyCompleted = "completed"
	NotifyAborted   = "aborted"
	NotifyUndone    = "undone"
)

// NotifyKinds are the kinds, in the order a rollout meets them.
var NotifyKinds = []string{NotifyStarted, NotifyHeld, NotifyPaused, NotifyDiffer, NotifyFailed, NotifyCompleted, NotifyAborted, NotifyUndone}

// NotifySubject is where the notification of one state change of eventID's
// rollout is kept: kvlive.notify.<event>.<kind>.<occurrence>, occurrence
// telling apart changes of one kind (the second pause from the first). It
// is published only where the subject is empty
// (jetstream.WithExpectLastSequencePerSubject(0)), so a replica that saw
// the same change, or a restarted one, cannot send it twice.
func NotifySubject(eventID, kind, occurrence string) string {
	return subjectNotify + "." + EventToken(eventID) + "." + kind + "." + EventToken(occurrence)
}

// NotificationsOf filters the notifications of eventID's rollout.
func NotificationsOf(eventID string) string {
	return subjectNotify + "." + EventToken(eventID) + ".>"
}

// EventOfNotifySubject is the event whose rollout a notification's subject
// (NotifySubject) tells of.
func EventOfNotifySubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, subjectNotify+".")
	token, _, found := strings.Cut(rest, ".")
	if !ok || !found {
		return "", fmt.Errorf("%q is not a notification's subject", subject)
	}
	return EventOfToken(token)
}

// NotifyID is a notification's Nats-Msg-Id and CloudEvents id: the same
// for every replica that sees the change.
func NotifyID(eventID, kind, occurrence string) string {
	return "notify/" + eventID + "/" + kind + "/" + occurrence
}

// Notification tells people one state change of a rollout.
type Notification struct {
	EventID string `json:"eventId"`
	Kind    string `json:"kind"`
	// Object is what the rollout changes (an instance type, "from → to" for
	// a switch).
	Object string `json:"object,omitempty"`
	// Text is the message in a sentence; Why the reason (a gate's, an
	// operator's); Commands the exact kvlive commands that act on it; Link
	// the rollout's page on the dashboard, when one is known.
	Text     string   `json:"text"`
	Why      string   `json:"why,omitempty"`
	Commands []string `json:"commands,omitempty"`
	Link     string   `json:"link,omitempty"`
	// The rollout's counts when the change was seen.
	Phase    string           `json:"phase"`
	Planned  int              `json:"planned"`
	Settled  int              `json:"settled"`
	Outcomes map[Result]int   `json:"outcomes,omitempty"`
	Verdicts map[Observed]int `json:"verdicts,omitempty"`
	Differ   int              `json:"differ,omitempty"`
	Batch    int              `json:"batch,omitempty"`
	Batches  int              `json:"batches,omitempty"`
	SeenAt   time.Time        `json:"seenAt"`
}

// Validate checks what a receiver needs.
func (n *Notification) Validate() error {
	switch {
	case n.EventID == "":
		return errors.New("notification: no event id")
	case n.Text == "":
		return errors.New("notification: no text")
	}
	if !slices.Contains(NotifyKinds, n.Kind) {
		return fmt.Errorf("notification: unknown kind %q", n.Kind)
	}
	return nil
}

// NotifyConsumer is one receiver's durable consumer on the notifications:
// one at a time (MaxAckPending 1), so a receiver gets them in order and a
// retry holds the ones after it; from the first new one on, so a receiver
// added later is not sent the past.
func NotifyConsumer(name, receiver string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "kvlive notifications to " + receiver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    -1,
		MaxAckPending: 1,
		DeliverPolicy: jetstream.DeliverNewPolicy,
	}
}
