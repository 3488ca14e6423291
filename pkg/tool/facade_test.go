package tool_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// unfoldText is the unfold message, spelt out so that the test pins it.
func unfoldText(list string) string {
	return "Tools now available: " + list + ". You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."
}

// leaf returns a tool that answers "<name> got <input>".
func leaf(name string) tool.Tool {
	return tool.New(name, "the "+name+" tool", schema.Empty(), func(_ context.Context, in string) (tool.Result, error) {
		return tool.Text(name + " got " + in), nil
	})
}

func leaves(ns ...string) []tool.Tool {
	out := make([]tool.Tool, len(ns))
	for i, n := range ns {
		out[i] = leaf(n)
	}
	return out
}

func toolNames(ts []tool.Tool) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Definition().Name)
	}
	return out
}

func mustCall(t *testing.T, tl tool.Tool, input string) tool.Result {
	t.Helper()
	res, err := tl.Call(context.Background(), input)
	if err != nil {
		t.Fatalf("Call(%q): %v", input, err)
	}
	return res
}

func mustSelect(t *testing.T, f tool.Facade, input string) []string {
	t.Helper()
	got, err := f.Select(context.Background(), input)
	if err != nil {
		t.Fatalf("Select(%q): %v", input, err)
	}
	return toolNames(got)
}

func TestUnfoldMessage(t *testing.T) {
	tests := []struct {
		name     string
		selected []string
		notes    string
		want     string
	}{
		{"names, no notes", []string{"a", "b"}, "", unfoldText("a, b")},
		{"blank notes are left out", []string{"a"}, " \n\t", unfoldText("a")},
		{"notes after a blank line, verbatim", []string{"a", "b"}, "Use a first.\n", unfoldText("a, b") + "\n\nUse a first.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toolinternal.UnfoldMessage(tt.selected, tt.notes); got != tt.want {
				t.Errorf("UnfoldMessage = %q, want %q", got, tt.want)
			}
		})
	}
	if !strings.Contains(toolinternal.UnfoldMessage(nil, ""), "text \u2014 call") {
		t.Error("the dash before 'call a tool' must be an em dash (U+2014)")
	}
}

