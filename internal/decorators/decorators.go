// Package decorators holds the orchestrator's tool wrappers. Every wrapper is a
// tool.Delegating: it exposes its delegate, keeps the definition and metadata, and passes
// the call's context through untouched, so the ToolCallContext reaches the tool.
//
// Chain (chain.go) is the orchestrator's chain and says in which order its layers wrap a
// tool. It depends on pkg/tool, pkg/toolctx, internal/toolinternal, internal/telemetry and
// internal/process (the run state that the assets sink writes to); CEL
// (cel.dev/cel-go) evaluates the configured filters and transforms.
package decorators

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Decorator wraps a tool.
type Decorator func(tool.Tool) tool.Tool

// Apply wraps t in ds, the first decorator innermost.
func Apply(t tool.Tool, ds ...Decorator) tool.Tool {
	for _, d := range ds {
		t = d(t)
	}
	return t
}

// base forwards everything to the delegate; wrappers embed it and override Call.
type base struct{ d tool.Tool }

func (b base) Definition() tool.Definition { return b.d.Definition() }
func (b base) Metadata() tool.Metadata     { return b.d.Metadata() }
func (b base) Delegate() tool.Tool         { return b.d }

// errorMapping turns a returned error into an error result, so that a failing tool
// never ends a run. Control-flow signals pass through. (Panics are recovered once, by
// whatever runs the call: internal/toolcall.)
type errorMapping struct{ base }

// ErrorMapping wraps t so that its returned errors reach the model as error results.
func ErrorMapping(t tool.Tool) tool.Tool { return errorMapping{base{t}} }

func (e errorMapping) Call(ctx context.Context, input string) (tool.Result, error) {
	res, err := e.d.Call(ctx, input)
	if err != nil {
		var sig tool.Signal
		if errors.As(err, &sig) {
			return tool.Result{}, err
		}
		return tool.ErrorFrom(err), nil
	}
	return res, nil
}
