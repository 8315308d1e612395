package events

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Subjects. Namespaces are DNS labels, so they are safe subject tokens; VM
// and object names may hold dots, so they travel in the body, never the
// subject. Plans, outcomes and held plans carry their event as the last
// token (EventToken), so whatever concerns one event (its plans in flight,
// its outcomes, its held plans, its dead letters) is read by subject
// filter instead of scanning a whole stream.
const (
	subjectEvents   = "kvlive.events"
	subjectPlans    = "kvlive.plans"
	subjectOutcomes = "kvlive.outcomes"
	subjectDLQ      = "kvlive.dlq"
	subjectSpans    = "kvlive.spans"
	subjectHeld     = "kvlive.held"
	subjectStaged   = "kvlive.staged"
)

// EventToken encodes an event id as one subject token: the id itself,
// readable, with the bytes a token cannot hold ('.', '*', '>', '%',
// whitespace and controls) percent-encoded. kvlive's own ids
// (<kind>/<uid>/<generation>, switch/<id>) come through unchanged.
func EventToken(eventID string) string {
	var b strings.Builder
	for i := 0; i < len(eventID); i++ {
		c := eventID[i]
		if c <= ' ' || c == '.' || c == '*' || c == '>' || c == '%' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	if b.Len() == 0 {
		return "%00"
	}
	return b.String()
}

// EventOfToken decodes a token EventToken made.
func EventOfToken(token string) (string, error) {
	id, err := url.PathUnescape(token)
	if err != nil {
		return "", fmt.Errorf("events: subject token %q: %w", token, err)
	}
	return id, nil
}

// lastToken is a subject's last token.
func lastToken(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// EventOfSubject is the event a plan, outcome or held plan subject names.
func EventOfSubject(subject string) (string, error) { return EventOfToken(lastToken(subject)) }

// ChangedSubject is where a change of an object of kind is published:
// kvlive.events.changed.<kind in lower case>.
func ChangedSubject(kind string) string {
	return subjectEvents + ".changed." + strings.ToLower(kind)
}

// SwitchSubject is where switch requests are published.
func SwitchSubject() string { return subjectEvents + ".switch" }

// PlanSubject is where the plan for a VM of namespace in eventID is
// published: kvlive.plans.<namespace>.<event>.
func PlanSubject(namespace, eventID string) string {
	return subjectPlans + "." + namespace + "." + EventToken(eventID)
}

// IsPlanSubject reports whether subject is a plan's (PlanSubject).
func IsPlanSubject(subject string) bool { return strings.HasPrefix(subject, subjectPlans+".") }

// PlansOf filters the plans of eventID in every namespace; every plan when
// eventID is empty.
func PlansOf(eventID string) string {
	if eventID == "" {
		return subjectPlans + ".>"
	}
	return subjectPlans + ".*." + EventToken(eventID)
}

// OutcomeSubject is where outcomes for VMs of namespace in eventID are
// published: kvlive.outcomes.<namespace>.<event>.
func OutcomeSubject(namespace, eventID string) string {
	return subjectOutcomes + "." + namespace + "." + EventToken(eventID)
}

// OutcomesOf filters the outcomes of eventID, in namespace or, when it is
// empty, in every namespace.
func OutcomesOf(eventID, namespace string) string {
	if namespace == "" {
		namespace = "*"
	}
	return subjectOutcomes + "." + namespace + "." + EventToken(eventID)
}

// OutcomesIn filters every outcome in namespace ("" for all).
func OutcomesIn(namespace string) string {
	if namespace == "" {
		return subjectOutcomes + ".>"
	}
	return subjectOutcomes + "." + namespace + ".*"
}

// DeadLetterSubject is where stage puts a message read from original it
// cannot process: kvlive.dlq.<stage>.<original without "kvlive.">, so a
// dead plan keeps its event token (kvlive.dlq.applier.plans.<ns>.<event>).
func DeadLetterSubject(stage, original string) string {
	rest := strings.TrimPrefix(original, "kvlive.")
	if rest == "" {
		rest = "unknown"
	}
	return subjectDLQ + "." + stage + "." + rest
}

// DeadEvents filters the dead-lettered events (change events and switch
// requests a stage refused), of any stage.
func DeadEvents() string {
	return subjectDLQ + ".*." + strings.TrimPrefix(subjectEvents, "kvlive.") + ".>"
}

// DeadLettersOf filters the dead plans of eventID, of any stage, read from
// the plans, held or staged streams (kvlive.dlq.<stage>.<plans|held|
// staged>.<namespace or batch>.<event>; a dead change event's subject ends
// in its kind, which is no event token).
func DeadLettersOf(eventID string) string {
	return subjectDLQ + ".*.*.*." + EventToken(eventID)
}

// RetrySubject is where `kvlive dlq retry` sends a dead letter read from
// original: where it came from, except that a held plan goes to the
// applier (kvlive.plans.<namespace>.<event>), which holds it again while
// its rollout is paused; sent back to the held stream, it would wait for a
// resume that already happened.
func RetrySubject(original string) string {
	if rest, ok := strings.CutPrefix(original, subjectHeld+"."); ok {
		return subjectPlans + "." + rest
	}
	return original
}

// StageOfDeadLetter is the stage that dead-lettered a message stored on subject.
func StageOfDeadLetter(subject string) string {
	rest := strings.TrimPrefix(subject, subjectDLQ+".")
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// HeldSubject is where the applier parks the plan for a VM of namespace
// while eventID's rollout is paused: kvlive.held.<namespace>.<event>.
func HeldSubject(namespace, eventID string) string {
	return subjectHeld + "." + namespace + "." + EventToken(eventID)
}

// HeldOf filters the held plans of eventID ("" for every event).
func HeldOf(eventID string) string {
	if eventID == "" {
		return subjectHeld + ".>"
	}
	return subjectHeld + ".*." + EventToken(eventID)
}

// StagedSubject is where the planner stages the plans of a batched
// rollout's later batches until their turn: kvlive.staged.<batch>.<event>.
func StagedSubject(batch int, eventID string) string {
	return subjectStaged + "." + strconv.Itoa(batch) + "." + EventToken(eventID)
}

// StagedOf filters eventID's staged plans of every batch ("" for every
// event).
func StagedOf(eventID string) string {
	if eventID == "" {
		return subjectStaged + ".>"
	}
	return subjectStaged + ".*." + EventToken(eventID)
}

// BatchOfStagedSubject is the batch a staged subject names.
func BatchOfStagedSubject(subject string) (int, error) {
	rest := strings.TrimPrefix(subject, subjectStaged+".")
	n, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
	if err != nil || rest == subject {
		return 0, fmt.Errorf("events: %q is not a staged subject", subject)
	}
	return n, nil
}

// SpanSubject is where finished spans are kept when no OTLP exporter is set.
func SpanSubject(traceID string) string { return subjectSpans + "." + traceID }

// EventID is the id, and Nats-Msg-Id, of the change event for generation of
// the object with uid: a watcher that emits it twice is deduplicated.
func EventID(kind, uid string, generation int64) string {
	return EventIDPrefix(kind, uid) + strconv.FormatInt(generation, 10)
}

// EventIDPrefix is what the ids of every generation's event of the object
// kind/uid start with; the generation follows it.
func EventIDPrefix(kind, uid string) string { return kind + "/" + uid + "/" }

// SwitchEventID is the id of a switch request.
func SwitchEventID(requestID string) string { return "switch/" + requestID }

// PlanID is the id of the plan for one VM in one event.
func PlanID(eventID, vmUID string) string { return eventID + "/" + vmUID }

// OutcomeID is the id of the outcome of one attempt at one VM's plan.
func OutcomeID(eventID, vmUID string, attempt int) string {
	return eventID + "/" + vmUID + "/" + strconv.Itoa(attempt)
}