func TestOf(t *testing.T) {
	f := tool.Of("database_operations", "Use this tool to work with the database.", leaves("query", "insert", "delete"))
	want := tool.Definition{Name: "database_operations", Description: "Use this tool to work with the database.", InputSchema: schema.Empty()}
	if diff := cmp.Diff(want, f.Definition()); diff != "" {
		t.Errorf("Definition (-want +got):\n%s", diff)
	}
	if got := f.Definition().InputSchema.String(); got != `{"type":"object","properties":{}}` {
		t.Errorf("schema = %s", got)
	}
	if diff := cmp.Diff([]string{"query", "insert", "delete"}, toolNames(f.Children())); diff != "" {
		t.Errorf("Children (-want +got):\n%s", diff)
	}
	for _, in := range []string{"{}", "", `{"x":1}`} {
		if diff := cmp.Diff([]string{"query", "insert", "delete"}, mustSelect(t, f, in)); diff != "" {
			t.Errorf("Select(%q) (-want +got):\n%s", in, diff)
		}
	}
	if diff := cmp.Diff(tool.FacadeOptions{}, f.Options()); diff != "" {
		t.Errorf("default options (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tool.Metadata{}, f.Metadata()); diff != "" {
		t.Errorf("Metadata (-want +got):\n%s", diff)
	}
	if got := mustCall(t, f, "{}"); got != tool.Text(unfoldText("query, insert, delete")) {
		t.Errorf("Call = %+v", got)
	}
	dup := tool.Of("f", "d", append(leaves("a", "b"), leaf("a")))
	if diff := cmp.Diff([]string{"a", "b"}, toolNames(dup.Children())); diff != "" {
		t.Errorf("duplicate children: the first of a name wins (-want +got):\n%s", diff)
	}
}

func TestFacadeOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []tool.FacadeOption
		want tool.FacadeOptions
	}{
		{"none", nil, tool.FacadeOptions{}},
		{"exclusive", []tool.FacadeOption{tool.Exclusive()}, tool.FacadeOptions{Exclusive: true}},
		{"notes", []tool.FacadeOption{tool.UsageNotes("n")}, tool.FacadeOptions{UsageNotes: "n"}},
		{"no guide, no context", []tool.FacadeOption{tool.NoGuideTool(), tool.NoContextTool()},
			tool.FacadeOptions{NoGuideTool: true, NoContextTool: true}},
		{"all", []tool.FacadeOption{tool.Exclusive(), tool.UsageNotes("n"), tool.NoGuideTool(), tool.NoContextTool(), tool.CategoryParameter("kind")},
			tool.FacadeOptions{Exclusive: true, UsageNotes: "n", NoGuideTool: true, NoContextTool: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []tool.Facade{
				tool.Of("f", "d", leaves("a"), tt.opts...),
				tool.ByCategory("f", "d", []tool.Category{{Name: "c", Tools: leaves("a")}}, tt.opts...),
				tool.Selectable("f", "d", schema.Empty(), leaves("a"), nil, tt.opts...),
			} {
				if diff := cmp.Diff(tt.want, f.Options()); diff != "" {
					t.Errorf("Options (-want +got):\n%s", diff)
				}
			}
		})
	}
	withNotes := tool.Of("f", "d", leaves("a", "b"), tool.UsageNotes("Prefer a."))
	if got := mustCall(t, withNotes, "{}").Content; got != unfoldText("a, b")+"\n\nPrefer a." {
		t.Errorf("Call with notes = %q", got)
	}
	blankNotes := tool.Of("f", "d", leaves("a"), tool.UsageNotes("  "))
	if got := mustCall(t, blankNotes, "{}").Content; got != unfoldText("a") {
		t.Errorf("Call with blank notes = %q", got)
	}
}

// cart is a tool bound to the connection a selectable facade was called with.
func cart(conn string) tool.Tool {
	return tool.New("cart_add", "Adds to the cart at "+conn, schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text("added via " + conn), nil
	})
}

