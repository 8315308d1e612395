package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Result is a VM's result in a plan or an outcome.
type Result string

// The results a plan or an outcome can carry (ARCHITECTURE.md, "Stages").
const (
	// ResultLive: the changes go live on the running VMI.
	ResultLive Result = "live"
	// ResultRestart: the pin moves, RestartRequired is expected.
	ResultRestart Result = "restart"
	// ResultNextBoot: the VM is not running and picks the pin up at its next start.
	ResultNextBoot Result = "next-boot"
	// ResultEvict: KubeVirt's workload updater evicts the running VMI to
	// bring the change in (it cannot live-migrate it, and
	// workloadUpdateMethods hold Evict); the VM restarts on its own.
	ResultEvict Result = "evict"
	// ResultNone: the VM is already at the target.
	ResultNone Result = "none"
	// ResultSkip: the VM is out of scope; the reason says why.
	ResultSkip Result = "skip"
	// ResultFailed: outcomes only; the error says what went wrong.
	ResultFailed Result = "failed"
)

// Results lists every result in the order summaries print them.
var Results = []Result{ResultLive, ResultRestart, ResultEvict, ResultNextBoot, ResultNone, ResultSkip, ResultFailed}

// Moves reports whether a plan with this result moves the VM's pin.
func (r Result) Moves() bool {
	return r == ResultLive || r == ResultRestart || r == ResultEvict || r == ResultNextBoot
}

func (r Result) valid(outcome bool) bool {
	switch r {
	case ResultLive, ResultRestart, ResultEvict, ResultNextBoot, ResultNone, ResultSkip:
		return true
	case ResultFailed:
		return outcome
	}
	return false
}

// Change is one field of the expanded VM that differs between the pinned and
// the target generation, with how KubeVirt will treat it.
type Change struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Class is "live", "restart" or "next-boot".
	Class string `json:"class"`
}

// Changed reports that an instance type or preference object moved to a new
// metadata.generation. It carries the old and the new spec so consumers can
// plan without reading the old generation back.
type Changed struct {
	Object        Ref             `json:"object"`
	UID           string          `json:"uid"`
	Generation    int64           `json:"generation"`
	OldGeneration int64           `json:"oldGeneration"`
	OldSpec       json.RawMessage `json:"oldSpec,omitempty"`
	NewSpec       json.RawMessage `json:"newSpec"`
	ObservedAt    time.Time       `json:"observedAt"`
	// Only, when set, limits the event to the VMs with these UIDs: a
	// rollout retry of the VMs that failed.
	Only []string `json:"only,omitempty"`
}

// Validate checks the fields every consumer relies on.
func (c *Changed) Validate() error {
	switch {
	case c.Object.Kind == "" || c.Object.Name == "":
		return errors.New("object kind and name are required")
	case c.UID == "":
		return errors.New("uid is required")
	case c.Generation <= 0:
		return fmt.Errorf("generation must be positive, got %d", c.Generation)
	case len(c.NewSpec) == 0:
		return errors.New("newSpec is required")
	}
	if _, err := NormalizeKind(c.Object.Kind, false); err != nil {
		return err
	}
	return nil
}

