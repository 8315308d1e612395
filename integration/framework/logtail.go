package framework

import (
	"testing"

	"kvlive/internal/testenv"
)

// logTailLines is how much of a server's output a failed test shows.
const logTailLines = 40

// showTailIfFailed shows the end of a server's output if the test has failed;
// meant for t.Cleanup.
func showTailIfFailed(t testing.TB, name string, b *testenv.LogBuffer) {
	t.Helper()
	if t.Failed() {
		showTail(t, name, b)
	}
}

// showTail shows the end of a server's output, before failing.
func showTail(t testing.TB, name string, b *testenv.LogBuffer) {
	t.Helper()
	t.Logf("last %d lines of %s output:\n%s", logTailLines, name, b.Tail(logTailLines))
}
