package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"kvlive/events"
	"kvlive/instancetype"
	"kvlive/internal/telemetry"
	"kvlive/internal/webhook"
)

// A batched rollout's first batch goes to the applier with the plans; the
// planner stages the others in events.StreamStaged. Every controller
// (one beside each applier) steps each batched rollout that still has staged plans: once the
// released batch passes its gate (every VM of it has an outcome and is in
// its planned state as KubeVirt reports it, and failures are within the
// policy's threshold) and the policy's pause is over, it records the next
// batch as released in the rollout's control record (compare-and-set: of
// replicas deciding at once, one wins) and sends its plans to the applier
// through a durable consumer every replica shares, under ids derived from
// their staged sequence, so releasing twice publishes once. A failure past
// the threshold, or a batch that misses its progress deadline, pauses (or
// aborts) the rollout with the reason.

// gateEvery is how often batched rollouts are stepped.
const gateEvery = time.Second

// DefaultProgressDeadline bounds each batch of a batched rollout whose
// policy sets no deadline, as a Deployment's progressDeadlineSeconds does.
const DefaultProgressDeadline = 10 * time.Minute

// GatedBy is who the control records name for a gate's decisions.
const GatedBy = "kvlive gate"

// runGates steps every batched rollout until ctx ends.
func (rc *Controller) runGates(ctx context.Context, store *Store) {
	tick := time.NewTicker(gateEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rc.resumeDue(ctx, store)
		awaiting := rc.confirmAwaited(ctx, store)
		staged, err := rc.stagedBatches(ctx)
		if err != nil {
			rc.cfg.Log.Warn("rollout: cannot list staged batches", "err", err)
			continue
		}
		rc.forget(func(id string) bool { _, a := awaiting[id]; _, s := staged[id]; return a || s })
		phases := map[events.RolloutState]int{}
		for id, batches := range staged {
			state, err := rc.stepRollout(ctx, store, id, batches)
			if err != nil && ctx.Err() == nil {
				rc.cfg.Log.Warn("rollout: batched rollout not stepped", "event", id, "err", err)
			}
			phases[state]++
		}
		rc.cfg.Metrics.BatchedRollouts(map[string]int{
			string(events.StateRunning): phases[events.StateRunning],
			string(events.StatePaused):  phases[events.StatePaused],
			string(events.StateAborted): phases[events.StateAborted],
		})
	}
}

// stagedBatches lists, per event, the batches that still have staged
// plans, in order, from the staged stream's subjects.
func (rc *Controller) stagedBatches(ctx context.Context) (map[string][]int, error) {
	s, err := rc.cfg.JetStream.Stream(ctx, events.StreamStaged)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.StagedOf("")))
	if err != nil {
		return nil, err
	}
	out := map[string][]int{}
	for subject := range info.State.Subjects {
		id, err := events.EventOfSubject(subject)
		if err != nil {
			continue
		}
		batch, err := events.BatchOfStagedSubject(subject)
		if err != nil {
			continue
		}
		out[id] = append(out[id], batch)
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out, nil
}

// gateStepKind is what a batched rollout's next step is.
type gateStepKind int

const (
	stepNone         gateStepKind = iota // nothing to do now
	stepSend                             // send released batches' staged plans (batches)
	stepNote                             // record what the gate waits for (why)
	stepTrip                             // pause or abort, as the policy says (result, why)
	stepPassGate                         // record the released batch's gate as passed (why)
	stepAwaitPromote                     // pause until promote or resume (why)
	stepRelease                          // release the next batch (batches[0])
	stepRefuse                           // act on nothing: the control record is not kvlive's (why)
)

// gateStep is a decision of the batch state machine.
type gateStep struct {
	kind    gateStepKind
	batches []int
	result  string
	why     string
}

