package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"
)

// Config describes one stage's consumer.
type Config struct {
	// Stage names the stage in logs and metrics, and picks its dead-letter
	// subject, events.DeadLetterSubject(Stage). It must be a single subject
	// token.
	Stage string
	// Consumer is the stage's durable pull consumer. Configure it on the
	// server with MaxDeliver -1 (see MaxDeliver). It may be nil for a
	// Runtime that is only used to Settle.
	Consumer jetstream.Consumer
	// JetStream is where dead letters are published.
	JetStream jetstream.JetStream
	// Workers is how many handlers run at once; zero means one.
	Workers int
	// MaxDeliver is the delivery budget: a Retry on delivery MaxDeliver (or
	// later) is dead-lettered. The server's own MaxDeliver must be -1, or
	// the server drops a message whose dead letter could not be stored.
	MaxDeliver int
	// AckWait is the consumer's AckWait; while a handler runs the runtime
	// sends InProgress every AckWait/3. Zero takes it from Consumer's cached
	// info; with neither, no heartbeat is sent.
	AckWait time.Duration
	// Backoff spaces out the retries; zero means DefaultBackoff.
	Backoff Backoff
	// Grace is how long in-flight handlers may keep running after Run's
	// context ends before their own context is cancelled. Zero cancels them
	// at once; they are settled either way.
	Grace time.Duration
	// Log receives the runtime's logs, tagged with the stage; nil discards.
	Log *slog.Logger
	// Metrics counts outcomes; nil counts nothing.
	Metrics Metrics
	// Clock drives the heartbeat, the grace period and the pause before
	// consuming starts over; nil is the real clock. Tests pass a fake one.
	Clock clock.WithTicker
}

// Outcomes passed to Metrics.Settled: the fixed set of things Settle can do
// with a message.
const (
	// OutcomeAck: the message was acked.
	OutcomeAck = "ack"
	// OutcomeNak: the message was nak'ed, to come back after a delay (a
	// Retry before the last delivery, a shutdown, or a dead letter that
	// could not be stored).
	OutcomeNak = "nak"
	// OutcomeDeadLetter: the message was copied to the dead-letter stream
	// and terminated.
	OutcomeDeadLetter = "dead-letter"
	// OutcomeFailed: the ack, nak or term request itself failed; the server
	// redelivers the message once AckWait passes.
	OutcomeFailed = "failed"
)

// Metrics receives the runtime's counts. Implementations must be safe for
// concurrent use.
type Metrics interface {
	// Settled counts one message settled by stage with outcome, one of the
	// Outcome constants.
	Settled(stage, outcome string)
	// DeadLetterFailed counts a dead letter stage could not store; the
	// message was nak'ed instead and will be dead-lettered again.
	DeadLetterFailed(stage string)
}

type noMetrics struct{}

func (noMetrics) Settled(string, string)  {}
func (noMetrics) DeadLetterFailed(string) {}

// Runtime consumes one durable consumer and settles every message it
// delivers. Build it with New.
type Runtime struct {
	cfg     Config
	log     *slog.Logger
	ackWait time.Duration
	// rand draws the jitter; tests replace it to pin delays.
	rand func() float64
}

// New checks cfg, fills in its defaults and returns a Runtime. It warns, in
// cfg.Log, about a consumer whose server-side settings defeat the runtime's
// guarantees.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("consumer %q: %w", cfg.Stage, err)
	}
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	r := &Runtime{cfg: cfg, log: cfg.Log.With("stage", cfg.Stage), ackWait: cfg.AckWait, rand: rand.Float64}
	r.checkServerConfig()
	return r, nil
}

func (c Config) validate() error {
	switch {
	case c.Stage == "" || strings.ContainsAny(c.Stage, ".*> \t\r\n"):
		return errors.New("the stage name must be a single subject token")
	case c.JetStream == nil:
		return errors.New("a JetStream is required to publish dead letters")
	case c.Workers < 0:
		return errors.New("the number of workers must not be negative")
	case c.MaxDeliver < 1:
		return errors.New("the delivery budget, MaxDeliver, must be at least 1")
	case c.AckWait < 0 || c.Grace < 0:
		return errors.New("neither AckWait nor Grace may be negative")
	}
	if c.Backoff != (Backoff{}) {
		return c.Backoff.validate()
	}
	return nil
}

// checkServerConfig compares the consumer's server-side settings with the
// runtime's, because a mismatch fails quietly: a server MaxDeliver drops
// messages the runtime would have kept, and a longer AckWait than the
// server's makes the heartbeat too slow to prevent redeliveries.
func (r *Runtime) checkServerConfig() {
	if r.cfg.Consumer == nil {
		return
	}
	info := r.cfg.Consumer.CachedInfo()
	if info == nil {
		return
	}
	server := info.Config
	if server.MaxDeliver > 0 {
		r.log.Warn("consumer has a server-side MaxDeliver: the server drops a message after that many deliveries even when its dead letter could not be stored; set it to -1 and let the runtime's MaxDeliver budget deliveries",
			"consumer", info.Name, "server_max_deliver", server.MaxDeliver, "max_deliver", r.cfg.MaxDeliver)
	}
	switch {
	case server.AckWait <= 0:
	case r.ackWait == 0:
		r.ackWait = server.AckWait
	case r.ackWait > server.AckWait:
		r.log.Warn("AckWait is longer than the consumer's; heartbeating at the consumer's pace",
			"consumer", info.Name, "ack_wait", r.ackWait, "server_ack_wait", server.AckWait)
		r.ackWait = server.AckWait
	}
}