func TestSelectable(t *testing.T) {
	basic, advanced, admin := leaf("basic"), leaf("advanced"), leaf("admin")
	all := []tool.Tool{basic, advanced, admin}
	levels := schema.Params(schema.String("accessLevel", "Access level").WithEnum("basic", "advanced", "admin"))
	byLevel := tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
		switch {
		case strings.Contains(in, "admin"):
			return all, nil
		case strings.Contains(in, "advanced"):
			return []tool.Tool{basic, advanced}, nil
		case strings.Contains(in, "none"):
			return nil, nil
		default:
			return []tool.Tool{basic}, nil
		}
	})
	f := tool.Selectable("api_operations", "API operations.", levels, all, byLevel)
	if !f.Definition().InputSchema.Equal(levels) {
		t.Errorf("schema = %s", f.Definition().InputSchema)
	}
	tests := []struct {
		input string
		want  []string
	}{
		{`{"accessLevel":"basic"}`, []string{"basic"}},
		{`{"accessLevel":"advanced"}`, []string{"basic", "advanced"}},
		{`{"accessLevel":"admin"}`, []string{"basic", "advanced", "admin"}},
		{`{"accessLevel":"none"}`, []string{}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, mustSelect(t, f, tt.input)); diff != "" {
			t.Errorf("Select(%s) (-want +got):\n%s", tt.input, diff)
		}
	}
	if got := mustCall(t, f, `{"accessLevel":"advanced"}`).Content; got != unfoldText("basic, advanced") {
		t.Errorf("Call lists the selected tools: %q", got)
	}

	t.Run("the selector may create tools bound to the input", func(t *testing.T) {
		shop := tool.Selectable("shop", "Shop.", schema.Params(schema.String("conn", "Connection")), nil,
			tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
				return []tool.Tool{cart(strings.Trim(strings.TrimPrefix(in, `{"conn":`), `"}`))}, nil
			}))
		got, err := shop.Select(context.Background(), `{"conn":"db-7"}`)
		if err != nil || len(got) != 1 {
			t.Fatalf("Select = %v, %v", got, err)
		}
		if res := mustCall(t, got[0], "{}"); res.Content != "added via db-7" {
			t.Errorf("bound tool answered %q", res.Content)
		}
		if got := mustCall(t, shop, `{"conn":"db-7"}`).Content; got != unfoldText("cart_add") {
			t.Errorf("Call = %q", got)
		}
	})

	t.Run("a failing selector is an error result; a signal propagates", func(t *testing.T) {
		failing := tool.Selectable("f", "d", schema.Empty(), nil, tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) {
			return nil, errors.New("backend down")
		}))
		if got := mustCall(t, failing, "{}"); !got.IsError() || got.Content != "selecting the tools of 'f': backend down" {
			t.Errorf("Call = %+v", got)
		}
		if _, err := failing.Select(context.Background(), "{}"); err == nil {
			t.Error("Select: want the selector's error")
		}
		replan := tool.Selectable("f", "d", schema.Empty(), nil, tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) {
			return nil, tool.ReplanRequested{Reason: "x"}
		}))
		if _, err := replan.Call(context.Background(), "{}"); !errors.As(err, new(tool.ReplanRequested)) {
			t.Errorf("Call error = %v, want the signal", err)
		}
	})

	t.Run("a nil selector selects all children", func(t *testing.T) {
		f := tool.Selectable("f", "d", schema.Empty(), leaves("a", "b"), nil)
		if diff := cmp.Diff([]string{"a", "b"}, mustSelect(t, f, "{}")); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// TestSelectionIsKeptForTheStrategy checks that a selector runs once per call: the
// strategy's Select with the call's identity gets the selection the call made.
func TestSelectionIsKeptForTheStrategy(t *testing.T) {
	var runs atomic.Int32
	f := tool.Selectable("shop", "Shop.", schema.Empty(), nil, tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
		runs.Add(1)
		return []tool.Tool{cart(in)}, nil
	}))
	ctx := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c1"})
	res, err := f.Call(ctx, `{"conn":"a"}`)
	if err != nil || res.Content != unfoldText("cart_add") {
		t.Fatalf("Call = %+v, %v", res, err)
	}
	first, _ := f.Select(ctx, `{"conn":"a"}`)
	if runs.Load() != 1 {
		t.Errorf("selector ran %d times for one call, want 1", runs.Load())
	}
	second, _ := f.Select(ctx, `{"conn":"a"}`)
	if runs.Load() != 2 {
		t.Errorf("a second Select must select again; selector ran %d times", runs.Load())
	}
	if len(first) != 1 || len(second) != 1 || first[0] == second[0] {
		t.Errorf("want the kept selection first, then a fresh one: %v, %v", first, second)
	}
	other := toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c2"})
	if _, err := f.Select(other, `{"conn":"a"}`); err != nil || runs.Load() != 3 {
		t.Errorf("another call selects anew; selector ran %d times", runs.Load())
	}
	if _, err := f.Call(context.Background(), "{}"); err != nil {
		t.Fatal(err)
	}
	_, _ = f.Select(context.Background(), "{}")
	if runs.Load() != 5 {
		t.Errorf("without call info nothing is kept; selector ran %d times, want 5", runs.Load())
	}
}

