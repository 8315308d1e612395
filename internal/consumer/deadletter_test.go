package consumer

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

const smallPayload = 4 << 10

func TestDeadLetterTruncatesBodyToMaxPayload(t *testing.T) {
	js, nc := startJetStream(t, smallPayload, false)
	if nc.MaxPayload() != smallPayload {
		t.Fatalf("server max payload %d, want %d", nc.MaxPayload(), smallPayload)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 640) // 10 KiB
	msg := newFakeMsg(1, 77, string(body))
	msg.hdr.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

	r, m, _ := testRuntime(t, js, nil)
	r.Settle(context.Background(), msg, r.Delivery(msg), Poison("too big to plan"))
	// Dead-lettering again (a redelivery whose term failed) stores nothing new.
	if err := DeadLetter(context.Background(), js, events.ConsumerPlanner, msg, "too big to plan"); err != nil {
		t.Fatal(err)
	}

	if m.get(OutcomeDeadLetter) != 1 || msg.count("term-reason") != 1 {
		t.Fatalf("settled %+v, calls %+v", m.settled, msg.recorded())
	}
	dead := deadLetters(t, js)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if got := d.Header.Get(events.HeaderDeadTruncated); got != strconv.Itoa(len(body)) {
		t.Errorf("%s = %q, want the original size %d", events.HeaderDeadTruncated, got, len(body))
	}
	for k, want := range map[string]string{
		events.HeaderDeadReason:         "too big to plan",
		events.HeaderDeadStream:         events.StreamEvents,
		events.HeaderDeadSequence:       "77",
		events.HeaderDeadSubject:        msg.subject,
		"traceparent":                   msg.hdr.Get("traceparent"),
		events.HeaderDeadHeadersDropped: "",
		jetstream.MsgIDHeader:           "dead/" + events.StreamEvents + "/77",
	} {
		if got := d.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if len(d.Data) == 0 || len(d.Data) >= smallPayload || !bytes.HasPrefix(body, d.Data) {
		t.Errorf("stored body of %d bytes, want a non-empty prefix of the original under %d bytes", len(d.Data), smallPayload)
	}
	// Headers are encoded smaller than headerSize estimates, so the body
	// is cut at most by the estimate's slack: most of the room is used.
	if room := smallPayload - headerSize(d.Header); int64(len(d.Data)) > room || int64(len(d.Data)) < room-64 {
		t.Errorf("stored body of %d bytes, want close to the %d bytes of room", len(d.Data), room)
	}
}

func TestDeadLetterDropsOriginalHeadersThatDoNotFit(t *testing.T) {
	js, _ := startJetStream(t, smallPayload, false)
	msg := newFakeMsg(1, 5, "small body")
	msg.hdr.Set("X-Huge", strings.Repeat("h", smallPayload-100))
	if err := DeadLetter(context.Background(), js, events.ConsumerApplier, msg, "bad plan"); err != nil {
		t.Fatal(err)
	}
	d := deadLetters(t, js)[0]
	if d.Header.Get("X-Huge") != "" || d.Header.Get(events.HeaderDeadHeadersDropped) != "true" ||
		d.Header.Get(events.HeaderDeadTruncated) != "" || string(d.Data) != "small body" ||
		d.Header.Get(events.HeaderDeadReason) != "bad plan" || d.Header.Get(events.HeaderDeadSequence) != "5" {
		t.Errorf("dead letter headers %v body %q", d.Header, d.Data)
	}
}

// shrinkingJS refuses the first publish as nats.go does when the server's
// max payload shrank between the size check and the publish.
type shrinkingJS struct {
	jetstream.JetStream
	mu    sync.Mutex
	sizes []int
}

func (s *shrinkingJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(m.Data))
	first := len(s.sizes) == 1
	s.mu.Unlock()
	if first {
		return nil, nats.ErrMaxPayload
	}
	return s.JetStream.PublishMsg(ctx, m, opts...)
}

func TestDeadLetterRetriesSmallerAfterErrMaxPayload(t *testing.T) {
	real, _ := startJetStream(t, smallPayload, false)
	js := &shrinkingJS{JetStream: real}
	body := bytes.Repeat([]byte("x"), 3*smallPayload)
	if err := DeadLetter(context.Background(), js, events.ConsumerApplier, newFakeMsg(2, 9, string(body)), "r"); err != nil {
		t.Fatal(err)
	}
	if len(js.sizes) != 2 || js.sizes[1] > js.sizes[0]-retrySlack {
		t.Fatalf("publish body sizes %v, want a second, %d bytes smaller", js.sizes, retrySlack)
	}
	if d := deadLetters(t, real); len(d) != 1 || d[0].Header.Get(events.HeaderDeadTruncated) != strconv.Itoa(len(body)) {
		t.Fatalf("dead letters %+v", d)
	}
}

func TestDeadLetterWithoutMetadataHasNoMsgID(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	msg := newFakeMsg(1, 1, "x")
	msg.mdErr = errors.New("core NATS message")
	if err := DeadLetter(context.Background(), js, events.ConsumerPlanner, msg, "r"); err != nil {
		t.Fatal(err)
	}
	d := deadLetters(t, js)[0]
	if d.Header.Get(jetstream.MsgIDHeader) != "" || d.Header.Get(events.HeaderDeadStream) != "" || d.Header.Get(events.HeaderDeadReason) != "r" {
		t.Errorf("headers %v", d.Header)
	}
}

func TestClipReason(t *testing.T) {
	if got := clipReason("short"); got != "short" {
		t.Errorf("clipReason(short) = %q", got)
	}
	long := strings.Repeat("é", maxReasonLen) // 2 bytes a rune
	got := clipReason(long)
	if len(got) > maxReasonLen || !strings.HasSuffix(got, "...") || !utf8.ValidString(got) {
		t.Errorf("clipReason cut to %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}
