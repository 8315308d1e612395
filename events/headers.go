package events

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header names kvlive sets on its messages.
const (
	// HeaderContentType is the message body's media type.
	HeaderContentType = "Content-Type"
	// HeaderCEType repeats the CloudEvents type so tools can filter without decoding.
	HeaderCEType = "ce-type"
	// ReasonNotPlanned starts the dead-letter reason of a plan the applier
	// refused as none kvlive's planner made: it is no VM of the rollout's,
	// and the rollout's accounting leaves it out.
	ReasonNotPlanned = "not a plan of kvlive's planner"
	// HeaderDeadReason is why a message was dead-lettered.
	HeaderDeadReason = "Kvlive-Dead-Reason"
	// HeaderDeadSubject is the subject a dead-lettered message was read from.
	HeaderDeadSubject = "Kvlive-Dead-Subject"
	// HeaderTraceRoot on a plan asks the applier to root the VM's span in a
	// trace of its own, linked to the plan span, because the event reaches
	// more VMs than one trace should hold.
	HeaderTraceRoot = "Kvlive-Trace-Root"
	// HeaderReplayOf on a replayed event names the event it replays.
	HeaderReplayOf = "Kvlive-Replay-Of"
	// HeaderRetryOf on a retry names the event whose failed VMs it retries.
	HeaderRetryOf = "Kvlive-Retry-Of"
	// HeaderUndoOf on an undo request names the rollout it undoes.
	HeaderUndoOf = "Kvlive-Undo-Of"
	// HeaderDeadStream and HeaderDeadSequence locate the original message.
	HeaderDeadStream   = "Kvlive-Dead-Stream"
	HeaderDeadSequence = "Kvlive-Dead-Sequence"
)

// NewMsg builds a message for subject carrying an encoded envelope, with a
// Nats-Msg-Id of id so JetStream drops a re-publish inside the duplicate window.
func NewMsg(subject, id, typ string, body []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(HeaderContentType, ContentType)
	m.Header.Set(HeaderCEType, typ)
	return m
}

// HeaderCarrier adapts nats.Header to OpenTelemetry's TextMapCarrier. Keys
// are stored exactly as the propagator gives them (W3C's lower-case
// `traceparent`, `tracestate`): nats.Header is case-sensitive and
// propagation.HeaderCarrier would canonicalise them to `Traceparent`.
type HeaderCarrier nats.Header

// Get returns the first value of key, matching it without regard to case so
// messages from canonicalising producers are still read.
func (c HeaderCarrier) Get(key string) string {
	if v := nats.Header(c).Get(key); v != "" {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Set stores value under key as given.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Headers of a dead letter whose copy did not fit the server's max payload.
const (
	// HeaderDeadTruncated is set on a dead letter whose body was cut short so
	// that the copy fits the server's max payload; its value is the original
	// body's size in bytes. Such a letter cannot be retried as it is: the
	// original is only in its source stream, at HeaderDeadStream and
	// HeaderDeadSequence, as long as that stream keeps it.
	HeaderDeadTruncated = "Kvlive-Dead-Truncated"
	// HeaderDeadHeadersDropped is set, to "true", on a dead letter that had
	// to leave out the original's headers to fit the server's max payload.
	HeaderDeadHeadersDropped = "Kvlive-Dead-Headers-Dropped"
)

// CopyHeaders copies every header of src into dst but the message id,
// which each copy of a message (a plan held, staged or released) sets.
func CopyHeaders(dst, src nats.Header) {
	for k, vs := range src {
		if k == jetstream.MsgIDHeader {
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}
