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
}

// IdempotencyKey names the logical call: the same key means the same call, however many
// times it is delivered.
func (c CallInfo) IdempotencyKey() string {
	if c.RunID == "" && c.CallID == "" {
		return ""
	}
	return c.RunID + "/" + c.CallID
}

// CallInfoFrom returns the call info in ctx, if any.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	info, ok := ctx.Value(toolinternal.CallInfoKey{}).(CallInfo)
	return info, ok
}