func TestByCategory(t *testing.T) {
	read, list, write, del := leaf("read_file"), leaf("list_dir"), leaf("write_file"), leaf("delete_file")
	cats := []tool.Category{
		{Name: "read", Tools: []tool.Tool{read, list}},
		{Name: "write", Tools: []tool.Tool{write, del, read}},
	}
	f := tool.ByCategory("file_operations", "File operations.", cats)
	wantSchema := `{"type":"object","properties":{"category":{"type":"string","description":"Category to access. Available: read, write","enum":["read","write"]}},"required":["category"]}`
	if got := f.Definition().InputSchema.String(); got != wantSchema {
		t.Errorf("schema =\n%s\nwant\n%s", got, wantSchema)
	}
	if diff := cmp.Diff([]string{"read_file", "list_dir", "write_file", "delete_file"}, toolNames(f.Children())); diff != "" {
		t.Errorf("Children are the union (-want +got):\n%s", diff)
	}
	all := []string{"read_file", "list_dir", "write_file", "delete_file"}
	tests := []struct {
		name  string
		input string
		want  []string
	}{
		{"read", `{"category":"read"}`, []string{"read_file", "list_dir"}},
		{"write", `{"category":"write"}`, []string{"write_file", "delete_file", "read_file"}},
		{"unknown category", `{"category":"admin"}`, all},
		{"missing parameter", `{}`, all},
		{"blank input", "  ", all},
		{"empty input", "", all},
		{"blank category", `{"category":" "}`, all},
		{"not a string", `{"category":1}`, all},
		{"unparseable", `{"category":`, all},
		{"an array", `["read"]`, all},
		{"case matters", `{"category":"READ"}`, all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, mustSelect(t, f, tt.input)); diff != "" {
				t.Errorf("Select (-want +got):\n%s", diff)
			}
		})
	}
	if got := mustCall(t, f, `{"category":"read"}`).Content; got != unfoldText("read_file, list_dir") {
		t.Errorf("Call lists the selected tools: %q", got)
	}

	t.Run("CategoryParameter", func(t *testing.T) {
		f := tool.ByCategory("f", "d", cats, tool.CategoryParameter("kind"))
		want := `{"type":"object","properties":{"kind":{"type":"string","description":"Category to access. Available: read, write","enum":["read","write"]}},"required":["kind"]}`
		if got := f.Definition().InputSchema.String(); got != want {
			t.Errorf("schema = %s", got)
		}
		if diff := cmp.Diff([]string{"read_file", "list_dir"}, mustSelect(t, f, `{"kind":"read"}`)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(all, mustSelect(t, f, `{"category":"read"}`)); diff != "" {
			t.Errorf("the default name is not read (-want +got):\n%s", diff)
		}
	})
}