// decide is the batch state machine: from the rollout's control record,
// its staged batches, its record, the released batch's gate (asked only
// when it matters) and the clock, the one step to take next.
//   - aborted: send every staged batch, for the applier to skip its VMs;
//   - a control record naming a batch the rollout does not have: nothing,
//     and status says why;
//   - a released batch still staged (a promote, a replica that stopped
//     mid-way): send it;
//   - paused: nothing;
//   - the gate failed: trip; waiting: trip past the deadline, else note why;
//   - passed: record it; then wait out the pause (manual: pause until
//     promote or resume), then release the next batch.
func decide(c events.Control, staged []int, rec events.Rollout, gate func() gateResult, now time.Time) gateStep {
	switch {
	case c.State == events.StateAborted:
		return gateStep{kind: stepSend, batches: staged}
	case c.Batch < 0 || c.Batch >= len(rec.Batches):
		// Not a record kvlive wrote (promote stops at the last batch):
		// acting on it would release every staged batch at once.
		return gateStep{kind: stepRefuse, why: fmt.Sprintf("refused: the control record names batch %d, the rollout has %d", c.Batch+1, len(rec.Batches))}
	case staged[0] <= c.Batch:
		return gateStep{kind: stepSend, batches: slices.DeleteFunc(slices.Clone(staged), func(b int) bool { return b > c.Batch })}
	case c.State == events.StatePaused || c.Batch+1 >= len(rec.Batches):
		return gateStep{}
	}
	g := gate()
	switch g.verdict {
	case gateFailed:
		return gateStep{kind: stepTrip, result: "failed", why: g.why}
	case gateWaiting:
		since := c.BatchAt
		if c.Batch == 0 || since.IsZero() {
			since = rec.PlannedAt
		}
		if r := resumedAt(c); r.After(since) {
			since = r // a resume gives the batch its deadline again
		}
		deadline := Deadline(rec.Policy)
		if deadline == 0 {
			deadline = DefaultProgressDeadline
		}
		if now.Sub(since) > deadline {
			return gateStep{kind: stepTrip, result: "deadline", why: fmt.Sprintf("progress deadline %s passed: %s", deadline, g.why)}
		}
		return gateStep{kind: stepNote, why: "waiting: " + g.why}
	}
	if c.GateAt.IsZero() {
		return gateStep{kind: stepPassGate, why: g.why}
	}
	wait, manual := PauseFor(rec.Policy)
	switch {
	case manual && !c.At.After(c.GateAt):
		// No pause or resume since the gate passed: wait for one.
		return gateStep{kind: stepAwaitPromote, why: fmt.Sprintf("batch %d of %d passed its gate; rollout promote (or resume) releases batch %d",
			c.Batch+1, len(rec.Batches), c.Batch+2)}
	case !manual && now.Before(c.GateAt.Add(wait)):
		return gateStep{}
	}
	return gateStep{kind: stepRelease, batches: []int{c.Batch + 1}}
}

// ask calls a rollout's webhook about batch (0-based), recorded as
// AskWebhook records it.
func (rc *Controller) ask(ctx context.Context, rec events.Rollout, phase, url string, batch int, vms []webhook.VM) webhook.Answer {
	return AskWebhook(ctx, WebhookAsker{Client: rc.cfg.Webhooks, Tracer: rc.tracer, Log: rc.cfg.Log, Metrics: rc.cfg.Metrics, Clock: rc.cfg.Clock},
		rec, phase, url, batch, vms)
}

// WebhookAsker is what asking a rollout's webhook uses: the client (nil
// refuses every call, saying so) and where the call is recorded.
type WebhookAsker struct {
	Client  *webhook.Client
	Tracer  trace.Tracer
	Log     *slog.Logger
	Metrics *telemetry.Metrics
	Clock   clock.PassiveClock
}

// AskWebhook calls rec's webhook url about batch (0-based) at phase with
// the batch's VMs, within the policy's webhookTimeout, and records the
// call and its answer whatever it is: a span under the rollout's planner
// span, a log line and kvlive_rollout_gates_total{result="webhook-PHASE"}.
// The planner asks about the first batch, the gate about the others.
func AskWebhook(ctx context.Context, h WebhookAsker, rec events.Rollout, phase, url string, batch int, vms []webhook.VM) webhook.Answer {
	call := webhook.Call{Phase: phase, EventID: rec.EventID, Object: rec.Object, Batch: batch + 1, Batches: max(len(rec.Batches), 1), VMs: vms}
	var a webhook.Answer
	if h.Client == nil {
		a = webhook.Answer{URL: url, Error: "this kvlive has no webhook client"}
	} else {
		timeout, _ := events.ParseDuration(rec.Policy.WebhookTimeout)
		a = h.Client.Ask(ctx, url, min(timeout, events.MaxWebhookTimeout), call, h.Clock.Now())
	}
	end := h.Clock.Now()
	if tid, err := trace.TraceIDFromHex(rec.TraceID); err == nil {
		if sid, err := trace.SpanIDFromHex(rec.SpanID); err == nil {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
		}
	}
	_, span := h.Tracer.Start(ctx, fmt.Sprintf("rollout.webhook %s %d/%d", call.Phase, call.Batch, call.Batches), trace.WithTimestamp(end.Add(-a.Took)),
		trace.WithAttributes(attribute.String("kvlive.event.id", rec.EventID), attribute.Int("kvlive.batch", call.Batch),
			attribute.String("url.full", a.URL), attribute.Int("http.response.status_code", a.Status),
			attribute.String("kvlive.webhook.answer", a.String()), attribute.Int("kvlive.batch.vms", len(call.VMs))))
	verdict := "yes"
	if !a.Yes() {
		verdict = "no"
		span.SetStatus(codes.Error, a.String())
	}
	span.End(trace.WithTimestamp(end))
	h.Metrics.Gate("webhook-"+phase, verdict)
	h.Log.Info("rollout webhook asked", "event", rec.EventID, "phase", phase, "batch", call.Batch, "answer", a.String(), "took", a.Took)
	return a
}

