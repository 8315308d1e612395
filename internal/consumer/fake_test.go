package consumer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kvlive/events"
)

// call is one settle request a fakeMsg received.
type call struct {
	op     string // ack, nak, nak-delay, progress, term, term-reason, double-ack
	delay  time.Duration
	reason string
}

// fakeMsg is a jetstream.Msg that records how it was settled.
type fakeMsg struct {
	subject string
	data    []byte
	hdr     nats.Header
	md      *jetstream.MsgMetadata
	mdErr   error

	ackErr, nakErr, termErr, progressErr error

	mu    sync.Mutex
	calls []call
}

func newFakeMsg(attempt uint64, seq uint64, body string) *fakeMsg {
	return &fakeMsg{
		subject: "kvlive.events.test",
		data:    []byte(body),
		hdr:     nats.Header{},
		md: &jetstream.MsgMetadata{
			Sequence:     jetstream.SequencePair{Stream: seq, Consumer: seq},
			NumDelivered: attempt,
			Stream:       events.StreamEvents,
			Consumer:     events.ConsumerPlanner,
		},
	}
}

func (m *fakeMsg) record(c call, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, c)
	return err
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.mdErr != nil {
		return nil, m.mdErr
	}
	return m.md, nil
}
func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return m.hdr }
func (m *fakeMsg) Subject() string      { return m.subject }
func (m *fakeMsg) Reply() string        { return "$JS.ACK.fake" }
func (m *fakeMsg) Ack() error           { return m.record(call{op: "ack"}, m.ackErr) }
func (m *fakeMsg) DoubleAck(context.Context) error {
	return m.record(call{op: "double-ack"}, m.ackErr)
}
func (m *fakeMsg) Nak() error { return m.record(call{op: "nak"}, m.nakErr) }
func (m *fakeMsg) NakWithDelay(d time.Duration) error {
	return m.record(call{op: "nak-delay", delay: d}, m.nakErr)
}
func (m *fakeMsg) InProgress() error { return m.record(call{op: "progress"}, m.progressErr) }
func (m *fakeMsg) Term() error       { return m.record(call{op: "term"}, m.termErr) }
func (m *fakeMsg) TermWithReason(reason string) error {
	return m.record(call{op: "term-reason", reason: reason}, m.termErr)
}

func (m *fakeMsg) recorded() []call {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]call(nil), m.calls...)
}

func (m *fakeMsg) count(op string) int {
	n := 0
	for _, c := range m.recorded() {
		if c.op == op {
			n++
		}
	}
	return n
}

// countMetrics counts what the runtime reports.
type countMetrics struct {
	mu       sync.Mutex
	settled  map[string]int
	dlFailed int
}

func (c *countMetrics) Settled(stage, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled == nil {
		c.settled = map[string]int{}
	}
	c.settled[outcome]++
}

func (c *countMetrics) DeadLetterFailed(string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dlFailed++
}

func (c *countMetrics) get(outcome string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settled[outcome]
}

func (c *countMetrics) deadLetterFailures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dlFailed
}

// logBuf collects log output from concurrent goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// noJS is a JetStream that must not be used: any publish fails the test.
type noJS struct {
	jetstream.JetStream
	t testing.TB
}

func (n noJS) PublishMsg(context.Context, *nats.Msg, ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	n.t.Errorf("unexpected dead-letter publish")
	return nil, errors.New("noJS")
}

func (n noJS) Conn() *nats.Conn { return nil }

// testRuntime builds a Runtime for stage "planner" with MaxDeliver 5,
// Backoff 1s..8s with 20% jitter, capturing metrics and logs.
func testRuntime(t testing.TB, js jetstream.JetStream, mod func(*Config)) (*Runtime, *countMetrics, *logBuf) {
	t.Helper()
	if js == nil {
		js = noJS{t: t}
	}
	m, logs := &countMetrics{}, &logBuf{}
	cfg := Config{
		Stage:      events.ConsumerPlanner,
		JetStream:  js,
		MaxDeliver: 5,
		Backoff:    Backoff{Min: time.Second, Max: 8 * time.Second, Jitter: 0.2},
		Log:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:    m,
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, m, logs
}

// startJetStream starts an in-process JetStream server (maxPayload 0 keeps
// the server's default) and returns a connection to it, with the
// dead-letter stream created unless noDLQ.
func startJetStream(t testing.TB, maxPayload int32, noDLQ bool) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoSigs: true, NoLog: true, MaxPayload: maxPayload,
	})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("embedded NATS server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		ns.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if !noDLQ {
		_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
			Name: events.StreamDLQ, Subjects: []string{"kvlive.dlq.>"}, Duplicates: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return js, nc
}

// workStream creates stream WORK on work.> with a durable consumer "worker"
// that leaves the delivery budget to the runtime.
func workStream(t testing.TB, js jetstream.JetStream, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "WORK", jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// deadLetters returns the messages in the dead-letter stream.
func deadLetters(t testing.TB, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, events.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
