// Package toolcall is how the engine runs a tool call. A call is a value (Call): the
// tool, its arguments and what the engine knows of it, as fields, which the tool reads
// from its context (tool.CallInfoFrom, toolctx.FromContext, tool.StateFrom, …) through
// one context value. It passes an ordered list of named layers (Pipeline; the run
// service assembles the orchestrator's) and ends at Terminal, the one place where a
// panic becomes an error result the model can read (logged once, with its stack) and a
// returned error other than a control-flow signal becomes an error result. Tools
// themselves do not recover panics. The orchestrator's loop (Run) and the worker SDK
// (Invoke) both run calls through it; Journaled runs a call that leaves the process
// under the run's journal.
//
// It imports internal/failpoint, internal/toolinternal, pkg/tool and pkg/toolctx only.
package toolcall

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// WithCallInfo returns a context carrying info, for tool.CallInfoFrom.
func WithCallInfo(ctx context.Context, info tool.CallInfo) context.Context {
	return context.WithValue(ctx, toolinternal.CallInfoKey{}, info)
}

// WithState returns a context carrying s, for tool.StateFrom.
func WithState(ctx context.Context, s *tool.State) context.Context {
	return context.WithValue(ctx, toolinternal.StateKey{}, s)
}

// NewState returns a call's State holding b.
func NewState(b []byte) *tool.State { return toolinternal.NewState(b).(*tool.State) }

// StateChanged reports whether the tool replaced s (tool.State.Set) during its call; a
// nil s never changed.
func StateChanged(s *tool.State) bool { return s != nil && toolinternal.StateChanged(s) }

// WithProgress returns a context whose tool.Progress reports go to report.
func WithProgress(ctx context.Context, report func(status string)) context.Context {
	return context.WithValue(ctx, toolinternal.ProgressKey{}, report)
}

// ReportsTo reports whether a tool.Progress report in ctx reaches someone: a call of a
// run does, a call from outside one may not.
func ReportsTo(ctx context.Context) bool {
	r, ok := ctx.Value(toolinternal.ProgressKey{}).(func(string))
	return ok && r != nil
}

// WithBlackboard returns a context whose calls see b as the run's blackboard
// (tool.BlackboardFrom).
func WithBlackboard(ctx context.Context, b tool.Blackboard) context.Context {
	return context.WithValue(ctx, toolinternal.BlackboardKey{}, b)
}

// Scope is the context of one call that crossed a process boundary, as the worker SDK
// restores it from the request: the call's identity (tool.CallInfoFrom), its run's
// verified tenant (toolinternal.TenantFrom, shown by toolctx.FromContext), its
// ToolCallContext (toolctx.FromContext), its validated arguments (toolinternal.Validated),
// its state (tool.StateFrom) and its blackboard (tool.BlackboardFrom), held in one
// context value instead of one each: a call pays one allocation for them, and a lookup
// of any of them walks one link of the context chain.
type Scope struct {
	context.Context
	info      tool.CallInfo
	tenant    string
	bag       toolctx.Context
	validated string
	state     *tool.State
	board     tool.Blackboard
}

// NewScope returns ctx carrying a call's identity, its run's verified tenant ("" for
// none), its ToolCallContext (reserved keys dropped, as toolctx.NewContext drops them:
// the bag never supplies the loop id or the tenant), its arguments as validated, and its
// state and blackboard.
func NewScope(ctx context.Context, info tool.CallInfo, tenant string, bag toolctx.Context, validated string, state *tool.State, board tool.Blackboard) *Scope {
	return &Scope{Context: ctx, info: info, tenant: tenant, bag: bag.WithoutReserved(), validated: validated, state: state, board: board}
}

// Value answers the keys the scope holds and asks the parent for the rest.
func (s *Scope) Value(key any) any {
	switch key.(type) {
	case toolinternal.CallInfoKey:
		return &s.info
	case toolinternal.TenantKey:
		return s.tenant
	case toolinternal.BagKey:
		return s.bag
	case toolinternal.ValidatedKey:
		return &s.validated
	case toolinternal.StateKey:
		return s.state
	case toolinternal.BlackboardKey:
		return s.board
	case toolinternal.OnceKey:
		return true // the orchestrator counts a once-per-loop tool's calls
	}
	return s.Context.Value(key)
}

// Invoke calls t with input as a call from outside a loop (the worker SDK's, an MCP
// client's): a call whose fields come from what ctx carries, run as Run runs it.
func Invoke(ctx context.Context, log *slog.Logger, t tool.Tool, input string) (tool.Result, error) {
	return Run(ctx, log, FromContext(ctx, t, input))
}

// Protect runs fn, the execution of the tool named name, as Call runs a tool: a panic
// becomes an error result with code PANIC and one log line with the stack.
func Protect(ctx context.Context, log *slog.Logger, name string, fn func() (tool.Result, error)) (res tool.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			if log != nil {
				log.ErrorContext(ctx, "tool panicked", "tool", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
			res, err = tool.ErrorWithCode(tool.CodePanic, fmt.Sprintf("tool '%s' panicked: %v", name, p)), nil
		}
	}()
	return fn()
}

// Carried returns the ToolCallContext ctx carries as it crosses to a worker or an MCP
// server: toolctx.FromContext without the loop id and the tenant, which travel in fields
// of their own. It copies nothing.
func Carried(ctx context.Context) toolctx.Context {
	c, _ := ctx.Value(toolinternal.BagKey{}).(toolctx.Context)
	return c
}
