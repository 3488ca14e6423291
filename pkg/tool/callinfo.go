package tool

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// CallInfo identifies one tool call: the run and the loop it belongs to, and the id the
// model gave it. The orchestrator puts it in the context of every call and sends it to
// the worker with the call, which puts it back into the tool function's context.
type CallInfo struct {
	RunID  string
	LoopID string
	CallID string
	// Iteration is the loop iteration whose model turn asked for the call (from 1); 0
	// outside a loop.
	Iteration int
}

// IdempotencyKey names the logical call: the same key means the same call, however many
// times it is delivered.
func (c CallInfo) IdempotencyKey() string {
	if c.RunID == "" && c.CallID == "" {
		return ""
	}
	if c.LoopID == "" {
		return c.RunID + "/" + c.CallID
	}
	// A run's nested loops number their calls like the run's own loop does.
	return c.RunID + "/" + c.LoopID + "/" + c.CallID
}

// CallInfoFrom returns the call info in ctx, if any.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	switch info := ctx.Value(toolinternal.CallInfoKey{}).(type) {
	case CallInfo:
		return info, true
	case *CallInfo: // a call scope's, which the worker SDK builds
		return *info, true
	}
	return CallInfo{}, false
}
