package events

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetter copies msg, with its headers, into the dead-letter stream under
// the stage's subject together with the reason and where it came from, then
// terminates it so it is never redelivered. Nothing is lost: the copy keeps
// the original body byte for byte.
func DeadLetter(ctx context.Context, js jetstream.JetStream, stage string, msg jetstream.Msg, reason string) error {
	dead := nats.NewMsg(DeadLetterSubject(stage))
	dead.Data = msg.Data()
	for k, vs := range msg.Headers() {
		if k == jetstream.MsgIDHeader {
			continue
		}
		for _, v := range vs {
			dead.Header.Add(k, v)
		}
	}
	dead.Header.Set(HeaderDeadReason, reason)
	dead.Header.Set(HeaderDeadSubject, msg.Subject())
	opts := []jetstream.PublishOpt{}
	if md, err := msg.Metadata(); err == nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dead.Header.Set(HeaderDeadStream, md.Stream)
		dead.Header.Set(HeaderDeadSequence, seq)
		opts = append(opts, jetstream.WithMsgID("dead/"+md.Stream+"/"+seq))
	}
	if _, err := js.PublishMsg(ctx, dead, opts...); err != nil {
		return fmt.Errorf("events: dead-letter %s: %w", msg.Subject(), err)
	}
	if err := msg.TermWithReason(reason); err != nil {
		return fmt.Errorf("events: terminate %s: %w", msg.Subject(), err)
	}
	return nil
}