func TestCategorizedTools(t *testing.T) {
	a, b, c, u1, u2 := leaf("a"), leaf("b"), leaf("c"), leaf("u1"), leaf("u2")
	type cat struct {
		Name  string
		Tools []string
	}
	render := func(cs []tool.Category) []cat {
		out := []cat{}
		for _, c := range cs {
			out = append(out, cat{c.Name, toolNames(c.Tools)})
		}
		return out
	}
	tests := []struct {
		name string
		in   []tool.CategorizedTool
		want []cat
	}{
		{"no tools", nil, []cat{}},
		{
			"all categorised: no all",
			[]tool.CategorizedTool{{a, "x"}, {b, "y"}, {c, "x"}},
			[]cat{{"x", []string{"a", "c"}}, {"y", []string{"b"}}},
		},
		{
			"uncategorised tools join every category, and all holds everything",
			[]tool.CategorizedTool{{u1, ""}, {a, "x"}, {b, "y"}, {u2, ""}, {c, "x"}},
			[]cat{{"x", []string{"a", "c", "u1", "u2"}}, {"y", []string{"b", "u1", "u2"}}, {"all", []string{"u1", "a", "b", "u2", "c"}}},
		},
		{
			"only uncategorised tools",
			[]tool.CategorizedTool{{u1, ""}, {u2, ""}},
			[]cat{{"all", []string{"u1", "u2"}}},
		},
		{
			"a declared all category becomes the union",
			[]tool.CategorizedTool{{a, "all"}, {b, "y"}, {u1, ""}},
			[]cat{{"y", []string{"b", "u1"}}, {"all", []string{"a", "b", "u1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, render(tool.CategorizedTools(tt.in))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	f := tool.ByCategory("f", "d", tool.CategorizedTools([]tool.CategorizedTool{{a, "x"}, {u1, ""}}))
	want := `{"type":"object","properties":{"category":{"type":"string","description":"Category to access. Available: x, all","enum":["x","all"]}},"required":["category"]}`
	if got := f.Definition().InputSchema.String(); got != want {
		t.Errorf("schema = %s", got)
	}
	if diff := cmp.Diff([]string{"a", "u1"}, mustSelect(t, f, `{"category":"all"}`)); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
}

// foreignFacade is a Facade implemented outside pkg/tool, as a router stub would be.
type foreignFacade struct {
	tool.Tool
	children []tool.Tool
}

func (f foreignFacade) Kind() tool.FacadeKind                 { return tool.FacadeSelectable }
func (f foreignFacade) Categories() (string, []tool.Category) { return "", nil }
func (f foreignFacade) Children() []tool.Tool                 { return f.children }
func (f foreignFacade) Select(context.Context, string) ([]tool.Tool, error) {
	return f.children[:1], nil
}
func (f foreignFacade) Options() tool.FacadeOptions {
	return tool.FacadeOptions{UsageNotes: "remote notes", Exclusive: true}
}

// checkFacade checks a facade's definition, options and children.
func checkFacade(t *testing.T, f tool.Facade, wantName, wantDesc string, wantOpts tool.FacadeOptions, wantChildren []string) {
	t.Helper()
	if d := f.Definition(); d.Name != wantName || d.Description != wantDesc {
		t.Errorf("definition = %q, %q", d.Name, d.Description)
	}
	if diff := cmp.Diff(wantOpts, f.Options()); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantChildren, toolNames(f.Children())); diff != "" {
		t.Errorf("children (-want +got):\n%s", diff)
	}
}

func TestAddTools(t *testing.T) {
	check := checkFacade
	opts := tool.FacadeOptions{Exclusive: true, UsageNotes: "notes", NoContextTool: true}
	fopts := []tool.FacadeOption{tool.Exclusive(), tool.UsageNotes("notes"), tool.NoContextTool()}

	t.Run("Of: name, description, options kept; added tools selected and callable", func(t *testing.T) {
		base := tool.Of("workspace", "Workspace.", leaves("base"), fopts...)
		f := tool.AddTools(tool.AddTools(base, leaf("search"), leaf("filter")), leaf("sort"), leaf("base"))
		check(t, f, "workspace", "Workspace.", opts, []string{"base", "search", "filter", "sort"})
		if diff := cmp.Diff([]string{"base", "search", "filter", "sort"}, mustSelect(t, f, "{}")); diff != "" {
			t.Errorf("Select (-want +got):\n%s", diff)
		}
		if got := mustCall(t, f, "{}").Content; got != unfoldText("base, search, filter, sort")+"\n\nnotes" {
			t.Errorf("Call = %q", got)
		}
		if got := mustCall(t, f.Children()[2], "{}").Content; got != "filter got {}" {
			t.Errorf("added tool answered %q", got)
		}
		if diff := cmp.Diff([]string{"base"}, toolNames(base.Children())); diff != "" {
			t.Errorf("the original is unchanged (-want +got):\n%s", diff)
		}
	})

	t.Run("AddObject", func(t *testing.T) {
		inner := tool.Of("inner", "Inner.", leaves("x"))
		f := tool.AddObject(tool.Of("outer", "Outer.", leaves("a")), tool.ObjectOf(leaf("b"), inner).WithFilter(func(n string) bool { return n != "b" }))
		check(t, f, "outer", "Outer.", tool.FacadeOptions{}, []string{"a", "inner"})
		if _, ok := tool.As[tool.Facade](f.Children()[1]); !ok {
			t.Error("a facade from the object nests")
		}
	})

	t.Run("ByCategory: added tools join every category and all; schema updated", func(t *testing.T) {
		base := tool.ByCategory("files", "Files.", []tool.Category{{Name: "read", Tools: leaves("r")}, {Name: "write", Tools: leaves("w")}},
			append(fopts, tool.CategoryParameter("kind"))...)
		f := tool.AddTools(base, leaf("stat"))
		check(t, f, "files", "Files.", opts, []string{"r", "w", "stat"})
		want := `{"type":"object","properties":{"kind":{"type":"string","description":"Category to access. Available: read, write, all","enum":["read","write","all"]}},"required":["kind"]}`
		if got := f.Definition().InputSchema.String(); got != want {
			t.Errorf("schema = %s", got)
		}
		for in, want := range map[string][]string{
			`{"kind":"read"}`:  {"r", "stat"},
			`{"kind":"write"}`: {"w", "stat"},
			`{"kind":"all"}`:   {"r", "w", "stat"},
			`{"kind":"other"}`: {"r", "w", "stat"},
		} {
			if diff := cmp.Diff(want, mustSelect(t, f, in)); diff != "" {
				t.Errorf("Select(%s) (-want +got):\n%s", in, diff)
			}
		}
		g := tool.AddTools(f, leaf("touch"))
		if diff := cmp.Diff([]string{"r", "w", "stat", "touch"}, mustSelect(t, g, `{"kind":"all"}`)); diff != "" {
			t.Errorf("an existing all grows (-want +got):\n%s", diff)
		}
		if got := g.Definition().InputSchema.String(); got != want {
			t.Errorf("schema after a second add = %s", got)
		}
	})

	t.Run("Selectable: the selector is kept and added tools are always selected", func(t *testing.T) {
		levelSchema := schema.Params(schema.String("level", "Level"))
		base := tool.Selectable("api", "API.", levelSchema, leaves("basic", "admin"), tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
			if strings.Contains(in, "admin") {
				return leaves("basic", "admin"), nil
			}
			return leaves("basic"), nil
		}), fopts...)
		f := tool.AddTools(base, leaf("help"))
		check(t, f, "api", "API.", opts, []string{"basic", "admin", "help"})
		if !f.Definition().InputSchema.Equal(levelSchema) {
			t.Errorf("schema = %s", f.Definition().InputSchema)
		}
		if diff := cmp.Diff([]string{"basic", "help"}, mustSelect(t, f, `{"level":"basic"}`)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"basic", "admin", "help"}, mustSelect(t, f, `{"level":"admin"}`)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})

	t.Run("a facade implemented elsewhere becomes the selector", func(t *testing.T) {
		remote := foreignFacade{Tool: tool.New("remote", "Remote.", schema.Params(schema.String("q", "q")), nil), children: leaves("r1", "r2")}
		f := tool.AddTools(remote, leaf("local"))
		check(t, f, "remote", "Remote.", tool.FacadeOptions{UsageNotes: "remote notes", Exclusive: true}, []string{"r1", "r2", "local"})
		if !f.Definition().InputSchema.Equal(remote.Definition().InputSchema) {
			t.Errorf("schema = %s", f.Definition().InputSchema)
		}
		if diff := cmp.Diff([]string{"r1", "local"}, mustSelect(t, f, `{"q":"x"}`)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestShortcutDispatch(t *testing.T) {
	var got []string
	rec := func(name string, schema schema.Schema) tool.Tool {
		return tool.New(name, "the "+name+" tool", schema, func(_ context.Context, in string) (tool.Result, error) {
			got = append(got, name+" "+in)
			return tool.Text(name + " done"), nil
		})
	}
	children := []tool.Tool{
		rec("add_task", schema.Params(schema.String("title", "Title"), schema.Integer("priority", "Priority").AsOptional())),
		rec("set_personality", schema.Empty()),
		rec("list_tasks", schema.Empty()),
	}
	f := tool.Of("tasks", "Task operations.", children)
	unfolded := unfoldText("add_task, set_personality, list_tasks")
	tests := []struct {
		name     string
		input    string
		want     tool.Result
		wantCall []string
	}{
		{"blank", "", tool.Text(unfolded), nil},
		{"empty object", "{}", tool.Text(unfolded), nil},
		{"invalid JSON", `{"add_task":`, tool.Text(unfolded), nil},
		{"an array", `[{"add_task":{}}]`, tool.Text(unfolded), nil},
		{"no member names a child", `{"other":{"title":"x"}}`, tool.Text(unfolded), nil},
		{"a child's name as a value only", `{"tool":"add_task"}`, tool.Text(unfolded), nil},
		{"object value: the child gets it as JSON", `{"add_task":{"title":"Write report","priority":2}}`,
			tool.Text("add_task done"), []string{`add_task {"priority":2,"title":"Write report"}`}},
		{"string value: passed as a JSON string", `{"set_personality":"ecstasy"}`,
			tool.Text("set_personality done"), []string{`set_personality "ecstasy"`}},
		{"number value", `{"set_personality":3}`, tool.Text("set_personality done"), []string{`set_personality 3`}},
		{"the first matching member wins", `{"x":1,"list_tasks":{},"add_task":{"title":"t"}}`,
			tool.Text("list_tasks done"), []string{`list_tasks {}`}},
		{"object value that breaks the child's schema: not called", `{"add_task":{"priority":"high"}}`,
			tool.ErrorWithCode(tool.CodeInvalidArguments, `invalid arguments for tool 'add_task': missing required property "title". Call it again with arguments that match its schema.`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			res := mustCall(t, f, tt.input)
			if diff := cmp.Diff(tt.want, res); diff != "" {
				t.Errorf("Call (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCall, got); diff != "" {
				t.Errorf("child calls (-want +got):\n%s", diff)
			}
		})
	}
	empty := tool.Of("none", "No tools.", nil)
	if res := mustCall(t, empty, `{"add_task":{}}`); res.Content != unfoldText("") {
		t.Errorf("a facade without children = %q", res.Content)
	}
}

// TestFacadeKind: every facade says how it selects, so that a worker can register it
// as what it is; a by-category facade also gives its categories and parameter.
func TestFacadeKind(t *testing.T) {
	cats := []tool.Category{{Name: "perm", Tools: leaves("chmod", "chown")}, {Name: "read", Tools: leaves("cat")}}
	sel := tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) { return nil, nil })
	tests := []struct {
		name      string
		f         tool.Facade
		want      tool.FacadeKind
		wantParam string
		wantCats  map[string][]string
	}{
		{"Of", tool.Of("a", "A.", leaves("x")), tool.FacadePlain, "", nil},
		{"ByCategory", tool.ByCategory("b", "B.", cats, tool.CategoryParameter("kind")), tool.FacadeByCategory, "kind",
			map[string][]string{"perm": {"chmod", "chown"}, "read": {"cat"}}},
		{"Selectable", tool.Selectable("c", "C.", schema.Empty(), leaves("x"), sel), tool.FacadeSelectable, "", nil},
		{"AddTools to Of", tool.AddTools(tool.Of("a", "A.", leaves("x")), leaf("y")), tool.FacadePlain, "", nil},
		{"AddTools to ByCategory", tool.AddTools(tool.ByCategory("b", "B.", cats[:1]), leaf("y")), tool.FacadeByCategory, "category",
			map[string][]string{"perm": {"chmod", "chown", "y"}, "all": {"chmod", "chown", "y"}}},
		{"AddTools to a foreign facade", tool.AddTools(foreignFacade{Tool: leaf("f"), children: leaves("x")}, leaf("y")), tool.FacadeSelectable, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Kind(); got != tt.want {
				t.Errorf("Kind() = %s, want %s", got, tt.want)
			}
			param, got := tt.f.Categories()
			if param != tt.wantParam {
				t.Errorf("category parameter = %q, want %q", param, tt.wantParam)
			}
			var gotCats map[string][]string
			for _, c := range got {
				if gotCats == nil {
					gotCats = map[string][]string{}
				}
				gotCats[c.Name] = toolNames(c.Tools)
			}
			if diff := cmp.Diff(tt.wantCats, gotCats); diff != "" {
				t.Errorf("categories (-want +got):\n%s", diff)
			}
		})
	}
}