// batchVMs are the VMs of batch with their outcome and KubeVirt's verdict.
func batchVMs(acct Account, verdicts map[string]events.Verdict, batch int) []webhook.VM {
	var vms []webhook.VM
	for uid, o := range acct.Latest {
		if o.Batch != batch {
			continue
		}
		vms = append(vms, webhook.VM{Namespace: o.VM.Namespace, Name: o.VM.Name, UID: uid, Result: o.Result, Verdict: verdicts[uid].Observed, Reason: o.Reason})
	}
	slices.SortFunc(vms, func(a, b webhook.VM) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return vms
}

// askConfirm asks the rollout's confirm webhook about batch (0-based),
// naming the VMs the rollout planned in it.
func (rc *Controller) askConfirm(ctx context.Context, rec events.Rollout, url string, batch int) webhook.Answer {
	vms, err := rc.plannedIn(ctx, rec, batch)
	if err != nil {
		return webhook.Answer{URL: url, Error: "not asked: the batch's VMs are unreadable: " + err.Error()}
	}
	return rc.ask(ctx, rec, webhook.PhaseConfirm, url, batch, vms)
}

// confirmAwaited asks the confirm webhook of each rollout the planner
// paused until it answers (Store.AwaitConfirm), each call in the
// background, and records the answers that are in: a yes resumes the
// rollout (its held plans go), a no leaves it paused, or aborts it as its
// policy says. It returns the rollouts still awaiting.
func (rc *Controller) confirmAwaited(ctx context.Context, store *Store) map[string]events.Control {
	awaiting := rc.watch.Awaiting()
	now := rc.cfg.Clock.Now()
	for id, c := range awaiting {
		rec, recorded, err := Record(ctx, rc.cfg.JetStream, id)
		if err != nil || !recorded || rec.Policy.ConfirmWebhook == "" {
			continue // the planner records a rollout before it pauses it
		}
		url := rec.Policy.ConfirmWebhook
		a, _, answered := rc.hooks.take(keyOf(id, webhook.PhaseConfirm, 0, c), now, func(ctx context.Context) webhook.Answer {
			return rc.askConfirm(ctx, rec, url, 0)
		})
		if !answered {
			continue
		}
		batches := max(len(rec.Batches), 1)
		reason := fmt.Sprintf("batch 1 of %d: confirm webhook said no: %s", batches, a)
		if a.Yes() {
			reason = fmt.Sprintf("batch 1 of %d: confirm webhook said yes: %s", batches, a)
		}
		changed, err := store.ConfirmAnswered(ctx, id, c, a.Yes(), Aborts(rec.Policy), reason, rc.cfg.Clock.Now())
		switch {
		case err != nil:
			rc.cfg.Log.Warn("rollout: a confirm webhook's answer was not recorded; asked again", "event", id, "err", err)
		case changed && a.Yes():
			rc.cfg.Log.Info("rollout confirmed by its webhook", "event", id)
		case changed:
			phase := "paused"
			if Aborts(rec.Policy) {
				phase = "aborted"
			}
			rc.cfg.Metrics.Gate("webhook", phase)
			rc.cfg.Log.Warn("rollout "+phase+" by its confirm webhook", "event", id, "reason", reason)
			rc.recordEvent(rec.Object, corev1.EventTypeWarning, "Rollout"+strings.ToUpper(phase[:1])+phase[1:], "rollout %s %s: %s", id, phase, reason)
		}
	}
	return awaiting
}

// forget drops what the gate loop remembers of rollouts that keep does
// not name any more: its notes, and the webhook calls still out.
func (rc *Controller) forget(keep func(eventID string) bool) {
	rc.notesMu.Lock()
	for id := range rc.gateNotes {
		if !keep(id) {
			delete(rc.gateNotes, id)
		}
	}
	for id := range rc.refusedAt {
		if !keep(id) {
			delete(rc.refusedAt, id)
		}
	}
	rc.notesMu.Unlock()
	rc.hooks.forgetExcept(keep)
}

// plannedIn lists the VMs the rollout planned in batch.
func (rc *Controller) plannedIn(ctx context.Context, rec events.Rollout, batch int) ([]webhook.VM, error) {
	planned, _, err := PlannedVMs(ctx, rc.cfg.JetStream, rec)
	if err != nil {
		return nil, err
	}
	var vms []webhook.VM
	for _, vm := range planned {
		if vm.Batch == batch {
			vms = append(vms, webhook.VM{Namespace: vm.Namespace, Name: vm.Name, UID: vm.UID})
		}
	}
	return vms, nil
}

// waitForWindow pauses a restart rollout whose next batch is due outside
// its restart window until the window opens.
func (rc *Controller) waitForWindow(ctx context.Context, store *Store, rec events.Rollout, opens, now time.Time) error {
	why := WindowPause(rec.Policy.RestartWindow, opens)
	paused, err := store.PauseUntil(ctx, rec.EventID, why, now, opens)
	if err != nil || !paused {
		return err
	}
	rc.cfg.Metrics.Gate("window", "paused")
	rc.cfg.Log.Info("restart rollout paused until its window opens", "event", rec.EventID, "opens", opens)
	return nil
}

// resumeDue resumes the rollouts their restart window paused once it has
// opened; the watch then sends their held plans back.
func (rc *Controller) resumeDue(ctx context.Context, store *Store) {
	now := rc.cfg.Clock.Now()
	for _, id := range rc.watch.Due(now) {
		resumed, err := store.ResumeDue(ctx, id, now)
		switch {
		case err != nil:
			rc.cfg.Log.Warn("rollout: a rollout whose restart window opened was not resumed; tried again", "event", id, "err", err)
		case resumed:
			rc.cfg.Metrics.Gate("window", "running")
			rc.cfg.Log.Info("restart rollout resumed: its window opened", "event", id)
		}
	}
}

// resumedAt is when an operator last resumed (or promoted) the running
// rollout; zero when nobody did.
func resumedAt(c events.Control) time.Time {
	if c.State != events.StateRunning || c.By == "" {
		return time.Time{}
	}
	return c.At
}

// stepRollout takes one batched rollout one step further, if it can: it
// decides, takes the step, and decides again after a gate it recorded. It
// returns the state the rollout was found in.
func (rc *Controller) stepRollout(ctx context.Context, store *Store, id string, staged []int) (events.RolloutState, error) {
	c, _, err := store.Get(ctx, id)
	if err != nil {
		return c.State, err
	}
	return c.State, rc.takeSteps(ctx, store, id, staged, c)
}

// takeSteps takes the steps decide gives for the rollout found at c.
func (rc *Controller) takeSteps(ctx context.Context, store *Store, id string, staged []int, c events.Control) error {
	rec, recorded, err := Record(ctx, rc.cfg.JetStream, id)
	if err != nil || !recorded {
		return err
	}
	var gateErr error
	var acct Account
	var verdicts map[string]events.Verdict
	gate := func() gateResult {
		var err error
		if acct, err = AccountWith(ctx, rc.cfg.JetStream, rec, c); err != nil {
			gateErr = err
			return gateResult{gateWaiting, "the rollout's accounting is unreadable: " + err.Error()}
		}
		if rc.cfg.Verdicts {
			if verdicts, err = currentVerdicts(ctx, rc.cfg.JetStream, rec.EventID); err != nil {
				gateErr = err
				return gateResult{gateWaiting, "KubeVirt's verdicts are unreadable: " + err.Error()}
			}
		}
		return rc.gate(rec, c.Batch, acct, resumedAt(c), verdicts)
	}
	now := rc.cfg.Clock.Now()
	for {
		s := decide(c, staged, rec, gate, now)
		if gateErr != nil {
			return gateErr // decide nothing on an account not read
		}
		switch s.kind {
		case stepSend:
			return rc.releaseBatches(ctx, id, s.batches)
		case stepNote:
			return rc.noteWaiting(ctx, store, id, c, s.why)
		case stepRefuse:
			rc.refuse(id, c, s.why)
			return rc.noteWaiting(ctx, store, id, c, s.why)
		case stepTrip:
			return rc.trip(ctx, store, rec, c, s.result, s.why)
		case stepPassGate:
			if url := rec.Policy.CheckWebhook; url != "" {
				vms := batchVMs(acct, verdicts, c.Batch)
				a, since, answered := rc.hooks.take(keyOf(id, webhook.PhaseCheck, c.Batch, c), now, func(ctx context.Context) webhook.Answer {
					return rc.ask(ctx, rec, webhook.PhaseCheck, url, c.Batch, vms)
				})
				if !answered {
					return rc.noteWaiting(ctx, store, id, c, "waiting: batch passed KubeVirt's gate; "+asking(webhook.PhaseCheck, c.Batch, len(rec.Batches), webhook.Redact(url), since))
				}
				if !a.Yes() {
					return rc.trip(ctx, store, rec, c, "webhook", "check webhook said no: "+a.String())
				}
				s.why += "; check webhook: " + a.String()
			}
			passed, err := store.PassGate(ctx, id, c.Batch, s.why, now)
			if err != nil || !passed {
				return err
			}
			c.GateAt = now
			rc.batchSpan(ctx, rec, c, now, s.why, nil)
			continue // the pause, or the next batch, may follow at once
		case stepAwaitPromote:
			return rc.awaitPromote(ctx, store, id, c, s.why, now)
		case stepRelease:
			if open, opens := rec.Policy.RestartWindow.At(now); !open && rec.Type == string(events.MoveRestart) {
				return rc.waitForWindow(ctx, store, rec, opens, now)
			}
			if url := rec.Policy.ConfirmWebhook; url != "" {
				next := s.batches[0]
				a, since, answered := rc.hooks.take(keyOf(id, webhook.PhaseConfirm, next, c), now, func(ctx context.Context) webhook.Answer {
					return rc.askConfirm(ctx, rec, url, next)
				})
				if !answered {
					return rc.noteWaiting(ctx, store, id, c, "waiting: "+asking(webhook.PhaseConfirm, next, len(rec.Batches), webhook.Redact(url), since))
				}
				if !a.Yes() {
					return rc.trip(ctx, store, rec, c, "webhook", fmt.Sprintf("confirm webhook said no to batch %d: %s", next+1, a))
				}
			}
			return rc.releaseNext(ctx, store, rec, s.batches[0], now)
		}
		return nil
	}
}

// refuseEvery is how often, at most, a refused control record is logged
// and counted again.
const refuseEvery = time.Minute

// refuse logs and counts a control record kvlive did not write, which the
// gate loop meets every round: once per refuseEvery per rollout.
func (rc *Controller) refuse(id string, c events.Control, why string) {
	now := rc.cfg.Clock.Now()
	rc.notesMu.Lock()
	due := now.Sub(rc.refusedAt[id]) >= refuseEvery
	if due {
		rc.refusedAt[id] = now
	}
	rc.notesMu.Unlock()
	if due {
		rc.cfg.Metrics.Gate("refused", string(c.State))
		rc.cfg.Log.Warn("rollout: a control record kvlive did not write; the rollout is left where it is", "event", id, "reason", why)
	}
}

// awaitPromote pauses a rollout whose batch passed its gate under a manual
// pause, unless an operator acted since c was read.
func (rc *Controller) awaitPromote(ctx context.Context, store *Store, id string, c events.Control, why string, now time.Time) error {
	_, paused, err := store.ApplyIf(ctx, id, c, events.ActionPause, why, GatedBy, now)
	if err != nil || !paused {
		return err
	}
	rc.cfg.Metrics.Gate("passed", "waiting")
	rc.cfg.Log.Info("batch passed its gate; waiting for promote", "event", id, "batch", c.Batch+1)
	return nil
}

// releaseNext records batch as released and sends its staged plans.
func (rc *Controller) releaseNext(ctx context.Context, store *Store, rec events.Rollout, next int, now time.Time) error {
	id := rec.EventID
	opened, err := store.OpenBatch(ctx, id, next, now)
	if err != nil {
		return err
	}
	if !opened {
		// Another replica opened it (this one helps send it), or an
		// operator paused or aborted the rollout meanwhile: nothing opens.
		if c, _, err := store.Get(ctx, id); err != nil || c.Batch < next {
			return err
		}
	}
	if opened {
		rc.cfg.Metrics.Gate("passed", "running")
		rc.cfg.Metrics.BatchReleased()
		rc.cfg.Log.Info("batch released", "event", id, "batch", next+1, "of", len(rec.Batches), "vms", rec.Batches[next])
		rc.recordEvent(rec.Object, corev1.EventTypeNormal, "RolloutBatchReleased", "rollout %s: batch %d of %d released (%d VMs)", id, next+1, len(rec.Batches), rec.Batches[next])
	}
	return rc.releaseBatches(ctx, id, []int{next})
}

// noteEvery is how often, at most, a rollout's control record is rewritten
// with what its gate waits for.
const noteEvery = 5 * time.Second

// noteWaiting records what the released batch's gate waits for, so
// rollout status can show it, at most every noteEvery per rollout.
func (rc *Controller) noteWaiting(ctx context.Context, store *Store, id string, c events.Control, why string) error {
	if c.Gate == why {
		return nil
	}
	now := rc.cfg.Clock.Now()
	rc.notesMu.Lock()
	last := rc.gateNotes[id]
	if now.Sub(last) < noteEvery {
		rc.notesMu.Unlock()
		return nil
	}
	rc.gateNotes[id] = now
	rc.notesMu.Unlock()
	_, _, err := store.Update(ctx, id, false, func(cur *events.Control) (bool, error) {
		if cur.Batch != c.Batch || !cur.GateAt.Equal(c.GateAt) || cur.State != events.StateRunning {
			return false, nil
		}
		cur.Gate = why
		return true, nil
	})
	return err
}

// trip pauses (or, as the policy says, aborts) a rollout whose batch failed
// its gate or missed its deadline, with the reason, unless an operator
// acted since c was read (the gate decides again on what they did).
func (rc *Controller) trip(ctx context.Context, store *Store, rec events.Rollout, c events.Control, result, why string) error {
	action, phase := events.ActionPause, "paused"
	if Aborts(rec.Policy) {
		action, phase = events.ActionAbort, "aborted"
	}
	reason := fmt.Sprintf("batch %d of %d: %s", c.Batch+1, len(rec.Batches), why)
	_, changed, err := store.ApplyIf(ctx, rec.EventID, c, action, reason, GatedBy, rc.cfg.Clock.Now())
	if err != nil || !changed {
		return err
	}
	rc.cfg.Metrics.Gate(result, phase)
	rc.cfg.Log.Warn("batched rollout "+phase+" by its gate", "event", rec.EventID, "reason", reason)
	rc.recordEvent(rec.Object, corev1.EventTypeWarning, "Rollout"+strings.ToUpper(phase[:1])+phase[1:], "rollout %s %s: %s", rec.EventID, phase, reason)
	rc.batchSpan(ctx, rec, c, rc.cfg.Clock.Now(), reason, errors.New(phase))
	return nil
}

// recordEvent records a Kubernetes Event on the rollout's object, when it
// is in the cache and a recorder is set.
func (rc *Controller) recordEvent(ref events.Ref, kind, reason, format string, args ...any) {
	if o, ok := rc.cfg.Fleet.Object(ref).(runtime.Object); ok && rc.cfg.Recorder != nil {
		rc.cfg.Recorder.Eventf(o, kind, reason, format, args...)
	}
}

// batchSpan records a batch, from its release to its gate's decision, as a
// span under the rollout's planner span, so kvlive trace shows the batches.
func (rc *Controller) batchSpan(ctx context.Context, rec events.Rollout, c events.Control, end time.Time, gate string, failed error) {
	start := c.BatchAt
	if c.Batch == 0 || start.IsZero() {
		start = rec.PlannedAt
	}
	if tid, err := trace.TraceIDFromHex(rec.TraceID); err == nil {
		if sid, err := trace.SpanIDFromHex(rec.SpanID); err == nil {
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
		}
	}
	_, span := rc.tracer.Start(ctx, fmt.Sprintf("rollout.batch %d/%d", c.Batch+1, len(rec.Batches)), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("kvlive.event.id", rec.EventID), attribute.Int("kvlive.batch", c.Batch+1),
			attribute.Int("kvlive.batch.vms", rec.Batches[c.Batch]), attribute.String("kvlive.gate", gate)))
	if failed != nil {
		span.SetStatus(codes.Error, gate)
	}
	span.End(trace.WithTimestamp(end))
}

