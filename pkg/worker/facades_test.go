package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// leaf returns a tool without parameters that answers "<name> ran with <state>".
func leaf(name string) tool.Tool {
	return tool.New(name, "the "+name+" tool", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		return tool.Text(name + " ran with " + string(tool.StateFrom(ctx).Bytes())), nil
	})
}

func leaves(names ...string) []tool.Tool {
	out := make([]tool.Tool, len(names))
	for i, n := range names {
		out[i] = leaf(n)
	}
	return out
}

func defOf(t tool.Tool) *toolpb.ToolDefinition {
	return wire.DefinitionToProto(t.Definition(), t.Metadata())
}

func toolChild(name string) *toolpb.FacadeChild {
	return &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Tool{Tool: name}}
}

func facadeChild(n *toolpb.FacadeNode) *toolpb.FacadeChild {
	return &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Facade{Facade: n}}
}

func toolChildren(names ...string) []*toolpb.FacadeChild {
	out := make([]*toolpb.FacadeChild, len(names))
	for i, n := range names {
		out[i] = toolChild(n)
	}
	return out
}

// registered lists the names of a group registration's tools, in order.
func registered(gr *toolpb.GroupRegistration) []string {
	var out []string
	for _, rt := range gr.GetTools() {
		out = append(out, rt.GetDefinition().GetName())
	}
	return out
}

// connectSelector is the selector of the connect facade: it binds {"dsn":...} as the
// state and selects query and close.
func connectSelector(tools []tool.Tool) tool.Selector {
	return tool.SelectorFunc(func(ctx context.Context, input string) ([]tool.Tool, error) {
		var in struct {
			DSN string `json:"dsn"`
		}
		if err := json.Unmarshal([]byte(input), &in); err != nil {
			return nil, err
		}
		if in.DSN == "refuse" {
			return nil, errors.New("cannot connect to refuse")
		}
		b, _ := json.Marshal(map[string]string{"dsn": in.DSN})
		tool.StateFrom(ctx).Set(b)
		return tools, nil
	})
}

var dsnSchema = schema.Params(schema.String("dsn", "the database to connect to"))

func connect(opts ...tool.FacadeOption) tool.Facade {
	ts := leaves("query", "close")
	return tool.Selectable("connect", "Connect to a database", dsnSchema, ts, connectSelector(ts), opts...)
}

// nested returns facades f1 → f2 → … → f<depth>, each holding a tool t<i> and the next
// facade, the innermost holding t<depth>.
func nested(depth int) tool.Facade {
	var inner tool.Tool
	for i := depth; i >= 1; i-- {
		children := []tool.Tool{leaf(fmt.Sprintf("t%d", i))}
		if inner != nil {
			children = append(children, inner)
		}
		inner = tool.Of(fmt.Sprintf("f%d", i), fmt.Sprintf("level %d", i), children)
	}
	return inner.(tool.Facade)
}

