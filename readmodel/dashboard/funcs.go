package dashboard

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"kvlive/events"
)

// ago is how long before now t was, for people: "12m ago"; "-" when t
// is unset.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return shortDuration(now.Sub(t)) + " ago"
}

// when is t as a timestamp.
func when(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// results counts outcomes by result, in rollout status's order.
func results(counts map[events.Result]int) string {
	var parts []string
	for _, r := range []events.Result{events.ResultLive, events.ResultRestart, events.ResultEvict, events.ResultNextBoot, events.ResultNone, events.ResultSkip, events.ResultFailed} {
		if n := counts[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, r))
		}
	}
	if len(parts) == 0 {
		return "none yet"
	}
	return strings.Join(parts, ", ")
}

// pct is a share of a trace's window, in per cent.
func pct(f float64) string { return fmt.Sprintf("%.2f%%", f) }

// title is s with its first letter capitalised (an action's name).
func title(s string) string {
	first, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToUpper(first)) + s[size:]
}

// shortDuration rounds d for people: 45s, 12m, 3h20m, 2d4h.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Minute).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := int(d / (24 * time.Hour))
	return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
}
