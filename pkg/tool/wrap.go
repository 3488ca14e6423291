package tool

import (
	"context"
	"maps"
)

// wrapper changes what the model sees of a tool and nothing else. It reads the
// delegate's definition on every call rather than copying it, so that a wrapper over a
// tool whose definition changes (or over another wrapper) stays in step.
type wrapper struct {
	delegate Tool
	edit     func(*Definition)
}

var _ Delegating = (*wrapper)(nil)

func (w *wrapper) Definition() Definition {
	d := w.delegate.Definition()
	w.edit(&d)
	return d
}

func (w *wrapper) Metadata() Metadata { return w.delegate.Metadata() }

// Call passes ctx through unchanged: the ToolCallContext of the call travels in it.
func (w *wrapper) Call(ctx context.Context, input string) (Result, error) {
	return w.delegate.Call(ctx, input)
}

func (w *wrapper) Delegate() Tool { return w.delegate }

// WithName returns t under another name; description, schema, metadata and behaviour
// are t's.
func WithName(t Tool, name string) Tool {
	return &wrapper{delegate: t, edit: func(d *Definition) { d.Name = name }}
}

// WithDescription returns t with another description.
func WithDescription(t Tool, description string) Tool {
	return &wrapper{delegate: t, edit: func(d *Definition) { d.Description = description }}
}

// WithNote returns t with note appended to its description as "<description>. <note>".
// The separator is always ". ", even after a description that ends with a period, so
// that models always see the same text.
func WithNote(t Tool, note string) Tool {
	return &wrapper{delegate: t, edit: func(d *Definition) { d.Description = d.Description + ". " + note }}
}

// WithDefinitionMetadata returns t with m merged into its definition metadata; m's
// entries win over t's.
func WithDefinitionMetadata(t Tool, m map[string]string) Tool {
	m = maps.Clone(m)
	return &wrapper{delegate: t, edit: func(d *Definition) {
		if len(m) == 0 {
			return
		}
		merged := maps.Clone(d.Metadata)
		if merged == nil {
			merged = make(map[string]string, len(m))
		}
		maps.Copy(merged, m)
		d.Metadata = merged
	}}
}

// As returns the first tool in t's delegate chain, starting with t itself, that is a
// T. Wrappers hide the interfaces of the tools they wrap; As finds them again.
func As[T any](t Tool) (T, bool) {
	for t != nil {
		if x, ok := t.(T); ok {
			return x, true
		}
		d, ok := t.(Delegating)
		if !ok {
			break
		}
		t = d.Delegate()
	}
	var zero T
	return zero, false
}
