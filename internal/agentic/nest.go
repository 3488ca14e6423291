package agentic

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Nester is what an agentic tool needs of the run it is called in.
type Nester interface {
	// Decorate wraps a sub-tool as the run wraps its own tools; nil when the run may not
	// use it (outside its tenant's grant), and the nested loop goes without it.
	Decorate(t tool.Tool) tool.Tool
	// RunLoop runs a nested loop to its end. An error is one the loop ended with, or a
	// limit of nesting the run refuses the loop with.
	RunLoop(ctx context.Context, l Loop) (*loop.Result, error)
}

// Hider is what a Nester may also be: it reports the keys of the ToolCallContext a model
// must not read (a secret of the orchestrator's config, a well-known credential key). A
// system prompt template does not see them; under a Nester that is no Hider it sees no
// context at all.
type Hider interface {
	Hidden(key string) bool
}

// Loop is a nested loop an agentic tool asks for.
type Loop struct {
	// Tool is the agentic tool's name, Kind its kind.
	Tool string
	Kind Kind
	// System is the nested loop's system prompt; Input, the tool's arguments as JSON, its
	// user message.
	System, Input string
	// Tools are the sub-tools, decorated and wrapped as the kind needs.
	Tools []tool.Tool
	// Model and Role choose the model as a run's do; both empty mean the calling loop's.
	Model, Role string
	// MaxIterations bounds the loop's model calls (loop.DefaultMaxIterations when zero).
	MaxIterations int
	// Temperature and MaxOutputTokens, when set, replace the calling loop's.
	Temperature     *float64
	MaxOutputTokens int
	// Context is the interaction level of the ToolCallContext: it wins over the run's.
	Context toolctx.Context
	// Sources and FromAny configure tool chaining in the loop (see Spec); no sources
	// mean the calling run's.
	Sources []Source
	FromAny bool
	// OutputSchema, when set, is the schema the loop's final answer must satisfy, as a
	// run's output schema (one corrective turn, then an error).
	OutputSchema *loop.OutputSchema
}

type nesterKey struct{}

// WithNester returns ctx carrying n.
func WithNester(ctx context.Context, n Nester) context.Context {
	return context.WithValue(ctx, nesterKey{}, n)
}

// NesterFrom is the Nester in ctx; nil outside a run.
func NesterFrom(ctx context.Context) Nester {
	n, _ := ctx.Value(nesterKey{}).(Nester)
	return n
}
