package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/printer"
	"kvlive/rollout"
)

// Letter is one dead-lettered message.
type Letter struct {
	Seq     uint64      `json:"seq"`
	Time    time.Time   `json:"time"`
	Stage   string      `json:"stage"`
	Subject string      `json:"subject"`
	Reason  string      `json:"reason"`
	Headers nats.Header `json:"headers"`
	Data    []byte      `json:"data"`
}

// Store reads and drains the dead-letter stream.
type Store struct {
	JetStream jetstream.JetStream
}

func (s Store) stream(ctx context.Context) (jetstream.Stream, error) {
	st, err := s.JetStream.Stream(ctx, events.StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return st, nil
}

// List returns every dead letter, oldest first.
func (s Store) List(ctx context.Context) ([]Letter, error) {
	st, err := s.stream(ctx)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	var out []Letter
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		l, err := s.Show(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged one by one
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Show returns the dead letter with stream sequence seq.
func (s Store) Show(ctx context.Context, seq uint64) (Letter, error) {
	st, err := s.stream(ctx)
	if err != nil {
		return Letter{}, err
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		return Letter{}, fmt.Errorf("dlq: message %d: %w", seq, err)
	}
	return Letter{
		Seq: m.Sequence, Time: m.Time, Stage: events.StageOfDeadLetter(m.Subject),
		Subject: m.Header.Get(events.HeaderDeadSubject), Reason: m.Header.Get(events.HeaderDeadReason),
		Headers: m.Header, Data: m.Data,
	}, nil
}

// Retry publishes the dead letter again to the subject it came from (a
// held plan: to the applier, events.RetrySubject), with its original
// headers, then removes it from the dead-letter stream. A
// message that fails again is dead-lettered again, with the new reason.
func (s Store) Retry(ctx context.Context, seq uint64) error {
	l, err := s.Show(ctx, seq)
	if err != nil {
		return err
	}
	if l.Subject == "" {
		return fmt.Errorf("dlq: message %d does not say where it came from", seq)
	}
	if size := l.Headers.Get(events.HeaderDeadTruncated); size != "" {
		return fmt.Errorf("dlq: message %d was stored truncated (the original had %s bytes), so it cannot be sent again as it is; "+
			"the original is message %s of stream %s while that stream keeps it", seq, size,
			l.Headers.Get(events.HeaderDeadSequence), l.Headers.Get(events.HeaderDeadStream))
	}
	to := events.RetrySubject(l.Subject)
	if err := s.reopen(ctx, to); err != nil {
		return fmt.Errorf("dlq: retry %d: %w", seq, err)
	}
	msg := nats.NewMsg(to)
	msg.Data = l.Data
	for k, vs := range l.Headers {
		if strings.HasPrefix(k, "Kvlive-Dead-") || strings.HasPrefix(k, "Nats-") {
			continue
		}
		for _, v := range vs {
			msg.Header.Add(k, v)
		}
	}
	if _, err := s.JetStream.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("dlq: retry %d to %s: %w", seq, to, err)
	}
	return s.Purge(ctx, seq)
}

// reopen lets a plan sent back to subject through although its rollout
// settled (rollout.Store.Reopen): the operator asked for it.
func (s Store) reopen(ctx context.Context, subject string) error {
	if !events.IsPlanSubject(subject) {
		return nil
	}
	eventID, err := events.EventOfSubject(subject)
	if err != nil {
		return nil // no event of kvlive's: the applier dead-letters it again
	}
	store, err := rollout.Open(ctx, s.JetStream)
	if err != nil {
		return err
	}
	return store.Reopen(ctx, eventID, time.Now())
}

// PurgeAll removes every dead letter and returns how many there were.
func (s Store) PurgeAll(ctx context.Context) (uint64, error) {
	st, err := s.stream(ctx)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("dlq: purge: %w", err)
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	if err := st.Purge(ctx); err != nil {
		return 0, fmt.Errorf("dlq: purge: %w", err)
	}
	return info.State.Msgs, nil
}

// Purge removes one dead letter, or with seq 0 all of them.
func (s Store) Purge(ctx context.Context, seq uint64) error {
	st, err := s.stream(ctx)
	if err != nil {
		return err
	}
	if seq == 0 {
		err = st.Purge(ctx)
	} else {
		err = st.DeleteMsg(ctx, seq)
	}
	if err != nil {
		return fmt.Errorf("dlq: purge: %w", err)
	}
	return nil
}

// WriteLetters prints dead letters as a table with their count (table or
// wide), or as data (json, yaml; an empty list is []).
func WriteLetters(w io.Writer, letters []Letter, f printer.Format, width int) error {
	if !f.Human() {
		return printer.WriteData(w, f, printer.NonNil(letters))
	}
	t := printer.NewTable(
		printer.Column{Name: "SEQ"},
		printer.Column{Name: "TIME"},
		printer.Column{Name: "STAGE"},
		printer.Column{Name: "SUBJECT", Fit: true, Min: 16},
		printer.Column{Name: "REASON", Fit: true},
	)
	for _, l := range letters {
		t.Append(strconv.FormatUint(l.Seq, 10), l.Time.Format(time.RFC3339), l.Stage, l.Subject, l.Reason)
	}
	if err := t.Write(w, f, width); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d dead letters\n", len(letters))
	return err
}

// WriteLetter prints one dead letter whole: where it came from, why, its
// headers (sorted) and its body; or as data (json, yaml).
func WriteLetter(w io.Writer, l Letter, f printer.Format) error {
	if !f.Human() {
		return printer.WriteData(w, f, l)
	}
	fmt.Fprintf(w, "seq:     %d\ntime:    %s\nstage:   %s\nsubject: %s\nreason:  %s\nheaders:\n", l.Seq, l.Time, l.Stage, l.Subject, l.Reason)
	for _, k := range slices.Sorted(maps.Keys(l.Headers)) {
		for _, v := range l.Headers[k] {
			fmt.Fprintf(w, "  %s: %s\n", k, v)
		}
	}
	_, err := fmt.Fprintf(w, "body:\n%s\n", l.Data)
	return err
}
