// Package logtest holds what tests use to capture logs.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for a logger writing to it and a test reading it at once.
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

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
