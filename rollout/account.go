package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// Phase is where a rollout stands, derived from its accounting.
type Phase string

// Phases.
const (
	// PhasePending: the event is known (paused or aborted ahead of time)
	// but the planner has not planned it yet.
	PhasePending Phase = "pending"
	// PhaseRunning: plans are in flight.
	PhaseRunning Phase = "running"
	// PhasePaused: an operator paused it; its plans wait in the held stream.
	PhasePaused Phase = "paused"
	// PhaseAborted: an operator aborted it.
	PhaseAborted Phase = "aborted"
	// PhaseComplete: every planned VM has an outcome or a dead letter (and,
	// as CountVerdicts tells, every moved VM KubeVirt's verdict).
	PhaseComplete Phase = "complete"
	// PhaseVerifying: every planned VM has an outcome or a dead letter, and
	// KubeVirt's verdict on some moved VM is still awaited (CountVerdicts).
	PhaseVerifying Phase = "verifying"
	// PhaseIncomplete: nothing is in flight or held, yet some planned VMs
	// have neither an outcome nor a dead letter.
	PhaseIncomplete Phase = "incomplete"
	// PhaseRefused: the planner dead-lettered the event (malformed, forged,
	// or out of its delivery budget): it is never planned; `kvlive dlq`
	// shows why.
	PhaseRefused Phase = "refused"
)

// ErrNoRollout is returned for an event id kvlive has no rollout of.
var ErrNoRollout = errors.New("no rollout")

// Account is one event's rollout accounting: every planned VM has an
// outcome, a dead letter, a held plan or a plan in flight.
type Account struct {
	EventID string `json:"eventId"`
	Phase   Phase  `json:"phase"`
	// Control is what an operator last asked of the rollout; ControlError
	// says why it could not be read (the rest of the account still holds).
	Control      events.Control `json:"control"`
	ControlError string         `json:"controlError,omitempty"`
	// Recorded is false while the planner has not recorded the rollout;
	// Record is what it recorded.
	Recorded bool           `json:"recorded"`
	Record   events.Rollout `json:"-"`
	// Refused, on an event the planner dead-lettered (PhaseRefused), is
	// the reason it gave; the reader of the dead letters fills it in.
	Refused string `json:"refused,omitempty"`
	Planned int    `json:"planned"`
	// Outcomes counts the latest outcome per VM by result.
	Outcomes map[events.Result]int `json:"outcomes"`
	// DeadLetters are VMs whose plan was dead-lettered and that have no outcome.
	DeadLetters int `json:"deadLetters"`
	Held        int `json:"held"`
	InFlight    int `json:"inFlight"`
	// Staged are plans of batches not released yet; Batches the batch
	// sizes of a batched rollout, of which Batch is the last released.
	Staged  int   `json:"staged,omitempty"`
	Batches []int `json:"batches,omitempty"`
	Batch   int   `json:"batch,omitempty"`
	// Supersedes and PolicyError come from the rollout record (see
	// events.Rollout).
	Supersedes  []string `json:"supersedes,omitempty"`
	PolicyError string   `json:"policyError,omitempty"`
	// Unaccounted is how many planned VMs are in none of the above;
	// Since is the last thing that happened to the rollout.
	Unaccounted int       `json:"unaccounted,omitempty"`
	Since       time.Time `json:"since,omitzero"`
	// Dropped, for an incomplete rollout, names the record streams that
	// have dropped messages stored after it was planned to their limits
	// (--max-bytes, --max-age): the unaccounted VMs' records may be among
	// them.
	Dropped []string `json:"dropped,omitempty"`
	// Verdicts counts KubeVirt's verdicts on the moved VMs, Differ those
	// other than the prediction, and Awaited the moved VMs without one yet;
	// all zero until CountVerdicts fills them in.
	Verdicts map[events.Observed]int `json:"verdicts,omitempty"`
	Differ   int                     `json:"differ,omitempty"`
	Awaited  int                     `json:"awaited,omitempty"`
	// Migrations is the migration budget as CountMigrations read it: nil
	// until then, or where no applier paces live moves.
	Migrations *Migrations `json:"migrations,omitempty"`
	// Latest is the latest outcome per VM UID.
	Latest map[string]events.Outcome `json:"-"`
	// DeadBatch is the batch of each VM counted in DeadLetters, by UID.
	DeadBatch map[string]int `json:"-"`
	// afterRead, when set, is called after each of tally's reads with what
	// it read (tests move a plan on between two reads).
	afterRead func(what string)
}