func TestFacadeRegistration(t *testing.T) {
	read, write, stat := leaf("read"), leaf("write"), leaf("stat")
	byCategory := tool.ByCategory("files", "File tools", tool.CategorizedTools([]tool.CategorizedTool{
		{Tool: read, Category: "read"}, {Tool: write, Category: "write"}, {Tool: stat},
	}), tool.CategoryParameter("kind"))
	empty := `{"type":"object","properties":{}}`
	plainDef := func(name, desc string) *toolpb.ToolDefinition {
		return &toolpb.ToolDefinition{Name: name, Description: desc, InputSchemaJson: empty}
	}
	// nestedNode is the node of nested(depth) from level i down.
	var nestedNode func(i, depth int) *toolpb.FacadeNode
	nestedNode = func(i, depth int) *toolpb.FacadeNode {
		n := &toolpb.FacadeNode{Definition: plainDef(fmt.Sprintf("f%d", i), fmt.Sprintf("level %d", i)), Children: toolChildren(fmt.Sprintf("t%d", i))}
		if i < depth {
			n.Children = append(n.Children, facadeChild(nestedNode(i+1, depth)))
		}
		return n
	}
	oneLeaf := leaves("x")
	tests := []struct {
		name    string
		group   Group
		facades []*toolpb.FacadeNode
		tools   []string
	}{
		{
			name: "plain, with every option",
			group: Group{Role: "g", Facades: []tool.Facade{tool.Of("bag", "A bag of tools", leaves("b", "a"),
				tool.Exclusive(), tool.UsageNotes("Use a, then b."), tool.NoGuideTool(), tool.NoContextTool())}},
			facades: []*toolpb.FacadeNode{{
				Definition: plainDef("bag", "A bag of tools"), Children: toolChildren("b", "a"),
				Exclusive: true, UsageNotes: "Use a, then b.", NoGuideTool: true, NoContextTool: true,
			}},
			tools: []string{"a", "b"},
		},
		{
			name:  "by category, with the all category and a named parameter",
			group: Group{Role: "g", Facades: []tool.Facade{byCategory}},
			facades: []*toolpb.FacadeNode{{
				Definition: defOf(byCategory),
				Children:   toolChildren("read", "stat", "write"),
				Categories: []*toolpb.FacadeCategory{
					{Name: "read", Children: []string{"read", "stat"}},
					{Name: "write", Children: []string{"write", "stat"}},
					{Name: "all", Children: []string{"read", "write", "stat"}},
				},
				CategoryParameter: "kind",
			}},
			tools: []string{"read", "stat", "write"},
		},
		{
			name:  "selectable",
			group: Group{Role: "g", Facades: []tool.Facade{connect(tool.UsageNotes("Close when done."))}},
			facades: []*toolpb.FacadeNode{{
				Definition: defOf(connect()), Children: toolChildren("query", "close"), UsageNotes: "Close when done.", Selectable: true,
			}},
			tools: []string{"close", "query"},
		},
		{
			name: "selectable with the empty schema: its selector binds state",
			group: Group{Role: "g", Facades: []tool.Facade{tool.Selectable("session", "Open a session", schema.Empty(), oneLeaf,
				tool.SelectorFunc(func(ctx context.Context, _ string) ([]tool.Tool, error) {
					tool.StateFrom(ctx).Set([]byte("session-1"))
					return oneLeaf, nil
				}))}},
			facades: []*toolpb.FacadeNode{{Definition: plainDef("session", "Open a session"), Children: toolChildren("x"), Selectable: true}},
			tools:   []string{"x"},
		},
		{
			name: "selectable with an enum parameter of its own",
			group: Group{Role: "g", Facades: []tool.Facade{tool.Selectable("mode", "Pick a mode",
				schema.Params(schema.String("mode", "the mode").WithEnum("fast", "safe")), oneLeaf,
				tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) { return oneLeaf, nil }))}},
			facades: []*toolpb.FacadeNode{{
				Definition: &toolpb.ToolDefinition{Name: "mode", Description: "Pick a mode",
					InputSchemaJson: `{"type":"object","properties":{"mode":{"type":"string","description":"the mode","enum":["fast","safe"]}},"required":["mode"]}`},
				Children: toolChildren("x"), Selectable: true,
			}},
			tools: []string{"x"},
		},
		{
			name:    "nested five levels",
			group:   Group{Role: "g", Facades: []tool.Facade{nested(5)}},
			facades: []*toolpb.FacadeNode{nestedNode(1, 5)},
			tools:   []string{"t1", "t2", "t3", "t4", "t5"},
		},
		{
			name: "a wrapped facade among the children and among the tools",
			group: Group{Role: "g",
				Tools:   []tool.Tool{tool.WithName(tool.Of("inner2", "Inner", leaves("z")), "renamed2")},
				Facades: []tool.Facade{tool.Of("outer", "Outer", []tool.Tool{tool.WithName(tool.Of("inner", "Inner", leaves("y")), "renamed")})}},
			facades: []*toolpb.FacadeNode{
				{Definition: plainDef("renamed2", "Inner"), Children: toolChildren("z")},
				{Definition: plainDef("outer", "Outer"), Children: []*toolpb.FacadeChild{
					facadeChild(&toolpb.FacadeNode{Definition: plainDef("renamed", "Inner"), Children: toolChildren("y")}),
				}},
			},
			tools: []string{"y", "z"},
		},
		{
			name: "a leaf in two facades and among the tools is registered once",
			group: Group{Role: "g", Tools: []tool.Tool{leaf("shared"), leaf("direct")},
				Facades: []tool.Facade{tool.Of("one", "One", leaves("shared", "a")), tool.Of("two", "Two", leaves("b", "shared"))}},
			facades: []*toolpb.FacadeNode{
				{Definition: plainDef("one", "One"), Children: toolChildren("shared", "a")},
				{Definition: plainDef("two", "Two"), Children: toolChildren("b", "shared")},
			},
			tools: []string{"a", "b", "direct", "shared"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			grs, err := groupRegistrations(tc.group)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.facades, grs[0].GetFacades(), protocmp.Transform()); diff != "" {
				t.Errorf("facades (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.tools, registered(grs[0])); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			for _, rt := range grs[0].GetTools() {
				def, meta, err := wire.DefinitionFromProto(rt.GetDefinition())
				if err != nil || rt.GetContentHash() != wire.Hash(def, meta) {
					t.Errorf("tool %s: hash %s does not match its definition (%v)", def.Name, rt.GetContentHash(), err)
				}
			}
			// A second build (another replica) registers exactly the same.
			again, err := groupRegistrations(tc.group)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(grs, again, protocmp.Transform()); diff != "" {
				t.Errorf("a second build differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestFacadeRegistrationRejects(t *testing.T) {
	deep := func(depth int) tool.Facade {
		inner := leaf("bottom")
		for i := depth; i >= 1; i-- {
			inner = tool.Of(fmt.Sprintf("d%d", i), "deep", []tool.Tool{inner})
		}
		return inner.(tool.Facade)
	}
	tests := []struct {
		name   string
		groups []Group
		reason string
	}{
		{"facade named like a tool of the group",
			[]Group{{Role: "g", Tools: leaves("a"), Facades: []tool.Facade{tool.Of("a", "A", leaves("b"))}}},
			`facade "a" of group "g" has the name of a tool of group "g"`},
		{"facade named like one of its leaves",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("a", "A", leaves("a"))}}},
			`tool "a" of group "g" has the name of a facade of group "g"`},
		{"leaf named like a facade of another group",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("f", "F", leaves("x"))}}, {Role: "h", Facades: []tool.Facade{tool.Of("k", "K", leaves("f"))}}},
			`tool "f" of group "h" has the name of a facade of group "g"`},
		{"facade twice in a group",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("f", "F", leaves("x")), tool.Of("f", "F", leaves("y"))}}},
			`facade "f" given twice in group "g"`},
		{"facade in two groups",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("f", "F", leaves("x"))}}, {Role: "h", Facades: []tool.Facade{tool.Of("f", "F", leaves("y"))}}},
			`facade "f" given twice (in groups "g" and "h")`},
		{"leaf with another definition than a tool of the same name",
			[]Group{{Role: "g", Tools: []tool.Tool{tool.WithDescription(leaf("a"), "Another a.")}, Facades: []tool.Facade{tool.Of("f", "F", leaves("a"))}}},
			`group "g" has two different tools named "a"`},
		{"two leaves of one name with different definitions",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("f", "F", leaves("a")), tool.Of("h", "H", []tool.Tool{tool.WithDescription(leaf("a"), "Another a.")})}}},
			`group "g" has two different tools named "a"`},
		{"leaf that is a tool of another group",
			[]Group{{Role: "g", Tools: leaves("a")}, {Role: "h", Facades: []tool.Facade{tool.Of("f", "F", leaves("a"))}}},
			`tool "a" given twice (in groups "g" and "h")`},
		{"tool twice among the tools",
			[]Group{{Role: "g", Tools: leaves("a", "a")}},
			`tool "a" given twice in group "g"`},
		{"facade without children",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.Of("f", "F", nil)}}},
			`facade "f" has no children`},
		{"nil facade", []Group{{Role: "g", Facades: []tool.Facade{nil}}}, `group "g": facade 0 is nil`},
		{"nil tool", []Group{{Role: "g", Tools: []tool.Tool{nil}}}, `group "g": tool 0 is nil`},
		{"group without tools or facades", []Group{{Role: "g"}}, `group "g" has no tools`},
		{"too deep", []Group{{Role: "g", Facades: []tool.Facade{deep(40)}}}, `facade "d33" nests deeper than 32 levels`},
		// What the orchestrator would refuse at registration fails at start.
		{"category name too long",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.ByCategory("f", "F", []tool.Category{{Name: strings.Repeat("c", 65), Tools: leaves("a")}})}}},
			`category 0's name is 65 bytes; the limit is 64`},
		{"category twice",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.ByCategory("f", "F", []tool.Category{{Name: "c", Tools: leaves("a")}, {Name: "c", Tools: leaves("b")}})}}},
			`category "c" is declared twice`},
		{"bad category parameter",
			[]Group{{Role: "g", Facades: []tool.Facade{tool.ByCategory("f", "F", []tool.Category{{Name: "c", Tools: leaves("a")}}, tool.CategoryParameter("the kind"))}}},
			`category_parameter "the kind" must match`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(Options{Orchestrator: "127.0.0.1:7070"}, tc.groups...)
			if err == nil || w != nil {
				t.Fatalf("New = %v, %v; want an error", w, err)
			}
			if !errors.Is(err, ErrInvalidGroup) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("err = %q, want ErrInvalidGroup mentioning %q", err, tc.reason)
			}
		})
	}
}

