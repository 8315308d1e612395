package testenv

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// logTailLines is how much of a server's output a failed test shows.
const logTailLines = 40

// LogBuffer collects a process's output so a failing test can show its
// end. It is written by the exec package's copying goroutine (or a logger)
// and read by the test, hence the lock.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is how many bytes were written.
func (b *LogBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Tail returns the last n lines written.
func (b *LogBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// showTailIfFailed shows the end of a server's output if the test has failed;
// meant for t.Cleanup.
func showTailIfFailed(t testing.TB, name string, b *LogBuffer) {
	t.Helper()
	if t.Failed() {
		showTail(t, name, b)
	}
}

// showTail shows the end of a server's output, before failing.
func showTail(t testing.TB, name string, b *LogBuffer) {
	t.Helper()
	t.Logf("last %d lines of %s output:\n%s", logTailLines, name, b.Tail(logTailLines))
}
