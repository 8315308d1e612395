package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"
)

// ReadBound is how long a read of kvlive's streams and buckets keeps trying
// through a NATS leader election when the caller names no bound of its own.
// An election ends in seconds; a server down for longer than this is
// reported as down.
const ReadBound = 30 * time.Second

// tryTimeout bounds one try of a read: nats.go's own default for a
// JetStream request.
const tryTimeout = 5 * time.Second

// JetStream API error codes a clustered server answers with while a leader
// is being elected (nats-server's errors.json).
const (
	codeClusterIncomplete  jetstream.ErrorCode = 10004 // incomplete results
	codeClusterNotAssigned jetstream.ErrorCode = 10007 // not assigned to this server (yet)
	codeClusterNotAvail    jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	codeClusterNotLeader   jetstream.ErrorCode = 10009 // cluster can not handle request
)

// Transient reports whether err is what a JetStream request meets while a
// stream's or the meta leader is being elected, or while the server it
// reached restarts: nobody answers the request ("no responders"), JetStream
// says it is unavailable, a pull or heartbeat is lost with the leader, or
// the request times out. Anything the server decided (not found, wrong
// revision, bad request) is not transient.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var jsErr jetstream.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		switch jsErr.APIError().ErrorCode {
		case codeClusterIncomplete, codeClusterNotAssigned, codeClusterNotAvail, codeClusterNotLeader,
			jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return true
		}
		return false
	}
	for _, t := range []error{
		nats.ErrNoResponders, nats.ErrTimeout, context.DeadlineExceeded, nats.ErrConnectionReconnecting,
		jetstream.ErrNoStreamResponse, jetstream.ErrServerShutdown, jetstream.ErrConsumerLeadershipChanged,
		jetstream.ErrNoHeartbeat, jetstream.ErrConsumerDeleted, jetstream.ErrOrderedConsumerReset,
	} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// retrier retries reads that meet a leader election, with exponential
// backoff and jitter, for at most bound from the first try.
type retrier struct {
	bound time.Duration
}

func newRetrier(bound time.Duration) retrier {
	if bound <= 0 {
		bound = ReadBound
	}
	return retrier{bound: bound}
}

// backoff is the pause before each retry: 50 ms, doubling to 2 s, ±20%.
func backoff() wait.Backoff {
	return wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 2 * time.Second}
}

// do runs read until it succeeds or fails for good. A transient failure
// is tried again until the bound has passed or ctx ends; then the last
// failure is returned, saying what was read and how long it was tried.
// Any other failure is returned as it is, so callers' errors.Is checks
// (not found, wrong revision) see the server's own answer.
func (r retrier) do(ctx context.Context, what string, read func(context.Context) error) error {
	return r.run(ctx, what, func(ctx context.Context) (bool, error) {
		// A request that reached a leader which then died is never
		// answered: each try has its own time limit.
		ctx, cancel := context.WithTimeout(ctx, min(tryTimeout, r.bound))
		defer cancel()
		return false, read(ctx)
	})
}

// run is do for a read made in passes, each of which may get some way
// before it fails (a scan): a pass that got further starts the bound and
// the backoff afresh, so only a read that stops moving is given up on.
func (r retrier) run(ctx context.Context, what string, pass func(context.Context) (progressed bool, err error)) error {
	start, b := time.Now(), backoff()
	for tries := 1; ; tries++ {
		progressed, err := pass(ctx)
		if err == nil || !Transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (tried %d times over %s, until %w)", what, err, tries, roundSince(start), ctx.Err())
		}
		if progressed {
			start, b, tries = time.Now(), backoff(), 0
		}
		pause := b.Step()
		if time.Since(start)+pause > r.bound {
			return fmt.Errorf("%s: %w (tried %d times over %s: a NATS leader election that did not end, or a server that is down)",
				what, err, tries, roundSince(start))
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func roundSince(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// value is do for a read that returns a value.
func value[T any](ctx context.Context, r retrier, what string, read func(context.Context) (T, error)) (T, error) {
	var v T
	err := r.do(ctx, what, func(ctx context.Context) error {
		var err error
		v, err = read(ctx)
		return err
	})
	return v, err
}
