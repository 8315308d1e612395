package dashboard

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"kvlive/events"
	"kvlive/readmodel/inspect"
)

// funcs are the templates' helpers.
func funcs(now func() time.Time) template.FuncMap {
	return template.FuncMap{
		"path": inspect.EventPath,
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return "-"
			}
			return shortDuration(now().Sub(t)) + " ago"
		},
		"dur":  shortDuration,
		"when": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"verdicts": func(counts map[events.Observed]int, awaited int) string {
			m := map[string]int{"awaited": awaited}
			for v, n := range counts {
				m[string(v)] = n
			}
			return inspect.VerdictList(m)
		},
		"results": func(counts map[events.Result]int) string {
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
		},
		"deref": func(p *int) int {
			if p == nil {
				return 0
			}
			return *p
		},
		"moved":   moved,
		"filters": func() []string { return filters },
		"pct":     func(f float64) string { return fmt.Sprintf("%.2f%%", f) },
		"add":     func(a, b int) int { return a + b },
		"title":   func(s string) string { return strings.ToUpper(s[:1]) + s[1:] },
	}
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