// SwitchRequest asks to move VMs from one instance type to another.
type SwitchRequest struct {
	ID   string `json:"id"`
	From Ref    `json:"from"`
	To   Ref    `json:"to"`
	// Namespace limits the switch to one namespace; empty means all.
	Namespace string `json:"namespace,omitempty"`
	// Selector is a label selector over VMs; empty selects every VM.
	Selector    string    `json:"selector,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
	// Policy, when set, is how the switch rolls out (kvlive switch's
	// flags); otherwise the planner's default policy applies.
	Policy *Policy `json:"policy,omitempty"`
	// Only, when set, limits the switch to the VMs with these UIDs: a
	// rollout retry of the VMs that failed.
	Only []string `json:"only,omitempty"`
	// ForceConflicts switches VMs whose reference another manager owns
	// by server-side apply (a GitOps tool), taking the field from it.
	ForceConflicts bool `json:"forceConflicts,omitempty"`
}

// Validate checks the request names two distinct instance types of the same family.
func (s *SwitchRequest) Validate() error {
	switch {
	case s.ID == "":
		return errors.New("id is required")
	case s.From.Kind == "" || s.From.Name == "" || s.To.Kind == "" || s.To.Name == "":
		return errors.New("from and to must name a kind and a name")
	case s.From.IsPreference() != s.To.IsPreference():
		return errors.New("cannot switch between an instance type and a preference")
	case s.From == s.To:
		return errors.New("from and to are the same object")
	}
	if err := s.CheckScope(); err != nil {
		return err
	}
	if s.Policy != nil {
		return s.Policy.Validate()
	}
	return nil
}

// CheckScope applies the rule the planner plans by to the request as a
// whole: a namespaced instance type or preference serves the VMs of its own
// namespace only, so a switch to one is limited to that namespace. (A
// namespaced From needs no rule: only its own namespace's VMs reference it.)
func (s *SwitchRequest) CheckScope() error {
	if s.To.IsClusterScoped() || s.To.Namespace == s.Namespace {
		return nil
	}
	where := "every namespace"
	if s.Namespace != "" {
		where = "namespace " + s.Namespace
	}
	return fmt.Errorf("%s serves only the VMs of namespace %s, and the switch is in %s: switch with -n %s",
		s.To, s.To.Namespace, where, s.To.Namespace)
}

// VMRef identifies one VirtualMachine, UID included so a VM deleted and
// re-created under the same name is told apart.
type VMRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func (v VMRef) String() string { return v.Namespace + "/" + v.Name }

// Move says how the applier moves a VM.
type Move string

const (
	// MoveRepin snapshots the target generation and moves the pin to it.
	MoveRepin Move = "repin"
	// MoveSwitch points spec.instancetype (or spec.preference) at another object.
	MoveSwitch Move = "switch"
	// MoveRevert moves the pin back to a revision the VM was pinned to
	// before (an undo), re-creating it from Snapshot if it is gone.
	MoveRevert Move = "revert"
	// MoveRestart restarts the running VM as virt-api's restart does: a
	// Stop naming the running VMI (Target.VMI), then a Start, added to the
	// VM's status.stateChangeRequests for virt-controller to carry out.
	MoveRestart Move = "restart"
)

// PinField says where a VM's pin lives.
type PinField string

const (
	// PinStatus is status.{instancetype,preference}Ref.controllerRevisionRef.name.
	PinStatus PinField = "status"
	// PinSpecRevisionName is the legacy spec.{instancetype,preference}.revisionName.
	PinSpecRevisionName PinField = "spec"
)

// Target is what a plan moves a VM to, with the values the applier's JSON
// patch tests against so a concurrent change is detected, not overwritten.
type Target struct {
	Move   Move     `json:"move"`
	Object Ref      `json:"object"`
	UID    string   `json:"uid,omitempty"`
	Pin    PinField `json:"pin,omitempty"`
	// Generation is the object generation the pin moves to (re-pin).
	Generation int64 `json:"generation,omitempty"`
	// FromRevision is the pin seen when planning (re-pin).
	FromRevision string `json:"fromRevision,omitempty"`
	// From is the object a switch moves VMs away from; spec.*.name is tested
	// against its name.
	From *Ref `json:"from,omitempty"`
	// Revision is the revision a revert pins (Generation is its object
	// generation); Snapshot, when set, is its data, for re-creating it.
	Revision string          `json:"revision,omitempty"`
	Snapshot json.RawMessage `json:"snapshot,omitempty"`
	// VMI is the UID of the running VMI a restart stops.
	VMI string `json:"vmi,omitempty"`
	// Force takes the fields the move writes from the managers that own
	// them by server-side apply (kvlive switch --force-conflicts); without
	// it such a VM is skipped, naming them.
	Force bool `json:"force,omitempty"`
}

// Plan is one VM's live-update plan for one event.
type Plan struct {
	EventID string   `json:"eventId"`
	VM      VMRef    `json:"vm"`
	Action  Result   `json:"action"`
	Reason  string   `json:"reason,omitempty"`
	Changes []Change `json:"changes,omitempty"`
	Target  Target   `json:"target"`
	// Recheck marks a skip decided on cached VM state that may have been
	// behind the API server (no pin yet, or a pinned revision not yet seen);
	// the applier reads the VM afresh before accepting it.
	Recheck bool `json:"recheck,omitempty"`
	// Batch is the rollout batch the plan belongs to (0, the first, is
	// released at once; later ones wait in StreamStaged for their turn).
	Batch int `json:"batch,omitempty"`
}

// Validate checks a plan is complete enough to apply.
func (p *Plan) Validate() error {
	switch {
	case p.EventID == "":
		return errors.New("eventId is required")
	case p.VM.Namespace == "" || p.VM.Name == "" || p.VM.UID == "":
		return errors.New("vm namespace, name and uid are required")
	case !p.Action.valid(false):
		return fmt.Errorf("unknown action %q", p.Action)
	case p.Target.Move != MoveRepin && p.Target.Move != MoveSwitch && p.Target.Move != MoveRevert && p.Target.Move != MoveRestart:
		return fmt.Errorf("unknown move %q", p.Target.Move)
	case p.Target.Move == MoveRevert && p.Action.Moves() && p.Target.Revision == "":
		return errors.New("a revert names the revision it pins")
	case p.Target.Move == MoveRestart && p.Action.Moves() && (p.Action != ResultRestart || p.Target.VMI == ""):
		return errors.New("a restart restarts (action restart) the VMI it names")
	case p.Target.Object.Kind == "" || p.Target.Object.Name == "":
		return errors.New("target object kind and name are required")
	}
	return nil
}

// Outcome records what happened to one VM for one event.
type Outcome struct {
	EventID string   `json:"eventId"`
	VM      VMRef    `json:"vm"`
	Result  Result   `json:"result"`
	Reason  string   `json:"reason,omitempty"`
	Error   string   `json:"error,omitempty"`
	Changes []Change `json:"changes,omitempty"`
	// Revision is the ControllerRevision the VM is pinned to afterwards;
	// From, on a re-pin or revert that wrote, the one it was pinned to
	// before (what an undo moves it back to).
	Revision string `json:"revision,omitempty"`
	From     string `json:"from,omitempty"`
	// SwitchedTo, on the outcome of a switch, is the instance type or
	// preference it made the VM reference: the verdict is read only once
	// the VM references it.
	SwitchedTo *Ref `json:"switchedTo,omitempty"`
	// Stopped, on the outcome of a restart, is the UID of the VMI it
	// asked KubeVirt to stop; the verdict looks for a VMI other than it.
	Stopped string `json:"stopped,omitempty"`
	// Wrote is true when this attempt wrote to the API server.
	Wrote bool `json:"wrote"`
	// MovedAfter, on an outcome that found its VM already moved by an
	// earlier attempt (a crash between the write and the outcome), is the
	// earliest that move can have been: when its plan was stored. The
	// verdict reads KubeVirt's migrations from then, not from FinishedAt.
	MovedAfter time.Time `json:"movedAfter,omitzero"`
	// AtMove, on an outcome that wrote, is what the VM showed as the write
	// left it (the API server's answer): what KubeVirt had said before it
	// reacted to the move. Nil on older records and on outcomes that found
	// their VM already moved.
	AtMove  *AtMove `json:"atMove,omitempty"`
	Attempt int     `json:"attempt"`
	// Batch is the plan's rollout batch, which the batch's gate counts.
	Batch      int       `json:"batch,omitempty"`
	TraceID    string    `json:"traceId,omitempty"`
	SpanID     string    `json:"spanId,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
	// VerdictDeadline, on the outcome of a VM that moved, is how long after
	// FinishedAt KubeVirt's verdict on it is waited for (events.Verdict);
	// zero when the applier that moved it takes no verdicts.
	VerdictDeadline time.Duration `json:"verdictDeadline,omitempty"`
	// QueueDeadline, on the outcome of a running VM whose change KubeVirt
	// brings in by a live migration (or an eviction), is how long after
	// FinishedAt the VM may wait for that migration to start; the verdict
	// deadline then runs from the migration's start. Zero: the verdict
	// deadline alone.
	QueueDeadline time.Duration `json:"queueDeadline,omitempty"`
}

