package events

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Conflict reports a write to a stream or a KV bucket that lost a
// compare-and-set: it expected a last sequence (a key's revision, or no
// key) that another write changed first. A single-replica stream reports
// it as error 10071, which jetstream.ErrKeyExists matches by its code; a
// replicated (R3) one as 10164, which it does not. nats.go wraps 10164 in
// ErrKeyRevisionMismatch on Update and in ErrKeyExists on Create, but not
// when Create finds the key deleted and loses re-creating it, nor on a
// publish that expects a last sequence per subject: every compare-and-set
// in kvlive asks this, so a cluster's conflict is a conflict, not an error.
func Conflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