// Gate verdicts.
const (
	gateWaiting = iota
	gatePassed
	gateFailed
)

// gateResult is what a batch's gate found, and why.
type gateResult struct {
	verdict int
	why     string
}

// maxNamed is how many VMs a gate's reason names.
const maxNamed = 3

// gate checks the released batch: failures over the whole rollout within
// the policy's threshold; every VM of the batch with an outcome; each
// moved VM with KubeVirt's verdict stored (verdicts, by VM UID) or, where
// the verifier does not run (verdicts nil), in the state KubeVirt reports
// for its result. A verdict other than the prediction (a live VM KubeVirt
// flagged RestartRequired, a hotplug refused or still pending at the
// deadline) is a failure.
//
// An operator who resumes a rollout accepts the failures so far: only VMs
// that failed after resumed (the control record's last change) count
// against the threshold, so a resume after a tripped threshold goes on.
func (rc *Controller) gate(rec events.Rollout, batch int, acct Account, resumed time.Time, verdicts map[string]events.Verdict) gateResult {
	failed := acct.DeadLetters
	if resumed.IsZero() {
		failed += acct.Outcomes[events.ResultFailed]
	} else {
		failed = 0 // dead letters carry no time: a resume accepts them too
		for _, o := range acct.Latest {
			if o.Result == events.ResultFailed && o.FinishedAt.After(resumed) {
				failed++
			}
		}
	}
	restarting := rc.restarting(acct, batch, verdicts)
	differ := differing(acct, verdicts, resumed, restarting)
	failed += len(differ)
	if tolerated := Tolerated(rec.Policy, rec.Planned); failed > tolerated {
		return gateResult{gateFailed, fmt.Sprintf("%d VMs failed, the policy tolerates %d", failed, tolerated) + named("; KubeVirt's verdict differs", differ)}
	}
	if len(restarting) > 0 {
		// Whatever the threshold tolerates: the next batch's restarts
		// would go out beside these, past the restart budget.
		why := make([]string, 0, len(restarting))
		for _, w := range restarting {
			why = append(why, w)
		}
		return gateResult{gateWaiting, fmt.Sprintf("%d VMs still restarting", len(restarting)) + named("", why)}
	}
	want := rec.Batches[batch]
	if batch == 0 { // the plans that move nothing went with the first batch
		want += rec.Counts[events.ResultNone] + rec.Counts[events.ResultSkip]
	}
	settled := acct.DeadIn(batch) // a dead letter the policy tolerates is settled
	var unready []string
	for uid, o := range acct.Latest {
		if o.Batch != batch {
			continue
		}
		settled++
		switch _, judged := verdicts[uid]; {
		case verdicts == nil:
			if why := rc.inPlannedState(o); why != "" {
				unready = append(unready, o.VM.String()+": "+why)
			}
		case o.Result.Moves() && !judged:
			unready = append(unready, o.VM.String()+": awaiting KubeVirt's verdict")
		}
	}
	if settled < want {
		return gateResult{gateWaiting, fmt.Sprintf("%d of %d VMs of the batch have an outcome", settled, want)}
	}
	if len(unready) > 0 {
		return gateResult{gateWaiting, fmt.Sprintf("%d VMs not in their planned state", len(unready)) + named("", unready)}
	}
	if verdicts != nil {
		return gateResult{gatePassed, fmt.Sprintf("all %d VMs with KubeVirt's verdict as predicted, %d failed", settled, failed)}
	}
	return gateResult{gatePassed, fmt.Sprintf("all %d VMs in their planned state, %d failed", settled, failed)}
}

