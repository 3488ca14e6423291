package server

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// run is the orchestrator's record of one run, running or finished.
type run struct {
	id     string
	cancel context.CancelCauseFunc
	// over is closed once the run's final state is recorded.
	over chan struct{}

	mu         sync.Mutex
	state      toolpb.RunState
	iterations int32
	toolCalls  int32
	usage      llm.Usage
	costUSD    float64
	finalText  string
	err        *toolpb.RunError
	started    time.Time
	ended      time.Time
}

func (r *run) snapshot() *toolpb.GetRunResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &toolpb.GetRunResponse{
		RunId:      r.id,
		State:      r.state,
		Iterations: r.iterations,
		ToolCalls:  r.toolCalls,
		FinalText:  r.finalText,
		Error:      r.err,
		StartedAt:  timestamppb.New(r.started),
		Usage:      &toolpb.Usage{InputTokens: r.usage.InputTokens, OutputTokens: r.usage.OutputTokens, CostUsd: r.costUSD},
	}
	if !r.ended.IsZero() {
		resp.EndedAt = timestamppb.New(r.ended)
	}
	return resp
}

// runStore holds the live runs and a bounded history of finished ones.
type runStore struct {
	maxLive int
	retain  int

	mu       sync.Mutex
	closed   bool
	runs     map[string]*run // live runs and retained finished runs, by id
	live     map[*run]bool   // runs that have started and not finished
	finished []*run          // retained finished runs, oldest first
	idle     *sync.Cond
}

func newRunStore(maxLive, retain int) *runStore {
	s := &runStore{maxLive: maxLive, retain: retain, runs: map[string]*run{}, live: map[*run]bool{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

type startError int

const (
	startOK startError = iota
	startExists
	startFull
	startClosed
)

// start records a new run. Run ids are unique among live runs only (RunRequest.run_id):
// a new run may take the id of a finished one, which GetRun then forgets.
func (s *runStore) start(id string, cancel context.CancelCauseFunc) (*run, startError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.runs[id]
	switch {
	case s.closed:
		return nil, startClosed
	case old != nil && s.live[old]:
		return nil, startExists
	case len(s.live) >= s.maxLive:
		return nil, startFull
	}
	if old != nil {
		s.finished = slices.DeleteFunc(s.finished, func(f *run) bool { return f == old })
	}
	r := &run{id: id, cancel: cancel, over: make(chan struct{}), state: toolpb.RunState_RUN_STATE_RUNNING, started: time.Now()}
	s.runs[id] = r
	s.live[r] = true
	return r, startOK
}

// finish records the end of a run and forgets the oldest finished runs beyond retention.
func (s *runStore) finish(r *run) {
	close(r.over)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, r)
	s.finished = append(s.finished, r)
	for len(s.finished) > s.retain {
		if old := s.finished[0]; s.runs[old.id] == old {
			delete(s.runs, old.id)
		}
		s.finished = s.finished[1:]
	}
	if len(s.live) == 0 {
		s.idle.Broadcast()
	}
}

func (s *runStore) get(id string) *run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

func (s *runStore) liveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

func (s *runStore) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// wait blocks until no run is live or ctx ends.
func (s *runStore) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.mu.Lock()
		for len(s.live) > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *runStore) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.live {
		r.cancel(errShutdown)
	}
}
