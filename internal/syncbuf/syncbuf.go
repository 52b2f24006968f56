// Package syncbuf is a bytes.Buffer that goroutines may write and read
// at once: a log sink or a command's output that a test reads while the
// code under test is still writing it.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe bytes.Buffer for writing and reading whole
// contents. The zero value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
