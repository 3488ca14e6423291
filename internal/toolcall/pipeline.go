package toolcall

import (
	"context"
	"log/slog"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Call is one tool call as it goes through the orchestrator: the tool called, its
// arguments, and everything the engine knows of the call, as fields. The layers of a
// Pipeline read and fill them; the tool sees them through its context (tool.CallInfoFrom,
// toolctx.FromContext, tool.StateFrom, tool.BlackboardFrom, …), which the call answers
// as one context value (Bind).
type Call struct {
	// Tool is the tool called, as the run offers it: its definition and metadata. The
	// terminal handler calls it.
	Tool tool.Tool
	// Name is the tool's name as the model called it.
	Name string
	// Input is the call's arguments; Validated says they were checked against Tool's
	// input schema.
	Input     string
	Validated bool
	// Info is the call's identity.
	Info tool.CallInfo
	// Bag is the ToolCallContext the call carries (reserved keys dropped).
	Bag toolctx.Context
	// Tenant is the run's verified tenant; "" leaves the enclosing context's.
	Tenant string
	// State is the state the call is bound to; nil leaves the enclosing context's.
	State *tool.State
	// Board is the run's blackboard as the call sees it, Progress where its progress
	// reports go; nil leaves the enclosing context's.
	Board    tool.Blackboard
	Progress func(status string)
	// Dispatch is where the call went, filled in by a dispatching tool (the worker that
	// served it, the attempts); nil when nobody asks.
	Dispatch *toolinternal.Dispatch
	// Log is where a panic of the tool is logged; nil logs nothing.
	Log *slog.Logger

	scope callScope
}

// callScope is a call's context: the context the call runs in, answering the keys the
// call holds from its fields.
type callScope struct {
	context.Context
	c *Call
}

// Bind returns ctx carrying the call: one context value answers every key the call
// holds. Layers and the tool read the call through it.
func (c *Call) Bind(ctx context.Context) context.Context {
	c.scope = callScope{Context: ctx, c: c}
	return &c.scope
}

// From is the call ctx carries, or nil.
func From(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

type callKey struct{}

func (s *callScope) Value(key any) any {
	c := s.c
	switch key.(type) {
	case callKey:
		return c
	case toolinternal.CallInfoKey:
		return &c.Info
	case toolinternal.BagKey:
		return c.Bag
	case toolinternal.ValidatedKey:
		if c.Validated {
			return &c.Input
		}
	case toolinternal.DispatchKey:
		if c.Dispatch != nil {
			return c.Dispatch
		}
	case toolinternal.TenantKey:
		if c.Tenant != "" {
			return c.Tenant
		}
	case toolinternal.StateKey:
		if c.State != nil {
			return c.State
		}
	case toolinternal.BlackboardKey:
		if c.Board != nil {
			return c.Board
		}
	case toolinternal.ProgressKey:
		if c.Progress != nil {
			return c.Progress
		}
	}
	return s.Context.Value(key)
}

// Handler runs a call: the rest of the pipeline, down to the tool. ctx carries the call
// (Call.Bind). A returned error is a control-flow signal (tool.Signal) only: a tool's
// error reaches the layers as an error result.
type Handler func(ctx context.Context, c *Call) (tool.Result, error)

// Layer is one named step of the pipeline around a tool call: For gives what it does
// around the calls of one tool — a wrapping of the next handler — or nil where it has
// nothing to do for that tool (a rule that does not cover it, a feature turned off). For
// is asked once per tool offered, so a call pays only for the layers that apply to it.
type Layer struct {
	Name string
	For  func(t tool.Tool) func(next Handler) Handler
}

// Pipeline is an ordered list of layers, outermost first: the first sees a call first
// and its result last.
type Pipeline []Layer

// Names are the layers' names, in order.
func (p Pipeline) Names() []string {
	out := make([]string, len(p))
	for i, l := range p {
		out[i] = l.Name
	}
	return out
}

// Wrap returns t run through the pipeline: a tool with t's definition and metadata whose
// calls pass every layer that applies to t, then reach t (Terminal).
func (p Pipeline) Wrap(t tool.Tool) tool.Tool {
	h := Handler(Terminal)
	var applied []string
	for i := len(p) - 1; i >= 0; i-- {
		if p[i].For == nil {
			continue
		}
		if w := p[i].For(t); w != nil {
			h = w(h)
			applied = append(applied, p[i].Name)
		}
	}
	for i, j := 0, len(applied)-1; i < j; i, j = i+1, j-1 {
		applied[i], applied[j] = applied[j], applied[i]
	}
	return &Tool{t: t, h: h, layers: applied}
}

// Tool is a tool run through a pipeline (Pipeline.Wrap).
type Tool struct {
	t      tool.Tool
	h      Handler
	layers []string
}

var _ tool.Delegating = (*Tool)(nil)

func (w *Tool) Definition() tool.Definition { return w.t.Definition() }
func (w *Tool) Metadata() tool.Metadata     { return w.t.Metadata() }
func (w *Tool) Delegate() tool.Tool         { return w.t }

// Layers are the names of the layers a call of the tool passes, outermost first.
func (w *Tool) Layers() []string { return w.layers }

// Call runs a call of the tool through its layers, as one from outside a loop: the call
// takes what the context carries (its call info, ToolCallContext, …).
func (w *Tool) Call(ctx context.Context, input string) (tool.Result, error) {
	if c := From(ctx); c != nil && c.Tool == tool.Tool(w) && c.Input == input {
		// A call the loop made (Run): its value is in ctx already.
		return w.h(ctx, c)
	}
	c := FromContext(ctx, w, input)
	if outer := From(ctx); outer != nil {
		c.Log = outer.Log
	}
	return w.h(c.Bind(ctx), c)
}

// FromContext is a call of t with input, its fields taken from what ctx carries.
func FromContext(ctx context.Context, t tool.Tool, input string) *Call {
	info, _ := tool.CallInfoFrom(ctx)
	return &Call{Tool: t, Name: t.Definition().Name, Input: input, Validated: toolinternal.Validated(ctx, input), Info: info,
		Bag: Carried(ctx), Dispatch: toolinternal.DispatchFrom(ctx)}
}

// Terminal is the end of every pipeline: it calls the tool with the call's context. A
// panic becomes an error result with code PANIC (logged once, with the stack, where ctx
// has a logger); a returned error that is not a tool.Signal becomes
// tool.ErrorFrom(err). This is the one place where a tool's errors are mapped.
func Terminal(ctx context.Context, c *Call) (tool.Result, error) {
	t := c.Tool
	if w, ok := t.(*Tool); ok {
		t = w.t // a call that entered w's pipeline reaches its tool
	}
	res, err := Protect(ctx, c.Log, t.Definition().Name, func() (tool.Result, error) {
		res, err := t.Call(ctx, c.Input)
		if err != nil {
			if _, ok := tool.AsSignal(err); ok {
				return tool.Result{}, err
			}
			return tool.ErrorFrom(err), nil
		}
		return res, nil
	})
	// Text that is not UTF-8 is repaired where it comes in, as the run's journal would
	// encode it: every layer, the journal and the model then have the same text, and a
	// resumed run replays what the run saw.
	res.Content = toolinternal.ValidText(res.Content)
	return res, err
}

// Run runs call c of its tool: through the tool's pipeline when it has one, else
// straight to the tool (Terminal). A panic anywhere on the way becomes an error result
// logged on log; a returned error is a control-flow signal only.
func Run(ctx context.Context, log *slog.Logger, c *Call) (tool.Result, error) {
	c.Log = log
	ctx = c.Bind(ctx)
	return Protect(ctx, log, c.Tool.Definition().Name, func() (tool.Result, error) {
		if w, ok := c.Tool.(*Tool); ok {
			return w.h(ctx, c)
		}
		return Terminal(ctx, c)
	})
}
