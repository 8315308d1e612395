package events

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// TypeUndoRequested is the CloudEvents type of an undo request.
const TypeUndoRequested = "io.kvlive.undo.requested.v1"

// UndoRequest asks to move every VM a rollout moved back to where it was:
// a change's VMs to the revisions they were pinned to before it, a
// switch's to the object they were switched from. VMs changed since by
// someone else are skipped and named.
type UndoRequest struct {
	ID string `json:"id"`
	// Of is the event id of the rollout undone.
	Of          string    `json:"of"`
	RequestedAt time.Time `json:"requestedAt"`
	// Policy, when set, is how the undo rolls out (kvlive rollout undo's
	// flags); otherwise the planner's default policy applies.
	Policy *Policy `json:"policy,omitempty"`
}

// Validate checks the request names itself and the rollout it undoes.
func (u *UndoRequest) Validate() error {
	switch {
	case u.ID == "":
		return errors.New("id is required")
	case u.Of == "":
		return errors.New("of (the rollout undone) is required")
	case IsUndo(u.Of):
		return fmt.Errorf("%s is an undo itself; an undo is not undone", u.Of)
	}
	if err := CheckEventID(u.Of); err != nil {
		return err
	}
	if u.Policy != nil {
		return u.Policy.Validate()
	}
	return nil
}

// UndoEventID is the id of an undo request: undo/<uuid>.
func UndoEventID(requestID string) string { return "undo/" + requestID }

// NewUndoID is a fresh undo request id.
func NewUndoID() string { return uuid.NewString() }

// IsUndo reports whether eventID is an undo's.
func IsUndo(eventID string) bool { return len(eventID) > 5 && eventID[:5] == "undo/" }

// UndoSubject is where undo requests are published.
func UndoSubject() string { return subjectEvents + ".undo" }
