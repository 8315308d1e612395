package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// RolloutState is what an operator last asked of one event's rollout.
type RolloutState string

// Rollout states. A rollout nobody has paused or aborted is running.
const (
	StateRunning RolloutState = "running"
	// StatePaused holds the event's plans: the applier parks each one in
	// StreamHeld untouched instead of moving its VM, until a resume (or an
	// abort) sends them back.
	StatePaused RolloutState = "paused"
	// StateAborted is final: VMs not yet moved get a skip outcome saying so.
	StateAborted RolloutState = "aborted"
)

// Control is the record kept in BucketControl under an event id. It is
// written with compare-and-set, so two operators (or two replicas) cannot
// overwrite each other's decision unseen.
type Control struct {
	State  RolloutState `json:"state"`
	Reason string       `json:"reason,omitempty"`
	// By names who asked (user@host of the CLI, or kvlive for a gate).
	By string    `json:"by,omitempty"`
	At time.Time `json:"at"`
	// Batch is the last batch of a batched rollout released to the
	// applier, at BatchAt. GateAt is when that batch passed its gate (zero
	// until it has), and Gate what the last gate check found.
	Batch   int       `json:"batch,omitempty"`
	BatchAt time.Time `json:"batchAt,omitzero"`
	GateAt  time.Time `json:"gateAt,omitzero"`
	Gate    string    `json:"gate,omitempty"`
	// Retries are the rollout retries of this rollout's failed VMs: a VM
	// retried once is not offered to another retry of this rollout (retry
	// the retry for those that failed again).
	Retries []Retry `json:"retries,omitempty"`
	// Settled is when kvlive found the rollout settled: every planned VM
	// has an outcome or a dead letter and no plan is left. A plan of it
	// arriving after is no plan the planner sent (forged, or a stale
	// copy) and moves nothing, unless `kvlive dlq retry` reopened the
	// rollout (Reopened) to send a dead plan back.
	Settled  time.Time `json:"settled,omitzero"`
	Reopened time.Time `json:"reopened,omitzero"`
	// ResumeAt, on a rollout paused outside its restart window, is when
	// the window opens: the rollout controller resumes it then. Any other
	// pause, resume or abort clears it.
	ResumeAt time.Time `json:"resumeAt,omitzero"`
	// Awaiting, on a rollout the planner paused before its first batch
	// went, names the webhook whose answer releases it (AwaitingConfirm):
	// the rollout controller asks it, off the pipeline's workers, and
	// resumes (yes) or pauses or aborts (no) the rollout. Any other pause,
	// resume or abort clears it, and cancels the call.
	Awaiting string `json:"awaiting,omitempty"`
	// Pauses are the rollout's pauses, oldest first, the current one
	// included (at most MaxPauses, the latest): a pause lifted before the
	// notifier looked, or while no notifier ran, is still told.
	Pauses []Pause `json:"pauses,omitempty"`
}

// Pause is one pause of a rollout, as its control record said when paused.
type Pause struct {
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

// MaxPauses bounds a control record's Pauses. A rollout paused more often
// keeps its latest; the notifier has told the older ones unless more than
// MaxPauses came and went while no notifier ran.
const MaxPauses = 64

// NotePause adds the pause c is in to c.Pauses when c is paused and its
// pause is not the one prev was in (prev is the record c was made from).
func (c *Control) NotePause(prev Control) {
	if c.State != StatePaused || (prev.State == StatePaused && prev.At.Equal(c.At)) {
		return
	}
	c.Pauses = append(c.Pauses, Pause{At: c.At, By: c.By, Reason: c.Reason})
	if n := len(c.Pauses); n > MaxPauses {
		c.Pauses = slices.Clone(c.Pauses[n-MaxPauses:])
	}
}

// AwaitingConfirm is Control.Awaiting on a rollout whose confirm webhook
// is asked about its first batch.
const AwaitingConfirm = "confirm"

// Retry is one rollout retry: the retry event and the VMs (UIDs) it took.
type Retry struct {
	EventID string    `json:"eventId"`
	VMs     []string  `json:"vms"`
	By      string    `json:"by,omitempty"`
	At      time.Time `json:"at"`
}

// RetriedBy is the retry event that took the VM with uid, "" for none.
func (c Control) RetriedBy(uid string) string {
	for _, r := range c.Retries {
		if slices.Contains(r.VMs, uid) {
			return r.EventID
		}
	}
	return ""
}

// Describe says who asked and why: "by alice@host: bad memory size".
func (c Control) Describe() string {
	switch {
	case c.By != "" && c.Reason != "":
		return "by " + c.By + ": " + c.Reason
	case c.By != "":
		return "by " + c.By
	}
	return c.Reason
}

// ControlAction is a change an operator asks of a rollout.
type ControlAction string

// Control actions.
const (
	ActionPause  ControlAction = "pause"
	ActionResume ControlAction = "resume"
	ActionAbort  ControlAction = "abort"
)

// MarshalControl encodes a control record for the KV bucket.
func MarshalControl(c Control) ([]byte, error) { return json.Marshal(c) }

// UnmarshalControl decodes a control record, rejecting unknown states.
func UnmarshalControl(b []byte) (Control, error) {
	var c Control
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("events: control record: %w", err)
	}
	switch c.State {
	case StateRunning, StatePaused, StateAborted:
		return c, nil
	}
	return c, fmt.Errorf("events: control record: unknown state %q", c.State)
}

// ControlKey is the KV key of an event's control record.
func ControlKey(eventID string) string { return eventID }

// HeldID is the Nats-Msg-Id of a plan parked while its rollout is paused:
// planSequence is the plans-stream sequence of the message parked, so a
// redelivery of that message is stored once, while a released copy (a new
// message) parked again by a later pause is stored again.
func HeldID(planID string, planSequence uint64) string {
	return fmt.Sprintf("%s/held/%d", planID, planSequence)
}

// ReleasedID is the Nats-Msg-Id of a parked plan sent back to the plans
// stream: one per parked message, so two replicas releasing it at once
// publish it once.
func ReleasedID(planID string, heldSequence uint64) string {
	return fmt.Sprintf("%s/released/%d", planID, heldSequence)
}