func TestInvokeFacades(t *testing.T) {
	ctx := testContext(t)
	ts := leaves("query", "close")
	other := leaf("elsewhere") // a tool of another group
	stranger := leaf("stranger")
	picks := func(name string, pick ...tool.Tool) tool.Facade {
		return tool.Selectable(name, "Picks tools", dsnSchema, ts,
			tool.SelectorFunc(func(ctx context.Context, _ string) ([]tool.Tool, error) {
				tool.StateFrom(ctx).Set([]byte("bound"))
				return pick, nil
			}))
	}
	panics := tool.Selectable("panics", "Panics", dsnSchema, ts,
		tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) { panic("selector boom") }))
	files := tool.ByCategory("files", "Files", []tool.Category{{Name: "read", Tools: leaves("cat")}, {Name: "write", Tools: leaves("tee")}})
	w := start(t, Options{ID: "w1"},
		Group{Role: "db", Tools: ts, Facades: []tool.Facade{
			connect(tool.UsageNotes("Close when done.")),
			picks("picks_stranger", ts[0], stranger),
			picks("picks_other_group", other),
			picks("picks_changed", tool.WithDescription(ts[0], "A different query.")),
			picks("picks_query", ts[0]),
			panics,
			tool.Of("plain", "Plain", leaves("p1", "p2"), tool.UsageNotes("Use p1 first.")),
			files,
		}},
		Group{Role: "misc", Tools: []tool.Tool{other}})
	selection := func(state string, names ...string) *toolpb.Selection {
		return &toolpb.Selection{Tools: names, State: []byte(state)}
	}
	bound := `{"dsn":"postgres://db/main"}`
	tests := []struct {
		name      string
		req       *toolpb.InvokeRequest
		text      string
		selection *toolpb.Selection
		state     string // the new state; "" for none
		errCode   toolpb.ToolErrorCode
		fragment  string
	}{
		{name: "selectable: selection and state",
			req:  &toolpb.InvokeRequest{Tool: "connect", ArgumentsJson: `{"dsn":"postgres://db/main"}`},
			text: toolinternal.UnfoldMessage([]string{"query", "close"}, "Close when done."), selection: selection(bound, "query", "close"), state: bound},
		{name: "selectable: arguments against its schema",
			req:     &toolpb.InvokeRequest{Tool: "connect", ArgumentsJson: `{"dsn":3}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS, fragment: "invalid arguments for tool 'connect'"},
		{name: "selectable: the selector fails",
			req:     &toolpb.InvokeRequest{Tool: "connect", ArgumentsJson: `{"dsn":"refuse"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED, fragment: "cannot connect to refuse"},
		{name: "selectable: the selector panics",
			req:     &toolpb.InvokeRequest{Tool: "panics", ArgumentsJson: `{"dsn":"x"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_PANIC, fragment: "tool 'panics' panicked: selector boom"},
		{name: "selectable: a tool the group does not register",
			req:     &toolpb.InvokeRequest{Tool: "picks_stranger", ArgumentsJson: `{"dsn":"x"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED, fragment: "facade 'picks_stranger' selected 'stranger', which is not a tool of group 'db'"},
		{name: "selectable: a tool of another group",
			req:     &toolpb.InvokeRequest{Tool: "picks_other_group", ArgumentsJson: `{"dsn":"x"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED, fragment: "selected 'elsewhere', which is not a tool of group 'db'"},
		{name: "selectable: a tool under another definition",
			req:     &toolpb.InvokeRequest{Tool: "picks_changed", ArgumentsJson: `{"dsn":"x"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_FAILED, fragment: "selected a tool 'query' whose definition differs from the one group 'db' registers"},
		{name: "selectable: the state it is called with gives way to the one it binds",
			req:  &toolpb.InvokeRequest{Tool: "picks_query", ArgumentsJson: `{"dsn":"x"}`, State: []byte("old")},
			text: toolinternal.UnfoldMessage([]string{"query"}, ""), selection: selection("bound", "query"), state: "bound"},
		{name: "plain facade: all children, no state",
			req:  &toolpb.InvokeRequest{Tool: "plain", ArgumentsJson: `{}`},
			text: toolinternal.UnfoldMessage([]string{"p1", "p2"}, "Use p1 first."), selection: selection("", "p1", "p2")},
		{name: "by-category facade: the category's children",
			req:  &toolpb.InvokeRequest{Tool: "files", ArgumentsJson: `{"category":"write"}`},
			text: toolinternal.UnfoldMessage([]string{"tee"}, ""), selection: selection("", "tee")},
		{name: "by-category facade: an unknown category is refused by its schema",
			req:     &toolpb.InvokeRequest{Tool: "files", ArgumentsJson: `{"category":"nope"}`},
			errCode: toolpb.ToolErrorCode_TOOL_ERROR_CODE_INVALID_ARGUMENTS, fragment: "invalid arguments for tool 'files'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := w.client().Invoke(ctx, tc.req)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			want := &toolpb.InvokeResponse{Selection: tc.selection}
			if tc.errCode != toolpb.ToolErrorCode_TOOL_ERROR_CODE_UNSPECIFIED {
				if msg := resp.GetError().GetMessage(); !strings.Contains(msg, tc.fragment) {
					t.Errorf("message %q does not mention %q", msg, tc.fragment)
				}
				resp.GetError().Message = ""
				want.Outcome = &toolpb.InvokeResponse_Error{Error: &toolpb.ToolError{Code: tc.errCode}}
			} else {
				want.Outcome = &toolpb.InvokeResponse_Text{Text: tc.text}
			}
			if tc.state != "" {
				want.State, want.StateChanged = []byte(tc.state), true
			}
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStateRoundTrip: the state of the request reaches the tool, and what the tool sets
// comes back, flagged as changed even when it is empty.
func TestStateRoundTrip(t *testing.T) {
	ctx := testContext(t)
	counter := tool.New("count", "Counts calls.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		st := tool.StateFrom(ctx)
		n := 0
		if b := st.Bytes(); len(b) > 0 {
			if err := json.Unmarshal(b, &n); err != nil {
				return tool.Result{}, err
			}
		}
		st.Set(fmt.Appendf(nil, "%d", n+1))
		return tool.Text(fmt.Sprintf("call %d", n+1)), nil
	})
	reset := tool.New("reset", "Forgets the count.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tool.StateFrom(ctx).Set(nil)
		return tool.Text("reset"), nil
	})
	failsAfterSet := tool.New("half", "Sets state, then fails.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tool.StateFrom(ctx).Set([]byte("partial"))
		return tool.Result{}, errors.New("gave up")
	})
	w := start(t, Options{}, group(counter, reset, failsAfterSet, leaf("peek")))
	tests := []struct {
		name    string
		tool    string
		state   string
		text    string
		newSt   string
		changed bool
	}{
		{"no state in, state out", "count", "", "call 1", "1", true},
		{"state in, new state out", "count", "41", "call 42", "42", true},
		{"state in, read only", "peek", `{"cart":[1]}`, `peek ran with {"cart":[1]}`, "", false},
		{"no state, read only", "peek", "", "peek ran with ", "", false},
		{"state set to empty", "reset", "7", "reset", "", true},
		{"state set, then an error", "half", "", "gave up", "partial", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: tc.tool, ArgumentsJson: `{}`, State: []byte(tc.state)})
			if err != nil {
				t.Fatal(err)
			}
			text := resp.GetText()
			if resp.GetError() != nil {
				text = resp.GetError().GetMessage()
			}
			if text != tc.text || string(resp.GetState()) != tc.newSt || resp.GetStateChanged() != tc.changed || resp.GetSelection() != nil {
				t.Errorf("got %q, state %q changed %v, selection %v; want %q, state %q changed %v",
					text, resp.GetState(), resp.GetStateChanged(), resp.GetSelection(), tc.text, tc.newSt, tc.changed)
			}
		})
	}
}

// TestStateAcrossReplicas: two workers serving the same group are replicas; a selection
// made on one binds state that the other serves the selected tools with.
func TestStateAcrossReplicas(t *testing.T) {
	ctx := testContext(t)
	appendTool := tool.New("append", "Appends an item.", schema.Params(schema.String("item", "the item")), func(ctx context.Context, input string) (tool.Result, error) {
		st := tool.StateFrom(ctx)
		var s struct {
			DSN   string   `json:"dsn"`
			Items []string `json:"items"`
		}
		if err := json.Unmarshal(st.Bytes(), &s); err != nil {
			return tool.Error("not connected"), nil
		}
		var in struct{ Item string }
		_ = json.Unmarshal([]byte(input), &in)
		s.Items = append(s.Items, in.Item)
		b, _ := json.Marshal(s)
		st.Set(b)
		return tool.Text(fmt.Sprintf("%d items", len(s.Items))), nil
	})
	mk := func() Group {
		ts := []tool.Tool{appendTool, leaf("list")}
		return Group{Role: "db", Facades: []tool.Facade{tool.Selectable("connect", "Connect", dsnSchema, ts, connectSelector(ts))}}
	}
	a := start(t, Options{ID: "a"}, mk())
	b := start(t, Options{ID: "b"}, mk())

	resp, err := a.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "connect", ArgumentsJson: `{"dsn":"db://x"}`})
	if err != nil {
		t.Fatal(err)
	}
	state := resp.GetSelection().GetState()
	if string(state) != `{"dsn":"db://x"}` {
		t.Fatalf("selection state = %q", state)
	}
	for i, w := range []*running{b, a, b} {
		resp, err := w.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "append", ArgumentsJson: fmt.Sprintf(`{"item":"i%d"}`, i), State: state})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d items", i+1); resp.GetText() != want || !resp.GetStateChanged() {
			t.Fatalf("append on %s = %v, want %q with a new state", w.ID(), resp, want)
		}
		state = resp.GetState()
	}
	resp, err = a.client().Invoke(ctx, &toolpb.InvokeRequest{Tool: "list", ArgumentsJson: `{}`, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if want := `list ran with {"dsn":"db://x","items":["i0","i1","i2"]}`; resp.GetText() != want {
		t.Errorf("list = %q, want %q", resp.GetText(), want)
	}
}
