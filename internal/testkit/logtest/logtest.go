// Package logtest is a log sink for tests: a buffer that the code under test writes from its own
// goroutines while the test reads it.
package logtest

import (
	"strings"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use; String returns what was written so far.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
