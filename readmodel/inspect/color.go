package inspect

import (
	"fmt"

	"kvlive/events"
)

// The values of `kvlive trace --color`.
const (
	ColorAuto   = "auto"
	ColorAlways = "always"
	ColorNever  = "never"
)

// UseColor decides whether to paint the output. "auto" paints a terminal
// unless NO_COLOR is present and not empty (no-color.org); "always" and
// "never" are the user overriding both, as no-color.org asks a flag to.
func UseColor(mode string, terminal bool, noColor string) (bool, error) {
	switch mode {
	case ColorAlways:
		return true, nil
	case ColorNever:
		return false, nil
	case ColorAuto, "":
		return terminal && noColor == "", nil
	}
	return false, fmt.Errorf("unknown colour mode %q (want auto, always or never)", mode)
}

// ANSI SGR sequences.
const (
	ansiReset  = "\x1b[0m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiBlue   = "\x1b[34m"
	ansiDim    = "\x1b[2m"
)

// resultColours: live green, restart and evict yellow, next boot blue, nothing to do
// dim, failure red.
var resultColours = map[events.Result]string{
	events.ResultLive:     ansiGreen,
	events.ResultRestart:  ansiYellow,
	events.ResultEvict:    ansiYellow,
	events.ResultNextBoot: ansiBlue,
	events.ResultNone:     ansiDim,
	events.ResultSkip:     ansiDim,
	events.ResultFailed:   ansiRed,
}

// paint wraps s in colour when on and there is something to paint.
func paint(s, colour string, on bool) string {
	if !on || colour == "" || s == "" {
		return s
	}
	return colour + s + ansiReset
}
