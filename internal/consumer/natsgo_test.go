package consumer

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// The tests in this file pin down nats.go behaviour the runtime relies on,
// so that an upgrade that changes it fails here rather than in production.

// TestNatsGoRejectsOversizePublishClientSide: nats.go refuses a message
// larger than the server's max payload before sending it, with
// nats.ErrMaxPayload, and the connection stays up (the server would
// otherwise close it).
func TestNatsGoRejectsOversizePublishClientSide(t *testing.T) {
	js, nc := startJetStream(t, smallPayload, false)
	big := bytes.Repeat([]byte("x"), smallPayload+1)
	if err := nc.Publish(events.DeadLetterSubject("test", "kvlive.test"), big); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("core publish: %v, want ErrMaxPayload", err)
	}
	m := nats.NewMsg(events.DeadLetterSubject("test", "kvlive.test"))
	m.Header.Set("X", "y")
	m.Data = big[:smallPayload-10] // fits alone, not with its headers
	if _, err := js.PublishMsg(context.Background(), m); !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("JetStream publish with headers: %v, want ErrMaxPayload", err)
	}
	if !nc.IsConnected() {
		t.Error("connection lost after an oversize publish")
	}
}

// TestNatsGoSettlesAfterIteratorStop: a message fetched before the iterator
// was stopped can still be heartbeated and acked (the drain relies on
// that); once acked, InProgress reports ErrMsgAlreadyAckd.
func TestNatsGoSettlesAfterIteratorStop(t *testing.T) {
	js, _ := startJetStream(t, 0, false)
	cons := workStream(t, js, 30*time.Second)
	publish(t, js, "one")
	it, err := cons.Messages(jetstream.PullMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	it.Stop()
	if _, err := it.Next(); !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
		t.Errorf("Next after Stop: %v, want ErrMsgIteratorClosed", err)
	}
	if err := msg.InProgress(); err != nil {
		t.Errorf("InProgress after Stop: %v", err)
	}
	if err := msg.InProgress(); err != nil {
		t.Errorf("second InProgress: %v", err)
	}
	if err := msg.Ack(); err != nil {
		t.Errorf("Ack after Stop: %v", err)
	}
	if err := msg.InProgress(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("InProgress after Ack: %v, want ErrMsgAlreadyAckd", err)
	}
	eventually(t, 5*time.Second, "the ack to reach the server", func() bool {
		return consumerInfo(t, cons).AckFloor.Stream == 1
	})
}
