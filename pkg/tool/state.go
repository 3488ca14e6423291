package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// The engine makes a call's State (the orchestrator, the worker SDK) and asks whether the
// tool replaced it, through these hooks: a tool never makes one.
func init() {
	toolinternal.NewState = func(b []byte) any { return &State{data: bytes.Clone(b)} }
	toolinternal.StateChanged = func(s any) bool { return s.(*State).isChanged() }
}

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

// isChanged reports whether Set was called.
func (s *State) isChanged() bool {
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

// ReceiverFrom decodes the receiver of a method call (see MethodOf), the bound object's
// JSON, into v. It fails when the call has no receiver or the JSON does not fit v.
func ReceiverFrom(ctx context.Context, v any) error {
	b := StateFrom(ctx).Bytes()
	if len(b) == 0 {
		return errors.New("the call has no receiver: it is not a method call on a bound object")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("the receiver does not fit %T: %w", v, err)
	}
	return nil
}

// SetReceiver replaces the receiver of a method call with v, encoded as JSON: the
// orchestrator binds the new value in place of the old.
func SetReceiver(ctx context.Context, v any) error {
	st := StateFrom(ctx)
	if st == nil {
		return errors.New("the call has no receiver: it is not a method call on a bound object")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("the receiver cannot be encoded: %w", err)
	}
	st.Set(b)
	return nil
}
