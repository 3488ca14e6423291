package tool

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/pkg/schema"
)

// A selectable facade's selector may create tools for the arguments of a call: "Query
// database at orders-replica" for {"connection":"orders-replica"}, with the connection
// captured in the tool. Across the mesh the orchestrator sends each call of a created
// tool to any replica of the facade's group, which never saw the selection; so every
// created tool comes from a Template, a tool registered among the facade's children
// whose factory rebuilds the created tools from the state the selection binds them to.
// The selector sets that state (StateFrom) and returns what Create makes of it; a
// replica that receives a call of a created tool calls the factory with the call's state
// and runs the tool of that name.

// TemplateFactory makes the tools a template creates for a state: the configuration a
// selector captured, as the bytes of the selection's state. It must make the same tools
// from the same state on every replica, and it runs for every call of a created tool, so
// it should be cheap.
type TemplateFactory func(ctx context.Context, state []byte) ([]Tool, error)

// Template is a tool that creates tools from state. List it among the children of the
// selectable facade whose selector uses it (so that the facade's group registers it);
// the model never calls it: its own Call answers with an error that says so.
type Template interface {
	Tool
	// Create returns the tools the template makes for state.
	Create(ctx context.Context, state []byte) ([]Tool, error)
}

// NewTemplate returns a template named name, described by description, whose factory
// makes the tools it creates.
func NewTemplate(name, description string, factory TemplateFactory) Template {
	return &template{name: name, description: description, factory: factory}
}

type template struct {
	name, description string
	factory           TemplateFactory
}

var _ Template = (*template)(nil)

func (t *template) Definition() Definition {
	return Definition{Name: t.name, Description: t.description, InputSchema: schema.Params()}
}

func (t *template) Metadata() Metadata { return Metadata{} }

// Call refuses: a template serves only the tools it creates.
func (t *template) Call(context.Context, string) (Result, error) {
	return ErrorWithCode(CodeInvalidArguments, fmt.Sprintf("tool '%s' is a template: call one of the tools its facade creates instead", t.name)), nil
}

// Create calls the factory, dropping nil tools.
func (t *template) Create(ctx context.Context, state []byte) ([]Tool, error) {
	made, err := t.factory(ctx, state)
	if err != nil {
		return nil, fmt.Errorf("template '%s': %w", t.name, err)
	}
	out := make([]Tool, 0, len(made))
	for _, m := range made {
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}
