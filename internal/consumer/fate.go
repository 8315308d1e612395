package consumer

import (
	"errors"
	"fmt"
)

// fateKind starts at 1 so that a zero Fate, which a handler can return by
// forgetting to set one, is recognisable and never mistaken for Done.
type fateKind uint8

const (
	kindNone fateKind = iota
	kindDone
	kindRetry
	kindPoison
	// kindInterrupted is a Retry that happened while the runtime shut down:
	// the failure says nothing about the message, so it must not use up the
	// delivery budget or end in the dead-letter stream.
	kindInterrupted
)

// errUnspecified stands in for the nil error of Retry(nil), so that logs and
// dead-letter reasons still say something.
var errUnspecified = errors.New("retry requested without an error")

// errNoFate is the cause given to a zero Fate, which Settle treats as a Retry
// so that a forgetful handler loses nothing.
var errNoFate = errors.New("handler returned no fate")

// Fate is what a handler decided for one message. Build one with Done, Retry
// or Poison; the zero Fate is treated as a Retry.
type Fate struct {
	kind   fateKind
	err    error
	reason string
}

// Done reports the message processed: it is acked.
func Done() Fate { return Fate{kind: kindDone} }

// Retry reports a transient failure: the message is nak'ed with a growing
// delay, and on its last delivery dead-lettered with the reason
// "gave up after N deliveries: <err>".
func Retry(err error) Fate {
	if err == nil {
		err = errUnspecified
	}
	return Fate{kind: kindRetry, err: err}
}

// Poison reports a message that can never be processed (it does not decode,
// it names something that cannot exist): it is dead-lettered with reason at
// once, whatever the delivery.
func Poison(reason string) Fate {
	if reason == "" {
		reason = "poison message"
	}
	return Fate{kind: kindPoison, reason: reason}
}

// interrupted turns a Retry into a plain nak: see kindInterrupted.
func interrupted(f Fate) Fate {
	err := f.err
	if err == nil {
		err = errNoFate
	}
	return Fate{kind: kindInterrupted, err: err}
}

// IsDone reports whether the handler finished the message.
func (f Fate) IsDone() bool { return f.kind == kindDone }

// Err is the cause of a Retry (or of a zero Fate), nil for other fates.
func (f Fate) Err() error {
	switch f.kind {
	case kindRetry, kindInterrupted:
		return f.err
	case kindNone:
		return errNoFate
	}
	return nil
}

// Reason is the reason given to Poison, "" for other fates.
func (f Fate) Reason() string { return f.reason }

// String names the fate and its cause, for logs and test failures.
func (f Fate) String() string {
	switch f.kind {
	case kindDone:
		return "done"
	case kindRetry:
		return fmt.Sprintf("retry: %v", f.err)
	case kindPoison:
		return "poison: " + f.reason
	case kindInterrupted:
		return fmt.Sprintf("interrupted: %v", f.err)
	}
	return "none"
}