// DeadIn is how many of DeadLetters are VMs of batch.
func (a Account) DeadIn(batch int) int {
	n := 0
	for _, b := range a.DeadBatch {
		if b == batch {
			n++
		}
	}
	return n
}

// Settled is how many planned VMs have an outcome or a dead letter.
func (a Account) Settled() int { return len(a.Latest) + a.DeadLetters }

// Done reports whether the rollout will change no further by itself.
func (a Account) Done() bool {
	return a.Phase == PhaseComplete || a.Phase == PhaseRefused || a.Phase == PhaseIncomplete || (a.Phase == PhaseAborted && a.Held == 0 && a.InFlight == 0 && a.Staged == 0)
}

// AccountOf reads eventID's accounting: its rollout record and control
// record, and, by subject filter (never scanning other events), its
// outcomes, dead letters, held plans and plans in flight. An event with
// neither a rollout record nor a control record is ErrNoRollout.
func AccountOf(ctx context.Context, js jetstream.JetStream, eventID string) (Account, error) {
	return accountOf(ctx, js, eventID, nil)
}

// WatchAccount calls fn with a, then with the account of a's event read again
// every interval, until the rollout is done (Done) or ctx ends. It returns
// the last account read, and ctx's error when ctx ended first. An event
// with no rollout yet (a switch the planner has not planned) stays a until
// it has one.
func WatchAccount(ctx context.Context, js jetstream.JetStream, a Account, every time.Duration, fn func(Account)) (Account, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		fn(a)
		if a.Done() {
			return a, nil
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-tick.C:
		}
		next, err := AccountOf(ctx, js, a.EventID)
		switch {
		case err == nil:
			a = next
		case errors.Is(err, ErrNoRollout): // still queued
		case ctx.Err() == nil:
			return a, err
		}
	}
}

// accountOf is AccountOf calling afterRead after each of tally's reads.
func accountOf(ctx context.Context, js jetstream.JetStream, eventID string, afterRead func(what string)) (Account, error) {
	a := Account{EventID: eventID, Outcomes: map[events.Result]int{}, Latest: map[string]events.Outcome{}, afterRead: afterRead}
	rec, recorded, err := Record(ctx, js, eventID)
	if err != nil {
		return a, err
	}
	a.Recorded, a.Record, a.Planned, a.Since = recorded, rec, rec.Planned, rec.PlannedAt
	controlled := false
	if store, err := Open(ctx, js); err == nil {
		var rev uint64
		a.Control, rev, err = store.Get(ctx, eventID)
		controlled = rev > 0
		if err != nil {
			a.ControlError = err.Error()
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return a, err
	}
	if !recorded && !controlled {
		return a, fmt.Errorf("%w %q: no event with that id was planned (kvlive events lists them)", ErrNoRollout, eventID)
	}
	err = a.tally(ctx, js)
	return a, err
}

// AccountWith is AccountOf for a caller that has just read the event's
// rollout record and control record itself (the applier's gates, every
// second): only the rest is read.
func AccountWith(ctx context.Context, js jetstream.JetStream, rec events.Rollout, c events.Control) (Account, error) {
	a := Account{EventID: rec.EventID, Outcomes: map[events.Result]int{}, Latest: map[string]events.Outcome{},
		Recorded: true, Record: rec, Planned: rec.Planned, Since: rec.PlannedAt, Control: c}
	err := a.tally(ctx, js)
	return a, err
}

// read passes err on, after telling afterRead (if set) what was read.
func (a *Account) read(what string, err error) error {
	if a.afterRead != nil && err == nil {
		a.afterRead(what)
	}
	return err
}

// tally reads, by subject filter, the event's staged plans, held plans,
// plans in flight, outcomes and dead letters, and derives the phase.
//
// The reads follow a plan's way (staged, held, in flight, then settled):
// whoever moves a plan on stores it at its next stop before removing it
// (the applier stores a VM's outcome, then acks its plan), so a plan that
// moves between two reads is seen at its next stop, never missed by both.
// Only a plan parked by a pause goes back the other way (in flight → held),
// so an incomplete rollout, which nothing will change any more, is claimed
// only when a second tally agrees.
func (a *Account) tally(ctx context.Context, js jetstream.JetStream) error {
	for range 2 {
		if err := a.count(ctx, js); err != nil {
			return err
		}
		if a.Phase = a.phase(); a.Phase != PhaseIncomplete {
			return nil
		}
	}
	var err error
	a.Dropped, err = droppedSince(ctx, js, a.Record.PlannedAt)
	return err
}

// droppedSince names the record streams (outcomes, dead letters) whose
// oldest message was stored after since while older ones are gone: they
// dropped, to their limits, records of a rollout planned at since. Nothing
// else removes their messages.
func droppedSince(ctx context.Context, js jetstream.JetStream, since time.Time) ([]string, error) {
	var out []string
	for _, name := range []string{events.StreamOutcomes, events.StreamDLQ} {
		s, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rollout: stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("rollout: stream %s: %w", name, err)
		}
		st, cfg := info.State, info.Config
		if st.FirstSeq <= 1 || !st.FirstTime.After(since) {
			continue
		}
		limits := []string{}
		if cfg.MaxBytes > 0 {
			limits = append(limits, fmt.Sprintf("max bytes %d, holding %d", cfg.MaxBytes, st.Bytes))
		}
		if cfg.MaxAge > 0 {
			limits = append(limits, "max age "+cfg.MaxAge.String())
		}
		out = append(out, fmt.Sprintf("%s (%s)", name, strings.Join(limits, ", ")))
	}
	return out, nil
}