// AtMove is a VM as a move's write left it. KubeVirt v1.9's virt-controller
// writes the VM's status with the resourceVersion it read, so a condition
// that differs from the one here was written by a look at the moved VM; one
// that does not differ may be from before the move (KubeVirt rewrites no
// condition it keeps, and its times are whole seconds), unless
// status.desiredGeneration has reached Generation.
type AtMove struct {
	// Generation is the VM's metadata.generation after a write to its spec
	// (a switch, a pin in spec.*.revisionName); zero after a write to its
	// status, which leaves the generation as it was.
	Generation int64 `json:"generation,omitempty"`
	// Conditions are the VM's conditions a verdict reads (RestartRequired,
	// Failure) as they stood.
	Conditions []Condition `json:"conditions,omitempty"`
	// Migration is the UID of the migration the VMI showed when the VM
	// moved, if the cache had one: it began before the move, so it carries
	// none of the move's change.
	Migration string `json:"migration,omitempty"`
}

// Condition is a Kubernetes condition as a record keeps it.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// Condition returns the recorded condition of type typ, if there is one.
func (a *AtMove) Condition(typ string) (Condition, bool) {
	for _, c := range a.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return Condition{}, false
}

// Validate checks an outcome names its event, VM and a known result.
func (o *Outcome) Validate() error {
	switch {
	case o.EventID == "":
		return errors.New("eventId is required")
	case o.VM.Namespace == "" || o.VM.Name == "":
		return errors.New("vm namespace and name are required")
	case !o.Result.valid(true):
		return fmt.Errorf("unknown result %q", o.Result)
	}
	return nil
}