// restarting names the VMs of batch kvlive asked to restart whose restart
// has not finished as the cache shows it (their old VMI still there, or no
// new one running yet), and those whose move KubeVirt answers with an
// eviction (a restart of its own) not yet evicted or not running again,
// by UID, with why: they count against the restart budget as restarts do.
func (rc *Controller) restarting(acct Account, batch int, verdicts map[string]events.Verdict) map[string]string {
	out := map[string]string{}
	for uid, o := range acct.Latest {
		if o.Batch != batch || !o.Result.Moves() || (o.Stopped == "" && o.Result != events.ResultEvict) {
			continue
		}
		vm, vmi := rc.cfg.Fleet.VM(o.VM.Namespace, o.VM.Name), rc.cfg.Fleet.VMI(o.VM.Namespace, o.VM.Name)
		if vm == nil || string(vm.UID) != uid {
			continue // deleted (or re-created): no restart of it goes on
		}
		if o.Stopped == "" {
			if why := evicting(o, vm, vmi, verdicts); why != "" {
				out[uid] = o.VM.String() + ": " + why
			}
			continue
		}
		switch {
		case vmi != nil && string(vmi.UID) == o.Stopped:
			out[uid] = o.VM.String() + ": its old VMI is still shutting down"
		case vmi == nil:
			out[uid] = o.VM.String() + ": no new VMI yet"
		case !instancetype.Running(vmi):
			out[uid] = o.VM.String() + ": its new VMI is " + string(vmi.Status.Phase) + ", not running yet"
		}
	}
	return out
}