// count reads the event's plans and settled VMs afresh, in tally's order.
func (a *Account) count(ctx context.Context, js jetstream.JetStream) error {
	rec := a.Record
	a.Outcomes, a.Latest, a.Unaccounted = map[events.Result]int{}, map[string]events.Outcome{}, 0
	for _, w := range a.work() {
		n, err := CountSubjects(ctx, js, w.stream, w.filter)
		if a.read(w.what, err) != nil {
			return err
		}
		*w.count = n
	}
	if err := a.read("outcomes", a.readOutcomes(ctx, js)); err != nil {
		return err
	}
	if err := a.read("dead letters", a.readDeadLetters(ctx, js)); err != nil {
		return err
	}
	a.Batches, a.Batch = rec.Batches, a.Control.Batch
	a.Supersedes, a.PolicyError = rec.Supersedes, rec.PolicyError
	return nil
}

// workCount is one of the streams an event's plans wait in, and the
// account's count of them there.
type workCount struct {
	what, stream, filter string
	count                *int
}

// work are the streams the event's plans wait in, in the order they move
// through them: staged, held, then in flight, read in that order so a
// plan moving on between two reads is counted twice, never missed.
func (a *Account) work() []workCount {
	return []workCount{
		{"staged", events.StreamStaged, events.StagedOf(a.EventID), &a.Staged},
		{"held", events.StreamHeld, events.HeldOf(a.EventID), &a.Held},
		{"in flight", events.StreamPlans, events.PlansOf(a.EventID), &a.InFlight},
	}
}

func (a *Account) phase() Phase {
	switch {
	case a.Control.State == events.StateAborted:
		return PhaseAborted
	case !a.Recorded:
		return PhasePending
	case a.Control.State == events.StatePaused:
		return PhasePaused
	case a.InFlight > 0 || a.Held > 0 || a.Staged > 0:
		return PhaseRunning
	case a.Settled() >= a.Planned:
		return PhaseComplete
	}
	a.Unaccounted = a.Planned - a.Settled()
	return PhaseIncomplete
}

