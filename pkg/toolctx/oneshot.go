package toolctx

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// AlreadyLoaded is the text OneShotPerLoop returns for a repeated call in a loop: the
// model-visible contract of a one-shot tool. A non-empty advice follows after one space.
func AlreadyLoaded(name, advice string) string {
	s := "ALREADY LOADED. The body of '" + name + "' was returned earlier in this turn" +
		" \u2014 read it from your conversation history above. Do not call this tool again."
	if advice != "" {
		s += " " + advice
	}
	return s
}

// OneShotPerLoop wraps t so that it runs at most once per tool loop: the first call in
// a loop delegates to t, every later call in the same loop returns the text
// AlreadyLoaded(t's name, advice) without calling t. It keys only on the loop id, not
// on the arguments. The loop id is FromContext(ctx).LoopID(); a call without a loop id
// always delegates.
//
// A first call that fails (an error result, or a returned error) still uses up the
// shot: the model has seen its outcome. Each wrapper remembers its own loops (the
// last 1024 it saw). Definition and Metadata are t's, and ctx
// reaches t unchanged.
func OneShotPerLoop(t tool.Tool, advice string) tool.Tool {
	return &oneShot{delegate: t, advice: advice, memo: toolinternal.NewLoopMemo(toolinternal.DefaultMaxTracked)}
}

type oneShot struct {
	delegate tool.Tool
	advice   string
	memo     *toolinternal.LoopMemo
}

var _ tool.Delegating = (*oneShot)(nil)

func (o *oneShot) Definition() tool.Definition { return o.delegate.Definition() }

// Metadata is the delegate's, marked once per loop with the advice: a one-shot tool is
// still return-direct, idempotent or bounded by a timeout when its delegate is. A
// worker registers the mark, and the orchestrator then answers the repeated calls of
// each loop itself, whichever replica serves the first.
func (o *oneShot) Metadata() tool.Metadata {
	m := o.delegate.Metadata()
	m.OncePerLoop, m.OnceAdvice = true, o.advice
	return m
}

func (o *oneShot) Delegate() tool.Tool { return o.delegate }

func (o *oneShot) Call(ctx context.Context, input string) (tool.Result, error) {
	if toolinternal.OnceCountedUpstream(ctx) || o.memo.FirstTimeInLoop(FromContext(ctx).LoopID()) {
		return o.delegate.Call(ctx, input)
	}
	return tool.Text(AlreadyLoaded(o.delegate.Definition().Name, o.advice)), nil
}