// evicting says why a VM whose move KubeVirt answers with an eviction is
// still being restarted by it, or "": not evicted yet (no settled verdict,
// or, without verdicts, the VMI of before the move still runs), or evicted
// and not running again under a run strategy that starts it.
func evicting(o events.Outcome, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, verdicts map[string]events.Verdict) string {
	if verdicts != nil {
		if v, ok := verdicts[o.VM.UID]; !ok || v.Observed.Unsettled() {
			return "KubeVirt has not evicted it yet"
		}
	} else if vmi != nil && !vmi.CreationTimestamp.After(o.FinishedAt.Truncate(time.Second)) {
		return "KubeVirt has not evicted it yet"
	}
	restarts := vm.Spec.RunStrategy != nil && (*vm.Spec.RunStrategy == virtv1.RunStrategyAlways || *vm.Spec.RunStrategy == virtv1.RunStrategyRerunOnFailure)
	switch {
	case vmi == nil && restarts:
		return "evicted, no new VMI yet"
	case vmi != nil && !instancetype.Running(vmi):
		return "evicted, its new VMI is " + string(vmi.Status.Phase) + ", not running yet"
	}
	return ""
}

// differing lists the moved VMs whose verdict differs from the prediction,
// stored after resumed (when an operator resumed the rollout), but for
// those still restarting (whose verdict at the deadline said only that).
func differing(acct Account, verdicts map[string]events.Verdict, resumed time.Time, restarting map[string]string) []string {
	var out []string
	for uid, o := range acct.Latest {
		if _, busy := restarting[uid]; busy {
			continue
		}
		v, ok := verdicts[uid]
		if ok && o.Result.Moves() && !v.Observed.Matches(o.Result) && (resumed.IsZero() || v.ObservedAt.After(resumed)) {
			out = append(out, fmt.Sprintf("%s: predicted %s, KubeVirt: %s (%s)", o.VM, o.Result, v.Observed, v.Reason))
		}
	}
	return out
}

