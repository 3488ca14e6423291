package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const sqlSchema = `{"type":"object","properties":{"sql":{"type":"string","description":"the query"}},"required":["sql"]}`

// queryTemplate creates "query_<conn>" ("Query database at <conn>") from the state
// {"conn":"<conn>"}; the tool answers "<conn>: <sql>", and "<sql>" = "bump" sets the
// state to {"conn":"<conn>","bumped":true}.
func queryTemplate() tool.Template {
	return tool.NewTemplate("query_db", "Queries a database", func(_ context.Context, state []byte) ([]tool.Tool, error) {
		var s struct {
			Conn string `json:"conn"`
		}
		if err := json.Unmarshal(state, &s); err != nil || s.Conn == "" {
			return nil, fmt.Errorf("no connection in state %q", state)
		}
		return []tool.Tool{tool.New("query_"+s.Conn, "Query database at "+s.Conn, schema.Params(schema.String("sql", "the query")),
			func(ctx context.Context, input string) (tool.Result, error) {
				var in struct{ SQL string }
				_ = json.Unmarshal([]byte(input), &in)
				if in.SQL == "bump" {
					tool.StateFrom(ctx).Set([]byte(`{"conn":"` + s.Conn + `","bumped":true}`))
				}
				return tool.Text(s.Conn + ": " + in.SQL), nil
			})}, nil
	})
}

// databaseGroup is a group whose facade "database" creates a query tool for the
// connection its call names, via select (nil: the template's Create with the state).
func databaseGroup(tmpl tool.Template, children []tool.Tool, sel func(ctx context.Context, conn string, state []byte) ([]tool.Tool, error)) Group {
	if sel == nil {
		sel = func(ctx context.Context, _ string, state []byte) ([]tool.Tool, error) { return tmpl.Create(ctx, state) }
	}
	f := tool.Selectable("database", "Connect to a database", schema.Params(schema.String("conn", "the connection")), children,
		tool.SelectorFunc(func(ctx context.Context, input string) ([]tool.Tool, error) {
			var in struct{ Conn string }
			if err := json.Unmarshal([]byte(input), &in); err != nil {
				return nil, err
			}
			state := []byte(`{"conn":"` + in.Conn + `"}`)
			tool.StateFrom(ctx).Set(state)
			return sel(ctx, in.Conn, state)
		}))
	return Group{Role: "db", Facades: []tool.Facade{f}}
}

// TestCreatedToolSelection: a selection answers the tools its selector created with
// their own definitions and their template, next to the registered tools it chose; the
// template is registered as a tool of the group.
func TestCreatedToolSelection(t *testing.T) {
	ctx := testContext(t)
	tmpl := queryTemplate()
	w := start(t, Options{ID: "a"}, databaseGroup(tmpl, []tool.Tool{tmpl, leaf("close")}, func(ctx context.Context, _ string, state []byte) ([]tool.Tool, error) {
		made, err := tmpl.Create(ctx, state)
		return append(made, leaf("close")), err
	}))
	grs, err := groupRegistrations(databaseGroup(tmpl, []tool.Tool{tmpl, leaf("close")}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := registered(grs[0]); !cmp.Equal(got, []string{"close", "query_db"}) {
		t.Errorf("registered tools = %v, want close and the template query_db", got)
	}
	resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "database", ArgumentsJson: `{"conn":"orders"}`})
	if err != nil {
		t.Fatal(err)
	}
	want := &toolpb.InvokeResponse{
		Outcome: &toolpb.InvokeResponse_Text{Text: "Tools now available: query_orders, close. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."},
		Selection: &toolpb.Selection{
			Tools: []string{"close"},
			State: []byte(`{"conn":"orders"}`),
			Created: []*toolpb.CreatedTool{{
				Definition: &toolpb.ToolDefinition{Name: "query_orders", Description: "Query database at orders", InputSchemaJson: sqlSchema},
				Template:   "query_db",
			}},
		},
		State:        []byte(`{"conn":"orders"}`),
		StateChanged: true,
	}
	if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
		t.Errorf("selection (-want +got):\n%s", diff)
	}
}

