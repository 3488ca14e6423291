package tool_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// echoTool returns its input and the call-context value it finds in ctx, so that tests
// can see that wrappers keep behaviour and pass ctx through.
func echoTool(name, description string, opts ...tool.Option) tool.Tool {
	return tool.New(name, description, schema.Params(schema.String("q", "Query")),
		func(ctx context.Context, in string) (tool.Result, error) {
			v, _ := ctx.Value(ctxKey{}).(string)
			return tool.Text(in + "|" + v), nil
		}, opts...)
}

func TestWrappers(t *testing.T) {
	base := echoTool("base", "Base", tool.ReturnDirect(), tool.Timeout(time.Second),
		tool.DefinitionMetadata(map[string]string{"owner": "a", "keep": "yes"}))
	schema := base.Definition().InputSchema
	meta := map[string]string{"owner": "a", "keep": "yes"}

	tests := []struct {
		name    string
		tool    tool.Tool
		wantDef tool.Definition
	}{
		{"WithName", tool.WithName(base, "renamed"),
			tool.Definition{Name: "renamed", Description: "Base", InputSchema: schema, Metadata: meta}},
		{"WithDescription", tool.WithDescription(base, "Other"),
			tool.Definition{Name: "base", Description: "Other", InputSchema: schema, Metadata: meta}},
		{"WithNote", tool.WithNote(base, "Note 1"),
			tool.Definition{Name: "base", Description: "Base. Note 1", InputSchema: schema, Metadata: meta}},
		{"WithNote chained", tool.WithNote(tool.WithNote(base, "Note 1"), "Note 2"),
			tool.Definition{Name: "base", Description: "Base. Note 1. Note 2", InputSchema: schema, Metadata: meta}},
		{"WithDescription then WithNote", tool.WithNote(tool.WithDescription(base, "New base"), "Additional info"),
			tool.Definition{Name: "base", Description: "New base. Additional info", InputSchema: schema, Metadata: meta}},
		{"WithNote after a period", tool.WithNote(tool.WithDescription(base, "Ends with a period."), "Note"),
			tool.Definition{Name: "base", Description: "Ends with a period.. Note", InputSchema: schema, Metadata: meta}},
		{"WithNote on empty description", tool.WithNote(tool.WithDescription(base, ""), "Note"),
			tool.Definition{Name: "base", Description: ". Note", InputSchema: schema, Metadata: meta}},
		{"WithDefinitionMetadata merges and overwrites", tool.WithDefinitionMetadata(base, map[string]string{"owner": "b", "new": "1"}),
			tool.Definition{Name: "base", Description: "Base", InputSchema: schema, Metadata: map[string]string{"owner": "b", "keep": "yes", "new": "1"}}},
		{"WithDefinitionMetadata empty", tool.WithDefinitionMetadata(base, nil),
			tool.Definition{Name: "base", Description: "Base", InputSchema: schema, Metadata: meta}},
		{"metadata kept through rename and note", tool.WithNote(tool.WithName(tool.WithDefinitionMetadata(base, map[string]string{"x": "y"}), "n"), "N"),
			tool.Definition{Name: "n", Description: "Base. N", InputSchema: schema, Metadata: map[string]string{"owner": "a", "keep": "yes", "x": "y"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.wantDef, tt.tool.Definition()); diff != "" {
				t.Errorf("Definition() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(base.Metadata(), tt.tool.Metadata()); diff != "" {
				t.Errorf("Metadata() not kept (-base +got):\n%s", diff)
			}
			d, ok := tt.tool.(tool.Delegating)
			if !ok || d.Delegate() == nil {
				t.Fatalf("%T is not Delegating", tt.tool)
			}
			if tool.Unwrap(tt.tool) != base {
				t.Error("Unwrap does not reach the base tool")
			}
			ctx := context.WithValue(context.Background(), ctxKey{}, "ctx rides along")
			got, err := tt.tool.Call(ctx, `{"q":"x"}`)
			if err != nil || got != tool.Text(`{"q":"x"}|ctx rides along`) {
				t.Errorf("Call = %+v, %v; want the base tool's behaviour with ctx passed through", got, err)
			}
		})
	}
	if diff := cmp.Diff(meta, base.Definition().Metadata); diff != "" {
		t.Errorf("wrapping changed the base tool's metadata:\n%s", diff)
	}
}

func TestWithDefinitionMetadataCopiesMap(t *testing.T) {
	m := map[string]string{"k": "v"}
	tl := tool.WithDefinitionMetadata(echoTool("t", ""), m)
	m["k"] = "changed"
	tl.Definition().Metadata["k"] = "changed too"
	if got := tl.Definition().Metadata["k"]; got != "v" {
		t.Errorf("metadata = %q, want v", got)
	}
}

// Wrappers read the delegate's definition on every call, so they follow a delegate
// whose definition changes.
func TestWrapperFollowsDelegate(t *testing.T) {
	d := &mutableTool{Tool: echoTool("t", "First")}
	tl := tool.WithNote(d, "Note")
	if got := tl.Definition().Description; got != "First. Note" {
		t.Errorf("description = %q", got)
	}
	d.desc = "Second"
	if got := tl.Definition().Description; got != "Second. Note" {
		t.Errorf("description after change = %q", got)
	}
}

type mutableTool struct {
	tool.Tool
	desc string
}

func (m *mutableTool) Definition() tool.Definition {
	d := m.Tool.Definition()
	if m.desc != "" {
		d.Description = m.desc
	}
	return d
}

type group struct {
	tool.Tool
	inner []tool.Tool
}

func (g group) Children() []tool.Tool { return g.inner }

func TestAs(t *testing.T) {
	g := group{Tool: echoTool("g", ""), inner: []tool.Tool{echoTool("a", "")}}
	wrapped := tool.WithNote(tool.WithName(g, "renamed"), "n")
	found, ok := tool.As[interface{ Children() []tool.Tool }](wrapped)
	if !ok || len(found.Children()) != 1 {
		t.Errorf("As found %v, %v; want the group beneath the wrappers", found, ok)
	}
	if _, ok := tool.As[interface{ Children() []tool.Tool }](echoTool("plain", "")); ok {
		t.Error("As found Children on a plain tool")
	}
	if _, ok := tool.As[tool.Delegating](nil); ok {
		t.Error("As(nil) found something")
	}
}
