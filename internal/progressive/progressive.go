// Package progressive unfolds facades: the loop strategy that, after a call of a
// tool.Facade, replaces the facade with the children the call selected, plus a guide
// tool under the facade's name and a "<name>_context" tool, both one-shot per loop.
//
// It plugs into internal/loop through loop.Strategy and so sits above the loop, as
// internal/agentic does; the loop never imports it (the server passes New() in
// loop.Options.Strategies). It imports pkg/tool, pkg/schema, pkg/toolctx and
// internal/loop only: no gRPC, generated protos, router or server.
package progressive

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Strategy is the loop strategy that unfolds facades. It holds no state: what a loop has
// unfolded is its tool set, and the one-shot memos live in the guide and context tools
// made for that loop. One value serves every loop.
type Strategy struct{}

var _ loop.Strategy = (*Strategy)(nil)

// New returns the unfolding strategy.
func New() *Strategy { return &Strategy{} }

// Evaluate unfolds the called tool when it is a facade (see Unfold); any other tool
// changes nothing.
func (s *Strategy) Evaluate(ctx context.Context, ic loop.InjectionContext) (loop.Injection, error) {
	u, err := Unfold(ctx, ic.Tool, ic.Input, ic.Current)
	if err != nil {
		return loop.Injection{}, err
	}
	return loop.Injection{Add: u.Add, Remove: u.Remove}, nil
}

// Unfolding is what a facade call changes in a tool set.
type Unfolding struct {
	// Facade is the facade found beneath the called tool; nil when there was none.
	Facade tool.Facade
	// Selected are the children the call made available.
	Selected []tool.Tool
	// Add are the selected children, then the guide tool and the context tool unless
	// the facade switched them off.
	Add []tool.Tool
	// Remove are the tools that leave: the called tool, or for an exclusive facade every
	// current tool.
	Remove []tool.Tool
}

// Change is an unfolding by names, for events and for recording a loop's unfolding state.
type Change struct {
	Added, Removed []string
}

// Change returns the names of u's additions and removals.
func (u Unfolding) Change() Change {
	return Change{Added: names(u.Add), Removed: names(u.Remove)}
}

// Unfold computes what a call of called with input changes in the tool set current: the
// facade is found beneath wrappers with tool.As (no facade: no
// change); it selects the children for input (an empty selection: no change); an
// exclusive facade removes every current tool, any other only itself; the selected
// children join, followed by the guide and context tools (NewGuideTool, NewContextTool)
// unless the facade's options switch them off.
func Unfold(ctx context.Context, called tool.Tool, input string, current []tool.Tool) (Unfolding, error) {
	f, ok := tool.As[tool.Facade](called)
	if !ok {
		return Unfolding{}, nil
	}
	selected, err := f.Select(ctx, input)
	if err != nil {
		return Unfolding{}, fmt.Errorf("progressive: unfolding '%s': %w", called.Definition().Name, err)
	}
	selected = nonNil(selected)
	if len(selected) == 0 {
		return Unfolding{}, nil
	}
	u := Unfolding{Facade: f, Selected: selected}
	if f.Options().Exclusive {
		u.Remove = append([]tool.Tool(nil), current...)
	} else {
		u.Remove = []tool.Tool{called}
	}
	u.Add = append([]tool.Tool(nil), selected...)
	def, opts := f.Definition(), f.Options()
	if !opts.NoGuideTool {
		u.Add = append(u.Add, NewGuideTool(def.Name, selected, opts.UsageNotes))
	}
	if !opts.NoContextTool {
		u.Add = append(u.Add, NewContextTool(def.Name, def.Description, selected, opts.UsageNotes))
	}
	return u, nil
}

func nonNil(tools []tool.Tool) []tool.Tool {
	out := make([]tool.Tool, 0, len(tools))
	for _, t := range tools {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

func names(tools []tool.Tool) []string {
	if len(tools) == 0 {
		return nil
	}
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Definition().Name
	}
	return out
}
