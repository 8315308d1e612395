package events

import (
	"strconv"
	"strings"
)

// Subjects. Namespaces are DNS labels, so they are safe subject tokens; VM
// and object names may hold dots, so they travel in the body, never the subject.
const (
	subjectEvents   = "kvlive.events"
	subjectPlans    = "kvlive.plans"
	subjectOutcomes = "kvlive.outcomes"
	subjectDLQ      = "kvlive.dlq"
	subjectSpans    = "kvlive.spans"
	subjectHeld     = "kvlive.held"
)

// ChangedSubject is where a change of an object of kind is published:
// kvlive.events.changed.<kind in lower case>.
func ChangedSubject(kind string) string {
	return subjectEvents + ".changed." + strings.ToLower(kind)
}

// SwitchSubject is where switch requests are published.
func SwitchSubject() string { return subjectEvents + ".switch" }

// PlanSubject is where plans for VMs of namespace are published.
func PlanSubject(namespace string) string { return subjectPlans + "." + namespace }

// OutcomeSubject is where outcomes for VMs of namespace are published.
func OutcomeSubject(namespace string) string { return subjectOutcomes + "." + namespace }

// DeadLetterSubject is where the stage puts a message it cannot process.
func DeadLetterSubject(stage string) string { return subjectDLQ + "." + stage }

// HeldSubject is where the applier parks a plan for a VM of namespace
// while its rollout is paused.
func HeldSubject(namespace string) string { return subjectHeld + "." + namespace }

// SpanSubject is where finished spans are kept when no OTLP exporter is set.
func SpanSubject(traceID string) string { return subjectSpans + "." + traceID }

// EventID is the id, and Nats-Msg-Id, of the change event for generation of
// the object with uid: a watcher that emits it twice is deduplicated.
func EventID(kind, uid string, generation int64) string {
	return kind + "/" + uid + "/" + strconv.FormatInt(generation, 10)
}

// SwitchEventID is the id of a switch request.
func SwitchEventID(requestID string) string { return "switch/" + requestID }

// PlanID is the id of the plan for one VM in one event.
func PlanID(eventID, vmUID string) string { return eventID + "/" + vmUID }

// OutcomeID is the id of the outcome of one attempt at one VM's plan.
func OutcomeID(eventID, vmUID string, attempt int) string {
	return eventID + "/" + vmUID + "/" + strconv.Itoa(attempt)
}
