package router

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const createdSchema = `{"type":"object","properties":{"sql":{"type":"string","description":"the query"}},"required":["sql"]}`

// createdQuery is the definition of the tool the database facade creates in these tests.
func createdQuery(name string) *toolpb.CreatedTool {
	return &toolpb.CreatedTool{
		Definition: &toolpb.ToolDefinition{Name: name, Description: "Query database at orders", InputSchemaJson: createdSchema},
		Template:   "query_db",
	}
}

// startDatabase registers two fake replicas of group db with the selectable facade
// database over the template query_db and the tool close; the facade answers with
// created, and the template answers "<replica> ran <created_tool> of <tool> with <state>"
// and appends "x" to the state.
func startDatabase(t *testing.T, created ...*toolpb.CreatedTool) (*Router, map[string]int, *sync.Mutex) {
	t.Helper()
	var mu sync.Mutex
	served := map[string]int{}
	handle := func(id string) func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return func(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
			if req.GetTool() == "database" {
				return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "opened"},
					Selection: &toolpb.Selection{Tools: []string{"close"}, State: []byte("orders|"), Created: created}}, nil
			}
			mu.Lock()
			served[id]++
			mu.Unlock()
			return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: fmt.Sprintf("%s ran %s of %s with %s", id, req.GetCreatedTool(), req.GetTool(), req.GetState())},
				State: append(req.GetState(), 'x'), StateChanged: true}, nil
		}
	}
	r := newRouter(t, Options{})
	sel := tool.Selectable("database", "Connect to a database", schema.Params(schema.String("conn", "the connection")), nil, nil)
	for _, id := range []string{"a", "b"} {
		w := startFake(t, handle(id))
		reg := registration(id, w.addr, "db", echoTool("query_db"), echoTool("close"))
		reg.Groups[0].Facades = []*toolpb.FacadeNode{{
			Definition: wire.DefinitionToProto(sel.Definition(), sel.Metadata()),
			Children:   []*toolpb.FacadeChild{toolChild("query_db"), toolChild("close")},
			Selectable: true,
		}}
		mustRegister(t, r, reg)
	}
	return r, served, &mu
}

// databaseFacade is the facade database as the loop sees it.
func databaseFacade(t *testing.T, r *Router) tool.Facade {
	t.Helper()
	_, top, err := r.Group("db")
	if err != nil || len(top) != 1 {
		t.Fatalf("top = %v, %v", names(top), err)
	}
	f, ok := tool.As[tool.Facade](top[0])
	if !ok {
		t.Fatalf("%s is not a facade", top[0].Definition().Name)
	}
	return f
}

// TestCreatedToolsRouteToTemplate: a selection's created tools are offered under their
// own definitions, bound to the selection's state; their calls go to any replica as
// calls of the template with created_tool set, and the state they return is kept.
func TestCreatedToolsRouteToTemplate(t *testing.T) {
	r, served, mu := startDatabase(t, createdQuery("query_orders"))
	f := databaseFacade(t, r)
	ctx := testContext(t)
	res, err := f.Call(ctx, `{"conn":"orders"}`)
	if err != nil || res.Content != "Tools now available: close, query_orders. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool." {
		t.Fatalf("facade call = %q, %v", res.Content, err)
	}
	chosen, err := f.Select(ctx, `{"conn":"orders"}`)
	if err != nil || cmp.Diff([]string{"close", "query_orders"}, names(chosen)) != "" {
		t.Fatalf("Select = %v, %v", names(chosen), err)
	}
	q := chosen[1]
	def := q.Definition()
	if def.Description != "Query database at orders" || string(def.InputSchema.JSON()) != createdSchema {
		t.Errorf("created definition = %q %s", def.Description, def.InputSchema.JSON())
	}
	var got []string
	for range 4 {
		res, err := q.Call(ctx, `{"sql":"SELECT 1"}`)
		if err != nil || res.IsError() {
			t.Fatalf("query_orders = %+v, %v", res, err)
		}
		got = append(got, res.Content[2:]) // without the replica
	}
	want := []string{"ran query_orders of query_db with orders|", "ran query_orders of query_db with orders|x", "ran query_orders of query_db with orders|xx", "ran query_orders of query_db with orders|xxx"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	res, err = chosen[0].Call(ctx, `{"text":"bye"}`)
	if err != nil || !strings.HasSuffix(res.Content, "ran  of close with orders|xxxx") {
		t.Errorf("close = %q, %v; want the state the created tool left", res.Content, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if served["a"] == 0 || served["b"] == 0 {
		t.Errorf("calls were not spread over both replicas: %v", served)
	}
}

// TestCreatedToolsRefused: a selection whose created tools cannot be offered fails the
// facade's call with an error that names the tool and the problem.
func TestCreatedToolsRefused(t *testing.T) {
	const prefix = "selecting the tools of 'database': "
	many := make([]*toolpb.CreatedTool, 65)
	for i := range many {
		many[i] = createdQuery(fmt.Sprintf("query_%d", i))
	}
	badSchema := createdQuery("query_orders")
	badSchema.Definition.InputSchemaJson = `{"type":"object","properties":` + strings.Repeat(" ", 64<<10) + `{}}`
	longDesc := createdQuery("query_orders")
	longDesc.Definition.Description = strings.Repeat("d", 8<<10+1)
	notChild := createdQuery("query_orders")
	notChild.Template = "nowhere"
	facadeTemplate := createdQuery("query_orders")
	facadeTemplate.Template = "database"
	tests := []struct {
		name    string
		created []*toolpb.CreatedTool
		want    string
	}{
		{"over 64", many, "facade 'database' created 65 tools; a selection may create at most 64"},
		{"a bad name", []*toolpb.CreatedTool{createdQuery("query orders")}, `facade 'database' created a tool that cannot be offered: created tool 'query orders': name "query orders" must match ^[a-zA-Z0-9_-]{1,64}$`},
		{"no definition", []*toolpb.CreatedTool{{Template: "query_db"}}, "facade 'database' created a tool that cannot be offered: a created tool of template 'query_db' has no definition"},
		{"a schema over 64 KiB", []*toolpb.CreatedTool{badSchema}, "facade 'database' created a tool that cannot be offered: created tool 'query_orders': input schema is 65569 bytes; the limit is 65536"},
		{"a description over 8 KiB", []*toolpb.CreatedTool{longDesc}, "facade 'database' created a tool that cannot be offered: created tool 'query_orders': description is 8193 bytes; the limit is 8192"},
		{"a template that is not a child", []*toolpb.CreatedTool{notChild}, "facade 'database' created 'query_orders' from template 'nowhere', which is not a tool among its children"},
		{"a child's name", []*toolpb.CreatedTool{createdQuery("close")}, "facade 'database' created 'close', a name the facade, one of its children or another tool of the selection already has"},
		{"twice", []*toolpb.CreatedTool{createdQuery("query_orders"), createdQuery("query_orders")}, "facade 'database' created 'query_orders', a name the facade, one of its children or another tool of the selection already has"},
		{"the facade's name", []*toolpb.CreatedTool{createdQuery("database")}, "facade 'database' created 'database', a name the facade, one of its children or another tool of the selection already has"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := startDatabase(t, tc.created...)
			res, err := databaseFacade(t, r).Call(testContext(t), `{"conn":"orders"}`)
			if err != nil || !res.IsError() || res.Content != prefix+tc.want {
				t.Errorf("facade call = %q (error %v), %v; want the error %q", res.Content, res.IsError(), err, prefix+tc.want)
			}
		})
	}
}
