package tool

import "errors"

// Signal is an error that a tool returns to steer the loop rather than to report a
// failure: the loop reacts to it instead of showing it to the model. Every tool and
// wrapper in toolmesh returns a Signal unchanged as its error (possibly wrapped with
// %w), where any other error becomes an error Result.
type Signal interface {
	error
	// ToolSignal marks the type as a control-flow signal.
	ToolSignal()
}

// ReplanRequested asks the agent to plan again, for example because the tool found
// that the world is not as the plan assumed. Return it as a value. The loop stops, the
// entries of Add join the run's blackboard, and the run ends REPLAN_REQUESTED with the
// reason, so that the client (or a planner above it) can act on what the tool found.
// It holds a slice, so it is not comparable: find it with errors.As, not errors.Is.
type ReplanRequested struct {
	Reason string
	// Add is what to put on the run's blackboard, in order, before the run ends.
	Add []Binding
}

// Error describes the request, for logs.
func (e ReplanRequested) Error() string {
	if e.Reason == "" {
		return "replan requested"
	}
	return "replan requested: " + e.Reason
}

// ToolSignal marks ReplanRequested as a Signal.
func (ReplanRequested) ToolSignal() {}

// Scopes of a Terminate signal.
const (
	TerminateAgent  = "agent"
	TerminateAction = "action"
)

// Terminate asks the loop to stop the whole agent (Scope TerminateAgent) or only the
// current action (Scope TerminateAction). Return it as a value.
type Terminate struct {
	Scope  string
	Reason string
}

// Error describes the request, for logs.
func (e Terminate) Error() string {
	msg := "terminate"
	if e.Scope != "" {
		msg += " " + e.Scope
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// ToolSignal marks Terminate as a Signal.
func (Terminate) ToolSignal() {}

// AsSignal finds the first Signal in err's chain.
func AsSignal(err error) (Signal, bool) {
	var s Signal
	if errors.As(err, &s) {
		return s, true
	}
	return nil, false
}
