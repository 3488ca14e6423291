package run

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Events of a run's process, after Started: what joined the blackboard, progress and
// messages for the user, artifacts that went to sinks, assets; and how a run ended that a
// tool steered.
type (
	// EntryAdded: an entry joined the blackboard.
	EntryAdded = process.EntryAdded
	// ProgressReported: a transient status for the user.
	ProgressReported = process.ProgressReported
	// MessageSent: a message for the user that stays.
	MessageSent = process.MessageSent
	// AssetAdded: an artifact joined the run's assets.
	AssetAdded = process.AssetAdded
)

// ArtifactCaptured reports an artifact (or an element of one) that went to a sink.
type ArtifactCaptured struct {
	Sink string
	decorators.Capture
}

// Replanned ends a run whose tool asked to plan again: the last event of the run.
type Replanned struct {
	LoopID, Tool, CallID string
	Reason               string
	// Added is what the request put on the blackboard.
	Added      []tool.Binding
	Iterations int
}

// Terminated ends a run whose tool asked to terminate: the last event of the run.
type Terminated struct {
	LoopID, Tool, CallID string
	// Scope is tool.TerminateAgent or tool.TerminateAction.
	Scope  string
	Reason string
}

// listener turns what a run's decorated tools do into the process's record and the run's
// events.
type listener struct {
	p   *process.Process
	obs *serialObserver
}

func (l listener) Captured(sink string, c decorators.Capture) {
	l.obs.send(ArtifactCaptured{Sink: sink, Capture: c})
}

func (l listener) Called(c decorators.Call) {
	l.p.RecordAction(process.Action{Tool: c.Tool, CallID: c.CallID, LoopID: c.LoopID, Duration: c.Duration, Failed: c.Result.IsError()})
}

// prepareCall gives each tool call its view of the run: the blackboard (additions are
// made by the call) and the progress channel (reports name the call).
func prepareCall(p *process.Process) func(ctx context.Context, c *toolcall.Call) {
	return func(_ context.Context, c *toolcall.Call) {
		sc := &callScope{p: p, o: process.Origin{Tool: c.Name, CallID: c.Info.CallID, LoopID: c.Info.LoopID, Iteration: c.Info.Iteration}}
		sc.Blackboard = p.Board(sc.o)
		c.Board, c.Progress = sc.Blackboard, sc.progress
	}
}

// loopContext is ctx as the tool calls of a loop of run p see it: their events go to obs.
func loopContext(ctx context.Context, p *process.Process, obs *serialObserver) context.Context {
	return decorators.WithListener(ctx, listener{p: p, obs: obs})
}

// callScope is one call's view of the run.
type callScope struct {
	tool.Blackboard
	p *process.Process
	o process.Origin
}

func (sc *callScope) progress(status string) { _ = sc.p.Progress(sc.o, status) }

// settleSignal ends a run whose loop a tool's signal stopped: a replan puts what it
// carries on the blackboard; the Outcome holds the Replanned or Terminated event, which
// the run sends once its record is final. Another signal is a failure.
func settleSignal(p *process.Process, se *loop.SignalError, loopID string, iterations int) (*Outcome, error) {
	tool_, callID := se.Tool, se.CallID
	var replan tool.ReplanRequested
	var term tool.Terminate
	switch sig := se.Signal; {
	case errors.As(sig, &replan):
		o := process.Origin{Tool: tool_, CallID: callID, LoopID: loopID}
		// All or nothing: a request with an object the blackboard refuses adds none, and
		// ends the run as the tool's signal, not as a fault of the orchestrator.
		if err := p.CanAdd(replan.Add); err != nil {
			return nil, fmt.Errorf("%w; its replan could not be applied: %w", se, err)
		}
		var added []tool.Binding
		for _, b := range replan.Add {
			if err := p.Add(o, b.Name, b.Entry); err != nil {
				return nil, fmt.Errorf("%w; its replan could not be applied: %w", se, err)
			}
			added = append(added, b)
		}
		reason := replan.Reason
		if reason == "" {
			reason = "Tool requested replan"
		}
		p.SetStatus(process.StatusReplan)
		ev := Replanned{LoopID: loopID, Tool: tool_, CallID: callID, Reason: reason, Added: added, Iterations: iterations}
		return &Outcome{Replan: &ev}, nil
	case errors.As(sig, &term):
		scope := term.Scope
		if scope != tool.TerminateAction {
			scope = tool.TerminateAgent
		}
		p.SetStatus(process.StatusTerminated)
		ev := Terminated{LoopID: loopID, Tool: tool_, CallID: callID, Scope: scope, Reason: term.Reason}
		return &Outcome{Terminated: &ev}, nil
	}
	return nil, se
}

// Outcome is how a run that a tool steered ended: exactly one field is set.
type Outcome struct {
	Replan     *Replanned
	Terminated *Terminated
}