// readOutcomes keeps the latest outcome per VM of the event.
func (a *Account) readOutcomes(ctx context.Context, js jetstream.JetStream) error {
	return scanSubject(ctx, js, events.StreamOutcomes, events.OutcomesOf(a.EventID, ""), func(m jetstream.Msg) {
		var o events.Outcome
		if _, err := events.Decode(m.Data(), events.TypeOutcome, &o); err != nil || o.EventID != a.EventID {
			return
		}
		if prev, ok := a.Latest[o.VM.UID]; ok {
			if a.Outcomes[prev.Result]--; a.Outcomes[prev.Result] == 0 {
				delete(a.Outcomes, prev.Result)
			}
		}
		a.Latest[o.VM.UID] = o
		a.Outcomes[o.Result]++
		if o.FinishedAt.After(a.Since) {
			a.Since = o.FinishedAt
		}
	})
}

// readDeadLetters counts the event's dead plans of VMs without an outcome
// (a plan given up on after its last delivery has both), by batch, whichever
// stage dead-lettered them (the applier, or the releaser of held and staged
// plans). A plan the applier refused as not the planner's is no VM of the
// rollout's and is left out.
func (a *Account) readDeadLetters(ctx context.Context, js jetstream.JetStream) error {
	a.DeadBatch = map[string]int{}
	err := scanSubject(ctx, js, events.StreamDLQ, events.DeadLettersOf(a.EventID), func(m jetstream.Msg) {
		if strings.HasPrefix(m.Headers().Get(events.HeaderDeadReason), events.ReasonNotPlanned) {
			return
		}
		var plan events.Plan
		uid := fmt.Sprint("seq-", m.Headers().Get(events.HeaderDeadSequence)) // undecodable: one VM each
		if _, err := events.Decode(m.Data(), events.TypePlan, &plan); err == nil {
			uid = plan.VM.UID
		}
		if _, ok := a.Latest[uid]; !ok {
			a.DeadBatch[uid] = plan.Batch
		}
	})
	a.DeadLetters = len(a.DeadBatch)
	return err
}

// CountSubjects counts the messages of stream under filter, from the
// stream's per-subject state: no message is read.
func CountSubjects(ctx context.Context, js jetstream.JetStream, stream, filter string) (int, error) {
	subjects, err := subjectCounts(ctx, js, stream, filter)
	n := 0
	for _, c := range subjects {
		n += int(c)
	}
	return n, err
}

// subjectCounts is stream's message count per subject under filter (none
// when the stream does not exist).
func subjectCounts(ctx context.Context, js jetstream.JetStream, stream, filter string) (map[string]uint64, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("rollout: stream %s: %w", stream, err)
	}
	return info.State.Subjects, nil
}

// Moving returns the events with a plan staged, held or in flight: the
// rollouts that may still move a VM. Every other rollout is settled, or
// waits on nothing (paused or aborted with every plan gone), and moves no
// VM any more unless an operator sends a dead letter back. It reads the
// three work streams' per-subject state, whatever the store holds besides,
// in a plan's way (see tally), and the held plans once more last: a pause
// parks a plan back from in flight to held.
func Moving(ctx context.Context, js jetstream.JetStream) (map[string]bool, error) {
	moving := map[string]bool{}
	for _, r := range []struct{ stream, filter string }{
		{events.StreamStaged, events.StagedOf("")},
		{events.StreamHeld, events.HeldOf("")},
		{events.StreamPlans, events.PlansOf("")},
		{events.StreamHeld, events.HeldOf("")},
	} {
		subjects, err := subjectCounts(ctx, js, r.stream, r.filter)
		if err != nil {
			return nil, err
		}
		for subject := range subjects {
			// A subject kvlive's ids cannot make is no rollout's: its
			// plan is dead-lettered by the applier, whatever is read here.
			if id, err := events.EventOfSubject(subject); err == nil {
				moving[id] = true
			}
		}
	}
	return moving, nil
}

// scanSubject reads every message of stream under filter that was stored
// when it began (bus.Scan: a read broken by a NATS leader election resumes
// where it stopped; one that stays broken fails rather than claim less
// than is there).
func scanSubject(ctx context.Context, js jetstream.JetStream, stream, filter string, each func(jetstream.Msg)) error {
	err := bus.Scan(ctx, js, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}, each)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rollout: %s under %s: %w", stream, filter, err)
	}
	return nil
}
