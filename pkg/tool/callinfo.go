package tool

import "context"

// CallInfo identifies one tool call: the run and the loop it belongs to, and the id the
// model gave it. The orchestrator's loop puts it in the context of every call; remote
// tools forward it to the worker, which puts it back into the tool function's context.
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

type callInfoKey struct{}

// WithCallInfo returns a context carrying info.
func WithCallInfo(ctx context.Context, info CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, info)
}

// CallInfoFrom returns the call info in ctx, if any.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	info, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return info, ok
}

// Dispatch records where a call was executed. A tool that sends calls elsewhere (a
// remote tool) fills in the Dispatch it finds in the context, so that the caller can
// report it.
type Dispatch struct {
	// WorkerID is the worker that produced the result; empty when none was contacted.
	WorkerID string
	// Attempts is the number of workers the call was sent to.
	Attempts int
}

type dispatchKey struct{}

// WithDispatch returns a context carrying a fresh Dispatch for the callee to fill in.
func WithDispatch(ctx context.Context) (context.Context, *Dispatch) {
	d := &Dispatch{}
	return context.WithValue(ctx, dispatchKey{}, d), d
}

// DispatchFrom returns the Dispatch in ctx, or nil.
func DispatchFrom(ctx context.Context) *Dispatch {
	d, _ := ctx.Value(dispatchKey{}).(*Dispatch)
	return d
}
