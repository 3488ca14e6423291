package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// shade is an enum type: every shade in a tool's input is one of its values.
type shade string

func (shade) EnumValues() []any { return []any{"light", "dark"} }

type orderLine struct {
	SKU   string `json:"sku" jsonschema:"stock-keeping unit"`
	Size  string `json:"size" enum:"S,M,L"`
	Shade shade  `json:"shade,omitempty"`
}

// typedTools are typed tools of the input kinds beyond structs, with enums.
func typedTools(t *testing.T) []tool.Tool {
	t.Helper()
	order, err := tool.Func("order", "Order lines of stock", func(_ context.Context, lines []orderLine) (string, error) {
		parts := make([]string, len(lines))
		for i, l := range lines {
			parts[i] = fmt.Sprintf("%s/%s/%s", l.SKU, l.Size, l.Shade)
		}
		return strings.Join(parts, " "), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pick, err := tool.Func("pick", "Pick a shade", func(_ context.Context, s shade) (string, error) { return "picked " + string(s), nil })
	if err != nil {
		t.Fatal(err)
	}
	return []tool.Tool{order, pick}
}

// TestTypedToolsRegister: the worker registers a typed tool of a list input (wrapped in
// "items") with an enum field, and one of an enum input, with the schemas Func infers,
// and serves calls of them.
func TestTypedToolsRegister(t *testing.T) {
	w, err := New(Options{Orchestrator: "127.0.0.1:7070"}, Group{Role: "orders", Tools: typedTools(t)})
	if err != nil {
		t.Fatal(err)
	}
	want := []*toolpb.ToolDefinition{
		{Name: "order", Description: "Order lines of stock", InputSchemaJson: `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{` +
			`"sku":{"type":"string","description":"stock-keeping unit"},` +
			`"size":{"type":"string","enum":["S","M","L"]},` +
			`"shade":{"type":"string","enum":["light","dark"]}},` +
			`"required":["sku","size"],"additionalProperties":false}}},"required":["items"],"additionalProperties":false}`},
		{Name: "pick", Description: "Pick a shade", InputSchemaJson: `{"type":"object","properties":{"input":{"type":"string","enum":["light","dark"]}},"required":["input"],"additionalProperties":false}`},
	}
	groups := w.Registration().GetGroups()
	if len(groups) != 1 {
		t.Fatalf("Registration() has %d groups, want 1", len(groups))
	}
	var got []*toolpb.ToolDefinition
	for _, rt := range groups[0].GetTools() {
		got = append(got, rt.GetDefinition())
		def, meta, err := wire.DefinitionFromProto(rt.GetDefinition())
		if err != nil || rt.GetContentHash() != wire.Hash(def, meta) {
			t.Errorf("tool %s: the registered definition does not read back with its hash (%v)", rt.GetDefinition().GetName(), err)
		}
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("registered definitions (-want +got):\n%s", diff)
	}

	served := start(t, Options{ID: "typed"}, Group{Role: "orders", Tools: typedTools(t)})
	ctx := testContext(t)
	tests := []struct {
		name, tool, args string
		want             *toolpb.InvokeResponse
		fragment         string // of the error message, when the outcome is an error
	}{
		{"list", "order", `{"items":[{"sku":"A","size":"M","shade":"dark"},{"sku":"B","size":"S"}]}`,
			&toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "A/M/dark B/S/"}}, ""},
		{"enum input", "pick", `{"input":"light"}`, &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "picked light"}}, ""},
		{"enum tag refuses another value", "order", `{"items":[{"sku":"A","size":"XL"}]}`,
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), `property "items[0].size": "XL" is not one of "S", "M", "L"`},
		{"enum type refuses another value", "pick", `{"input":"pale"}`,
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), `property "input": "pale" is not one of "light", "dark"`},
		{"list not wrapped", "order", `[{"sku":"A","size":"M"}]`,
			errorResponse(toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS), "arguments must be a JSON object, got array"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := served.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: tc.tool, ArgumentsJson: tc.args})
			if err != nil {
				t.Fatalf("Invoke: gRPC error %v", err)
			}
			if tc.fragment != "" {
				if !strings.Contains(resp.GetError().GetMessage(), tc.fragment) {
					t.Errorf("message %q does not mention %q", resp.GetError().GetMessage(), tc.fragment)
				}
				resp.GetError().Message = ""
			}
			if diff := cmp.Diff(tc.want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}
