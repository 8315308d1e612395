package events

import (
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Window is when a restart rollout may restart VMs: it opens at every
// time Schedule names, read in TimeZone, and stays open for Duration. A
// restart outside it waits, its rollout paused until the window opens.
type Window struct {
	// Schedule is a cron expression of five fields (minute, hour, day of
	// month, month, day of week), as a Kubernetes CronJob's: "0 22 * * 1-5".
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open: "4h".
	Duration string `json:"duration"`
	// TimeZone is the IANA time zone Schedule is read in ("Europe/Paris");
	// empty is UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// IsZero reports whether w sets no window: restarts may go at any time.
func (w Window) IsZero() bool { return w == Window{} }

// parse reads w's schedule, duration and time zone.
func (w Window) parse() (cron.Schedule, time.Duration, error) {
	var errs []error
	loc, err := time.LoadLocation(w.TimeZone)
	if err != nil {
		errs = append(errs, fmt.Errorf("timeZone %q: %w", w.TimeZone, err))
	}
	sched, err := cron.ParseStandard(w.Schedule)
	if err != nil {
		errs = append(errs, fmt.Errorf("schedule %q: %w", w.Schedule, err))
	} else if spec, ok := sched.(*cron.SpecSchedule); ok && loc != nil {
		spec.Location = loc
	}
	d, err := time.ParseDuration(w.Duration)
	if err != nil || d <= 0 {
		errs = append(errs, fmt.Errorf("duration %q: want a positive duration such as 4h", w.Duration))
	}
	return sched, d, errors.Join(errs...)
}

// Validate checks the schedule, the duration and the time zone.
func (w Window) Validate() error {
	if w.IsZero() {
		return nil
	}
	_, _, err := w.parse()
	return err
}

// At says whether the window is open at now: open, until it closes;
// closed, until it opens next. The zero Window is always open (until is
// zero). A window that does not parse is closed for good (until is zero):
// Validate refuses it before any rollout goes by it.
func (w Window) At(now time.Time) (open bool, until time.Time) {
	if w.IsZero() {
		return true, time.Time{}
	}
	sched, d, err := w.parse()
	if err != nil {
		return false, time.Time{}
	}
	start := sched.Next(now.Add(-d))
	if start.IsZero() || start.After(now) {
		return false, start
	}
	end := start.Add(d)
	for next := sched.Next(start); !next.IsZero() && !next.After(now); next = sched.Next(next) {
		end = next.Add(d) // a later opening within the window extends it
	}
	return true, end
}

// String renders the window as a person reads it: "0 22 * * 1-5 for 4h (Europe/Paris)".
func (w Window) String() string {
	tz := w.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%s for %s (%s)", w.Schedule, w.Duration, tz)
}