// TestCreatedToolOnAnotherReplica: a replica that never ran the selection serves the
// created tool from the template and the state, validates the arguments against the
// created tool's schema, and returns the state the tool sets.
func TestCreatedToolOnAnotherReplica(t *testing.T) {
	ctx := testContext(t)
	mk := func() Group { tmpl := queryTemplate(); return databaseGroup(tmpl, []tool.Tool{tmpl}, nil) }
	a := start(t, Options{ID: "a"}, mk())
	b := start(t, Options{ID: "b"}, mk())
	sel, err := a.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "database", ArgumentsJson: `{"conn":"orders"}`})
	if err != nil {
		t.Fatal(err)
	}
	state := sel.GetSelection().GetState()
	tests := []struct {
		name     string
		req      *toolpb.InvokeRequest
		want     string
		isError  bool
		newState string
	}{
		{"a query", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query_orders", ArgumentsJson: `{"sql":"SELECT 1"}`, State: state}, "orders: SELECT 1", false, ""},
		{"a state change", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query_orders", ArgumentsJson: `{"sql":"bump"}`, State: state}, "orders: bump", false, `{"conn":"orders","bumped":true}`},
		{"bad arguments", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query_orders", ArgumentsJson: `{"sql":1}`, State: state},
			`invalid arguments for tool 'query_orders': property "sql": expected string, got integer`, true, ""},
		{"another name", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query_users", ArgumentsJson: `{"sql":"SELECT 1"}`, State: state},
			"tool 'query_users' cannot be called: template 'query_db' creates no tool of that name from the state it is bound to", true, ""},
		{"no state", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query_orders", ArgumentsJson: `{"sql":"SELECT 1"}`},
			`tool 'query_orders' cannot be rebuilt from its state: template 'query_db': no connection in state ""`, true, ""},
		{"a bad created_tool", &toolpb.InvokeRequest{Tool: "query_db", CreatedTool: "query orders", ArgumentsJson: `{}`, State: state},
			`created_tool "query orders" must match ^[a-zA-Z0-9_-]{1,64}$`, true, ""},
		{"the template itself", &toolpb.InvokeRequest{Tool: "query_db", ArgumentsJson: `{}`, State: state},
			"tool 'query_db' is a template: call one of the tools its facade creates instead", true, ""},
		{"not a template", &toolpb.InvokeRequest{Tool: "database", CreatedTool: "query_orders", ArgumentsJson: `{}`, State: state},
			"tool 'query_orders' cannot be called: 'database' is not a template, so it serves no created tools", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := b.client().Invoke(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got, isError := resp.GetText(), resp.GetError() != nil
			if isError {
				got = resp.GetError().GetMessage()
			}
			if got != tc.want || isError != tc.isError {
				t.Errorf("result = %q (error %v), want %q (error %v)", got, isError, tc.want, tc.isError)
			}
			if string(resp.GetState()) != tc.newState || resp.GetStateChanged() != (tc.newState != "") {
				t.Errorf("state = %q (changed %v), want %q", resp.GetState(), resp.GetStateChanged(), tc.newState)
			}
		})
	}
}

// TestCreatedToolRebuildFailureQuotingItsState: a template's error (or panic) quoting a
// state that is not UTF-8 reaches the model as an error result, the bytes replaced (it
// failed the call as a bare INTERNAL status, read as a worker that failed).
func TestCreatedToolRebuildFailureQuotingItsState(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name   string
		create func(state []byte) ([]tool.Tool, error)
		want   string
	}{
		{"an error", func(state []byte) ([]tool.Tool, error) { return nil, fmt.Errorf("no connection in %s", state) },
			"tool 'query_raw' cannot be rebuilt from its state: template 'raw_db': no connection in conn \uFFFD"},
		{"a panic", func(state []byte) ([]tool.Tool, error) { panic(fmt.Sprintf("no connection in %s", state)) },
			"no connection in conn \uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tool.NewTemplate("raw_db", "Queries a database", func(_ context.Context, state []byte) ([]tool.Tool, error) {
				return tc.create(state)
			})
			w := start(t, Options{ID: "a"}, databaseGroup(raw, []tool.Tool{raw}, nil))
			resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "raw_db", CreatedTool: "query_raw", ArgumentsJson: `{}`, State: []byte("conn \xff")})
			if err != nil {
				t.Fatalf("Invoke: %v; a failed rebuild is an error result", err)
			}
			if got := resp.GetError().GetMessage(); !strings.Contains(got, tc.want) {
				t.Errorf("message = %q, want it to hold %q", got, tc.want)
			}
		})
	}
}

