package testenv

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// logTailLines is how much of a server's output a failed test shows.
const logTailLines = 40

// logBuffer collects a server process's output so a failing test can show
// its end. It is written by the exec package's copying goroutine and read by
// the test, hence the lock.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail returns the last n lines written.
func (b *logBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// showTailIfFailed shows the end of a server's output if the test has failed;
// meant for t.Cleanup.
func showTailIfFailed(t testing.TB, name string, b *logBuffer) {
	t.Helper()
	if t.Failed() {
		showTail(t, name, b)
	}
}

// showTail shows the end of a server's output, before failing.
func showTail(t testing.TB, name string, b *logBuffer) {
	t.Helper()
	t.Logf("last %d lines of %s output:\n%s", logTailLines, name, b.tail(logTailLines))
}