// named renders up to maxNamed of what, sorted, after prefix: ": a; b;
// and 3 more"; "" when what is empty.
func named(prefix string, what []string) string {
	if len(what) == 0 {
		return ""
	}
	slices.Sort(what)
	more := ""
	if len(what) > maxNamed {
		more = fmt.Sprintf("; and %d more", len(what)-maxNamed)
	}
	return prefix + ": " + strings.Join(what[:min(len(what), maxNamed)], "; ") + more
}

// inPlannedState says why a VM is not (yet) where its outcome left it,
// as the cache shows KubeVirt's report, or "" when it is.
func (rc *Controller) inPlannedState(o events.Outcome) string {
	return instancetype.InPlannedState(o, rc.cfg.Fleet.VM(o.VM.Namespace, o.VM.Name), rc.cfg.Fleet.VMI(o.VM.Namespace, o.VM.Name))
}

// releaseBatches sends the staged plans of each batch to the plans stream.
func (rc *Controller) releaseBatches(ctx context.Context, eventID string, batches []int) error {
	var errs []error
	for _, b := range batches {
		errs = append(errs, rc.releaseBatch(ctx, eventID, b))
	}
	return errors.Join(errs...)
}

// releaseBatch sends the batch's staged plans to the plans stream until
// none is left.
func (rc *Controller) releaseBatch(ctx context.Context, eventID string, batch int) error {
	if _, err := rc.drain(ctx, events.StreamStaged, events.OpenBatchConsumer(eventID, batch), events.OpenedID, nil,
		"event", eventID, "batch", batch+1); err != nil {
		return fmt.Errorf("rollout: release batch %d of %s: %w", batch+1, eventID, err)
	}
	return nil
}