// TestCreatedToolRejects: a selection whose created tools no replica could serve, or the
// orchestrator would refuse, fails the facade's call with an error naming the tool.
func TestCreatedToolRejects(t *testing.T) {
	ctx := testContext(t)
	other := tool.NewTemplate("other_db", "Another template", func(_ context.Context, _ []byte) ([]tool.Tool, error) {
		return []tool.Tool{leaf("query_other")}, nil
	})
	long := tool.NewTemplate("long_db", "Makes a tool with a long description", func(_ context.Context, _ []byte) ([]tool.Tool, error) {
		return []tool.Tool{tool.WithDescription(leaf("query_orders"), strings.Repeat("x", 8<<10+1))}, nil
	})
	tests := []struct {
		name     string
		children func(tmpl tool.Template) []tool.Tool
		sel      func(tmpl tool.Template) func(ctx context.Context, conn string, state []byte) ([]tool.Tool, error)
		want     string
	}{
		{
			name:     "a template not among the children",
			children: func(tmpl tool.Template) []tool.Tool { return []tool.Tool{tmpl} },
			sel: func(tool.Template) func(context.Context, string, []byte) ([]tool.Tool, error) {
				return func(ctx context.Context, _ string, state []byte) ([]tool.Tool, error) {
					return other.Create(ctx, state)
				}
			},
			want: "facade 'database' created 'query_other', which no template among its children makes from the selection's state: a selector must create its tools with a template's Create and the state it sets, so that every replica can rebuild them",
		},
		{
			name:     "a tool the state does not rebuild",
			children: func(tmpl tool.Template) []tool.Tool { return []tool.Tool{tmpl} },
			sel: func(tmpl tool.Template) func(context.Context, string, []byte) ([]tool.Tool, error) {
				return func(ctx context.Context, _ string, _ []byte) ([]tool.Tool, error) {
					return tmpl.Create(ctx, []byte(`{"conn":"elsewhere"}`))
				}
			},
			want: "facade 'database' created 'query_elsewhere', which no template among its children makes from the selection's state: a selector must create its tools with a template's Create and the state it sets, so that every replica can rebuild them",
		},
		{
			name:     "a name a child has",
			children: func(tmpl tool.Template) []tool.Tool { return []tool.Tool{tmpl, leaf("query_orders")} },
			want:     "facade 'database' created 'query_orders', a name the facade, one of its children or another tool of the selection already has: a created tool needs a name of its own",
		},
		{
			name:     "a description over 8 KiB",
			children: func(tool.Template) []tool.Tool { return []tool.Tool{long} },
			sel: func(tool.Template) func(context.Context, string, []byte) ([]tool.Tool, error) {
				return func(ctx context.Context, _ string, state []byte) ([]tool.Tool, error) { return long.Create(ctx, state) }
			},
			want: "facade 'database' created a tool that cannot be offered: created tool 'query_orders': description is 8193 bytes; the limit is 8192",
		},
		{
			name:     "a failing template",
			children: func(tmpl tool.Template) []tool.Tool { return []tool.Tool{tmpl} },
			sel: func(tmpl tool.Template) func(context.Context, string, []byte) ([]tool.Tool, error) {
				return func(ctx context.Context, _ string, _ []byte) ([]tool.Tool, error) {
					return tmpl.Create(ctx, []byte(`{}`))
				}
			},
			want: `selecting the tools of 'database': template 'query_db': no connection in state "{}"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := queryTemplate()
			var sel func(context.Context, string, []byte) ([]tool.Tool, error)
			if tc.sel != nil {
				sel = tc.sel(tmpl)
			}
			w := start(t, Options{ID: "a"}, databaseGroup(tmpl, tc.children(tmpl), sel))
			resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "database", ArgumentsJson: `{"conn":"orders"}`})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetError().GetMessage() != tc.want || resp.GetSelection() != nil || resp.GetStateChanged() {
				t.Errorf("response = %v, want the error %q and no selection", resp, tc.want)
			}
		})
	}
}
