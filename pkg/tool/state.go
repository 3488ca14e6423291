package tool

import (
	"bytes"
	"context"
	"sync"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// State is what a stateful tool keeps between calls: a shopping cart, a connection a
// selector bound its tools to. Workers keep no memory between calls, so the state travels
// with each call and the orchestrator keeps it: a tool reads it with StateFrom(ctx).Bytes()
// and replaces it with Set; the next call of any tool bound to the same state, on any
// replica, sees the new value. A State is safe for concurrent use; concurrent calls bound
// to one State race, and the last Set wins.
type State struct {
	mu      sync.Mutex
	data    []byte
	changed bool
}

// NewState returns a State holding b.
func NewState(b []byte) *State { return &State{data: bytes.Clone(b)} }

// Bytes returns a copy of the state.
func (s *State) Bytes() []byte {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.data)
}

// Set replaces the state.
func (s *State) Set(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = bytes.Clone(b)
	s.changed = true
}

// Changed reports whether Set was called.
func (s *State) Changed() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// StateFrom returns the State in ctx, or nil when the call is bound to none.
func StateFrom(ctx context.Context) *State {
	s, _ := ctx.Value(toolinternal.StateKey{}).(*State)
	return s
}
