package consumer

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff spaces out the redeliveries of a message that keeps failing: the
// delay starts at Min, doubles with every delivery, and stops growing at Max.
type Backoff struct {
	// Min is the delay after a message's first delivery fails; it is also
	// the delay of a message handed back because the runtime shut down.
	Min time.Duration
	// Max caps the delay, however many deliveries failed.
	Max time.Duration
	// Jitter, a fraction in [0, 1], shortens each delay by up to that share
	// at random, so messages that failed together do not all come back
	// together. It only ever shortens, so no delay exceeds Max.
	Jitter float64
}

// DefaultBackoff is used when Config.Backoff is left zero: 1s doubling to
// 30s, each delay up to 20% shorter.
func DefaultBackoff() Backoff {
	return Backoff{Min: time.Second, Max: 30 * time.Second, Jitter: 0.2}
}

// Delay is how long to wait after delivery number attempt (1-based) failed.
// It is exported for loops that retry something other than a message, such
// as releasing held plans, so that they space out alike.
func (b Backoff) Delay(attempt int) time.Duration { return b.delay(attempt, rand.Float64()) }

// delay is Delay with the random draw u in [0, 1) given, so tests can pin it.
func (b Backoff) delay(attempt int, u float64) time.Duration {
	d := b.Min
	for i := 1; i < attempt && d < b.Max; i++ {
		if d > math.MaxInt64/2 {
			d = b.Max
			break
		}
		d *= 2
	}
	d = min(d, b.Max)
	return d - time.Duration(float64(d)*b.Jitter*u)
}

func (b Backoff) validate() error {
	switch {
	case b.Min <= 0:
		return errors.New("backoff: Min must be positive")
	case b.Max < b.Min:
		return errors.New("backoff: Max must be at least Min")
	case b.Jitter < 0 || b.Jitter > 1 || math.IsNaN(b.Jitter):
		return errors.New("backoff: Jitter must be a fraction in [0, 1]")
	}
	return nil
}
