// Package logtest holds what tests use to capture logs.
package logtest

import (
	"bytes"
	"context"
	"log/slog"
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

// Signal is a log handler that drops every record and closes Logged at the first one
// whose message is its own: a test waits on a log line instead of polling for what it
// says.
type Signal struct {
	msg    string
	once   *sync.Once
	Logged chan struct{}
}

// NewSignal returns a handler that signals the first record whose message is msg.
func NewSignal(msg string) Signal {
	return Signal{msg: msg, once: new(sync.Once), Logged: make(chan struct{})}
}

func (h Signal) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h Signal) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h Signal) WithGroup(string) slog.Handler                { return h }

// Handle closes Logged when r is the awaited record.
func (h Signal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.Logged) })
	}
	return nil
}
