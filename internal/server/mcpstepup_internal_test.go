package server

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A step-up reads a body as the MCP SDK does: one request of tools/call, keys as written;
// a batch, a notification, another method or another key's case is none.
func TestStepUpReadsOneCall(t *testing.T) {
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge"}}`:   "charge",
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"charge"}}`: "charge",
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge"}}]`: "",
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge"}}`:          "",
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"charge"}}`:   "",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"charge"}}`:   "",
		`{"jsonrpc":"2.0","id":1,"METHOD":"tools/call","params":{"name":"charge"}}`:   "",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`:                "",
		`not json`: "",
	} {
		if _, got, _ := calledTool([]byte(body)); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

// A tool under a facade is offered to a session where the facade is (it unfolds there)
// and, to a 2026-07-28 request, where the tool itself is (facades come unfolded there,
// and are not offered themselves); under a selectable facade, whose tools are bound to
// a session's selection, it is not judged offered.
func TestStepUpJudgesFacadesAsTheSessionOffersThem(t *testing.T) {
	leaf := func(name string) tool.Tool {
		return tool.New(name, name+".", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("ok"), nil })
	}
	plain := tool.Of("payments", "Payments.", []tool.Tool{leaf("charge")})
	sel := tool.Selectable("picked", "Picked.", schema.Empty(), []tool.Tool{leaf("pick")},
		tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) { return nil, nil }))
	catalog := []tool.Tool{plain, sel, leaf("credit")}
	but := func(names ...string) func(tool.Tool) tool.Tool {
		return func(t tool.Tool) tool.Tool {
			for _, n := range names {
				if t.Definition().Name == n {
					return nil
				}
			}
			return t
		}
	}
	for _, tc := range []struct {
		name      string
		wrap      func(tool.Tool) tool.Tool
		stateless bool
		want      bool
		under     string
	}{
		{"charge", but(), false, true, "payments"},
		{"charge", but("payments"), false, false, ""},
		{"charge", but("payments"), true, true, ""},
		{"charge", but("charge"), true, false, ""},
		{"payments", but(), false, true, ""},
		{"payments", but(), true, false, ""},
		{"pick", but(), false, false, ""},
		{"credit", but(), true, true, ""},
		{"nope", but(), false, false, ""},
	} {
		if got, under := offered(catalog, tc.wrap, tc.name, tc.stateless, 0); (got != nil) != tc.want || under != tc.under || (got != nil && got.Definition().Name != tc.name) {
			t.Errorf("%s (stateless %v): offered %v under %q, want %v under %q", tc.name, tc.stateless, got, under, tc.want, tc.under)
		}
	}
}

// A scope's width, for the narrowest to be asked for, counts the tools under facades too:
// one that grants two tools inside a facade is wider than one that grants one.
func TestStepUpCountsToolsUnderFacades(t *testing.T) {
	leaf := func(name string) tool.Tool {
		return tool.New(name, name+".", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("ok"), nil })
	}
	catalog := []tool.Tool{tool.Of("payments", "Payments.", []tool.Tool{leaf("charge"), leaf("credit")}), leaf("refund")}
	for _, tc := range []struct {
		patterns []string
		want     int
	}{{[]string{"charge", "credit"}, 2}, {[]string{"charge"}, 1}, {[]string{"*"}, 4}, {[]string{"payments"}, 1}} {
		if got := granting(catalog, tc.patterns, 0); got != tc.want {
			t.Errorf("%v grants %d tools, want %d", tc.patterns, got, tc.want)
		}
	}
}
