package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// maxReasonLen bounds a reason, which often quotes an error of unknown
// length, so that it can neither crowd the body out of a dead letter nor
// make the term request itself exceed the max payload.
const maxReasonLen = 1024

// retrySlack is how much smaller than the server's max payload a dead letter
// is made after the server still refused it: the limit changed under us (a
// reconnect to a server with a smaller max_payload).
const retrySlack = 512

// deadPrefix marks the headers a dead letter adds; copies of such headers
// from the original are left out so they cannot contradict the new ones.
const deadPrefix = "Kvlive-Dead-"

// natsPrefix marks headers that steer JetStream when publishing
// (Nats-Msg-Id, Nats-Expected-*, Nats-Rollup, Nats-TTL...): copied from the
// original they would apply to the dead-letter stream, and could make the
// copy fail or vanish.
const natsPrefix = "Nats-"

// DeadLetter stores a copy of msg, with its headers, in the dead-letter
// stream under events.DeadLetterSubject(stage, msg.Subject()), together with reason and
// where msg came from. It does not terminate msg: Settle does that once the
// copy is stored. The copy's Msg-Id is dead/<stream>/<seq>, so dead-lettering
// the same message again within the stream's duplicate window stores nothing
// new.
//
// A copy that would exceed the server's max payload keeps its headers but has
// its body cut to fit and carries events.HeaderDeadTruncated with the
// original body size; if even the headers do not fit, the original's headers
// are dropped too (events.HeaderDeadHeadersDropped).
func DeadLetter(ctx context.Context, js jetstream.JetStream, stage string, msg jetstream.Msg, reason string) error {
	reason = clipReason(reason)
	dead, err := deadCopy(stage, msg, reason, maxPayload(js, 0))
	if err == nil {
		_, err = js.PublishMsg(ctx, dead)
		if errors.Is(err, nats.ErrMaxPayload) {
			dead, err = deadCopy(stage, msg, reason, maxPayload(js, retrySlack))
			if err == nil {
				_, err = js.PublishMsg(ctx, dead)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("consumer: dead-letter %s to %s: %w", msg.Subject(), events.DeadLetterSubject(stage, msg.Subject()), err)
	}
	return nil
}

// maxPayload is the connection's limit less slack, or 0 (no limit known).
func maxPayload(js jetstream.JetStream, slack int64) int64 {
	nc := js.Conn()
	if nc == nil {
		return 0
	}
	return max(nc.MaxPayload()-slack, 0)
}

// deadCopy builds the dead letter of msg, cut down to limit bytes of headers
// and body when limit is positive.
func deadCopy(stage string, msg jetstream.Msg, reason string, limit int64) (*nats.Msg, error) {
	dead := nats.NewMsg(events.DeadLetterSubject(stage, msg.Subject()))
	for k, vs := range msg.Headers() {
		if hasPrefixFold(k, natsPrefix) || hasPrefixFold(k, deadPrefix) {
			continue
		}
		for _, v := range vs {
			dead.Header.Add(k, v)
		}
	}
	dead.Header.Set(events.HeaderDeadReason, reason)
	dead.Header.Set(events.HeaderDeadSubject, msg.Subject())
	if md, err := msg.Metadata(); err == nil && md != nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		dead.Header.Set(events.HeaderDeadStream, md.Stream)
		dead.Header.Set(events.HeaderDeadSequence, seq)
		// Set directly rather than with jetstream.WithMsgID so that the
		// size check below counts it.
		dead.Header.Set(jetstream.MsgIDHeader, "dead/"+md.Stream+"/"+seq)
	}
	body := msg.Data()
	dead.Data = body
	if limit <= 0 || headerSize(dead.Header)+int64(len(body)) <= limit {
		return dead, nil
	}
	dead.Header.Set(events.HeaderDeadTruncated, strconv.Itoa(len(body)))
	room := limit - headerSize(dead.Header)
	if room < 0 {
		dropOriginalHeaders(dead.Header)
		dead.Header.Set(events.HeaderDeadHeadersDropped, "true")
		room = limit - headerSize(dead.Header)
		if room < 0 {
			return nil, fmt.Errorf("dead-letter headers alone exceed the max payload of %d bytes", limit)
		}
	}
	if room >= int64(len(body)) {
		dead.Header.Del(events.HeaderDeadTruncated)
		return dead, nil
	}
	dead.Data = body[:room]
	return dead, nil
}

// headerSize is an upper bound of the size of h on the wire: nats.go writes
// a "NATS/1.0" line, "key: value" lines and a blank line, all CRLF-ended, and
// only ever trims values.
func headerSize(h nats.Header) int64 {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return int64(n)
}

func dropOriginalHeaders(h nats.Header) {
	for k := range h {
		if !strings.HasPrefix(k, deadPrefix) && k != jetstream.MsgIDHeader {
			delete(h, k)
		}
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// clipReason cuts reason to maxReasonLen bytes, on a rune boundary.
func clipReason(reason string) string {
	if len(reason) <= maxReasonLen {
		return reason
	}
	const ellipsis = "..."
	n := maxReasonLen - len(ellipsis)
	for n > 0 && !utf8.RuneStart(reason[n]) {
		n--
	}
	return reason[:n] + ellipsis
}
