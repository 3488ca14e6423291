package agentic

import (
	"context"
	"sync/atomic"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A facade among an agentic tool's sub-tools keeps its kind's rules when it unfolds: its
// children get the wrapper it has (recorded, locked behind the same condition once
// unlocked, bound to the same states), and a call the wrapper refused (locked, in the
// wrong state) unfolds nothing.

// refuser is a wrapper that may refuse a call without running its tool.
type refuser interface{ refusedLast() bool }

// asFacade wraps w, the kind's wrapper of t, so that it is a facade when t is one;
// children are wrapped with wrap. Otherwise it returns w.
func asFacade(w, t tool.Tool, wrap func(tool.Tool) tool.Tool) tool.Tool {
	f, ok := tool.As[tool.Facade](t)
	if !ok {
		return w
	}
	return &wrappedFacade{Tool: w, f: f, wrap: wrap}
}

type wrappedFacade struct {
	tool.Tool
	f    tool.Facade
	wrap func(tool.Tool) tool.Tool
}

func (w *wrappedFacade) Delegate() tool.Tool                   { return w.Tool }
func (w *wrappedFacade) Kind() tool.FacadeKind                 { return w.f.Kind() }
func (w *wrappedFacade) Categories() (string, []tool.Category) { return w.f.Categories() }
func (w *wrappedFacade) Options() tool.FacadeOptions           { return w.f.Options() }
func (w *wrappedFacade) Children() []tool.Tool                 { return w.wrapAll(w.f.Children()) }
func (w *wrappedFacade) wrapAll(ts []tool.Tool) []tool.Tool {
	out := make([]tool.Tool, len(ts))
	for i, t := range ts {
		out[i] = w.wrap(t)
	}
	return out
}

// Select is the facade's selection with its children wrapped; nothing when the call
// was refused.
func (w *wrappedFacade) Select(ctx context.Context, input string) ([]tool.Tool, error) {
	if r, ok := tool.As[refuser](w.Tool); ok && r.refusedLast() {
		return nil, nil
	}
	ts, err := w.f.Select(ctx, input)
	return w.wrapAll(ts), err
}

// refusal records whether a wrapper's last call was refused.
type refusal struct{ last atomic.Bool }

func (r *refusal) refusedLast() bool { return r.last.Load() }
