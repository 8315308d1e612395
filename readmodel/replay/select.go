package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
	"kvlive/internal/bus"
)

// Selection says which stored events to replay; every set field must match.
type Selection struct {
	EventID string
	// Since keeps events stored at or after it.
	Since time.Time
	// FromSeq and ToSeq bound the stream sequence (ToSeq 0: to the end).
	FromSeq, ToSeq uint64
	// Object keeps changes of that object and switches from or to it.
	Object *events.Ref
}

// Stored is one event read back from the events stream.
type Stored struct {
	Seq     uint64
	Time    time.Time
	ID      string
	Type    string
	Headers nats.Header
	// Exactly one of Change, Switch, Undo and Restart is set.
	Change  *events.Changed
	Switch  *events.SwitchRequest
	Undo    *events.UndoRequest
	Restart *events.RestartRequest
}

// Object is what the event moves VMs to (an undo: none).
func (s Stored) Object() events.Ref {
	switch {
	case s.Change != nil:
		return s.Change.Object
	case s.Switch != nil:
		return s.Switch.To
	case s.Restart != nil:
		return s.Restart.Object
	}
	return events.Ref{}
}

// Select reads the events stream from the selection's start and returns the
// matching events in stream order. Messages that do not decode are skipped:
// the planner dead-lettered them when they arrived.
func Select(ctx context.Context, js jetstream.JetStream, sel Selection) ([]Stored, error) {
	stream, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	last := info.State.LastSeq
	if sel.ToSeq != 0 && sel.ToSeq < last {
		last = sel.ToSeq
	}
	if info.State.Msgs == 0 || last < max(sel.FromSeq, info.State.FirstSeq) {
		return nil, nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case sel.FromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, sel.FromSeq
	case !sel.Since.IsZero():
		since := sel.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	var out []Stored
	err = bus.Scan(ctx, js, events.StreamEvents, cfg, func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil || md.Sequence.Stream > last {
			return
		}
		if s, ok := decode(msg, md); ok && sel.matches(s) {
			out = append(out, s)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return out, nil
}

func decode(msg jetstream.Msg, md *jetstream.MsgMetadata) (Stored, bool) {
	env, err := events.Parse(msg.Data())
	if err != nil {
		return Stored{}, false
	}
	s := Stored{Seq: md.Sequence.Stream, Time: md.Timestamp, ID: env.ID, Type: env.Type, Headers: msg.Headers()}
	switch env.Type {
	case events.TypeInstancetypeChanged, events.TypePreferenceChanged:
		s.Change = &events.Changed{}
		err = env.Into(s.Change)
	case events.TypeSwitchRequested:
		s.Switch = &events.SwitchRequest{}
		err = env.Into(s.Switch)
	case events.TypeUndoRequested:
		s.Undo = &events.UndoRequest{}
		err = env.Into(s.Undo)
	case events.TypeRestartRequested:
		s.Restart = &events.RestartRequest{}
		err = env.Into(s.Restart)
	default:
		return s, false
	}
	return s, err == nil
}

func (sel Selection) matches(s Stored) bool {
	switch {
	case sel.EventID != "" && s.ID != sel.EventID:
		return false
	case (s.Undo != nil || s.Restart != nil) && sel.EventID == "":
		return false // read by its id alone: a replay of many events never restarts VMs nor undoes a rollout
	case !sel.Since.IsZero() && s.Time.Before(sel.Since):
		return false
	case sel.Object != nil && s.Change != nil:
		return s.Change.Object == *sel.Object
	case sel.Object != nil && s.Switch != nil:
		return s.Switch.From == *sel.Object || s.Switch.To == *sel.Object
	case sel.Object != nil:
		return false
	}
	return true
}
