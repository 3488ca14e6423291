package progressive_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestLoopUnfolds: the facade is removed, its children, guide and context tools join,
// the model's next request offers them, and a ToolsChanged event says so.
func TestLoopUnfolds(t *testing.T) {
	c := &calls{}
	db := tool.Of("database_operations", "Work with the database.", c.leaves("query", "insert"))
	p := newScript(t,
		onTurn(1, callTools(raw("database_operations", `{}`))),
		onTurn(2, callTools(raw("query", `{}`))),
		onTurn(3, text("done")),
	)
	ev := &events{}
	res := run(t, p, loop.Options{Observer: ev.observe}, c.leaf("weather"), db)
	want := [][]string{
		{"weather", "database_operations"},
		{"weather", "query", "insert", "database_operations", "database_operations_context"},
		{"weather", "query", "insert", "database_operations", "database_operations_context"},
	}
	if diff := cmp.Diff(want, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	wantResults := []string{"database_operations: " + unfoldText("query, insert"), "query: query done"}
	if diff := cmp.Diff(wantResults, toolResults(res.History)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantEvents := []loop.ToolsChanged{{
		Iteration: 1, LoopID: "loop-1",
		Added:   []string{"query", "insert", "database_operations", "database_operations_context"},
		Removed: []string{"database_operations"},
		Tools:   []string{"weather", "query", "insert", "database_operations", "database_operations_context"},
	}}
	if diff := cmp.Diff(wantEvents, ev.changes()); diff != "" {
		t.Errorf("ToolsChanged (-want +got):\n%s", diff)
	}
	spec := p.Requests()[1].Tools[3]
	if spec.Description != "Call a specific tool instead: query, insert" || string(spec.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("guide tool offered as %+v", spec)
	}
	spec = p.Requests()[1].Tools[4]
	if spec.Description != "Work with the database.. Available: query, insert" {
		t.Errorf("context tool offered as %+v", spec)
	}
}

// TestLoopGuideAndContextTools: after unfolding, a repeated call of the facade's name is
// answered by the guide tool, once; the context tool answers once; later calls in the
// same loop get ALREADY LOADED; a second loop over the same facade gets both fresh.
func TestLoopGuideAndContextTools(t *testing.T) {
	c := &calls{}
	search := tool.Of("spotify_search", "Search Spotify for music data", c.leaves("vector_search", "text_search"),
		tool.UsageNotes("Try vector search first."))
	guide := lines("Use one of these tools directly:", "- vector_search: Does vector_search.", "- text_search: Does text_search.", "", "Try vector search first.")
	ctxText := lines("Tools for Search Spotify for music data:", "- vector_search: Does vector_search.", "- text_search: Does text_search.", "", "Usage notes: Try vector search first.")
	for _, loopID := range []string{"loop-a", "loop-b"} {
		t.Run(loopID, func(t *testing.T) {
			p := newScript(t,
				onTurn(1, callTools(raw("spotify_search", `{}`))),
				onTurn(2, callTools(raw("spotify_search", `{}`), raw("spotify_search_context", `{}`))),
				onTurn(3, callTools(raw("spotify_search", `{}`), raw("spotify_search_context", `{}`))),
				onTurn(4, text("done")),
			)
			res := run(t, p, loop.Options{LoopID: loopID}, search)
			want := []string{
				"spotify_search: " + unfoldText("vector_search, text_search") + "\n\nTry vector search first.",
				"spotify_search: " + guide,
				"spotify_search_context: " + ctxText,
				"spotify_search: " + alreadyLoaded("spotify_search", "Call one of the tools listed there."),
				"spotify_search_context: " + alreadyLoaded("spotify_search_context", "Use the tools it describes."),
			}
			if diff := cmp.Diff(want, toolResults(res.History)); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			wantOffered := []string{"vector_search", "text_search", "spotify_search", "spotify_search_context"}
			if diff := cmp.Diff(wantOffered, offered(p.Requests())[3]); diff != "" {
				t.Errorf("the guide and context tools stay (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoopGuideAndContextSwitchedOff: without the guide tool a repeated call of the
// facade's name gets the normal not-found feedback.
func TestLoopGuideAndContextSwitchedOff(t *testing.T) {
	c := &calls{}
	f := tool.Of("files", "Files.", c.leaves("read"), tool.NoGuideTool(), tool.NoContextTool())
	p := newScript(t,
		onTurn(1, callTools(raw("files", `{}`))),
		onTurn(2, callTools(raw("files", `{}`))),
		onTurn(3, text("done")),
	)
	res := run(t, p, loop.Options{}, f)
	want := []string{
		"files: " + unfoldText("read"),
		"files: Tool 'files' does not exist. Available tools: [read]. Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable.",
	}
	if diff := cmp.Diff(want, toolResults(res.History)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"files"}, {"read"}, {"read"}}, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
}

// nest builds a chain of facades level1 → level2 → … → levelN → leaf.
func nest(c *calls, depth int) tool.Tool {
	t := c.leaf("leaf")
	for i := depth; i >= 1; i-- {
		t = tool.Of(fmt.Sprintf("level%d", i), fmt.Sprintf("Level %d.", i), []tool.Tool{t}, tool.NoContextTool(), tool.NoGuideTool())
	}
	return t
}

func TestLoopNestedFiveLevels(t *testing.T) {
	c := &calls{}
	var rules []scripted.Rule
	for i := 1; i <= 5; i++ {
		rules = append(rules, onTurn(i, callTools(raw(fmt.Sprintf("level%d", i), `{}`))))
	}
	rules = append(rules, onTurn(6, callTools(raw("leaf", `{"x":1}`))), onTurn(7, text("done")))
	p := newScript(t, rules...)
	res := run(t, p, loop.Options{}, c.leaf("other"), nest(c, 5))
	want := [][]string{
		{"other", "level1"}, {"other", "level2"}, {"other", "level3"}, {"other", "level4"}, {"other", "level5"},
		{"other", "leaf"}, {"other", "leaf"},
	}
	if diff := cmp.Diff(want, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{`leaf {"x":1}`}, c.all()); diff != "" {
		t.Errorf("leaf calls (-want +got):\n%s", diff)
	}
	if got := toolResults(res.History); len(got) != 6 || got[4] != "level5: "+unfoldText("leaf") {
		t.Errorf("results = %q", got)
	}
}

// TestLoopMixedBranching: facades and tools side by side at several levels; two facades
// unfold in one batch, each after its own call.
func TestLoopMixedBranching(t *testing.T) {
	c := &calls{}
	deep := tool.Of("deep", "Deep.", c.leaves("c1"), tool.NoContextTool())
	left := tool.Of("left", "Left.", []tool.Tool{c.leaf("b1"), deep}, tool.NoContextTool())
	right := tool.Of("right", "Right.", c.leaves("d1", "d2"), tool.NoContextTool())
	root := tool.Of("root", "Root.", []tool.Tool{c.leaf("a1"), left, right}, tool.NoContextTool())
	p := newScript(t,
		onTurn(1, callTools(raw("root", `{}`))),
		onTurn(2, callTools(raw("left", `{}`), raw("right", `{}`))),
		onTurn(3, callTools(raw("deep", `{}`), raw("d2", `{}`))),
		onTurn(4, callTools(raw("c1", `{}`))),
		onTurn(5, text("done")),
	)
	ev := &events{}
	run(t, p, loop.Options{Observer: ev.observe}, root)
	want := [][]string{
		{"root"},
		{"a1", "left", "right", "root"},
		{"a1", "root", "b1", "deep", "left", "d1", "d2", "right"},
		{"a1", "root", "b1", "left", "d1", "d2", "right", "c1", "deep"},
		{"a1", "root", "b1", "left", "d1", "d2", "right", "c1", "deep"},
	}
	if diff := cmp.Diff(want, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d2 {}", "c1 {}"}, c.all()); diff != "" {
		t.Errorf("leaf calls (-want +got):\n%s", diff)
	}
	var changed []string
	for _, e := range ev.changes() {
		changed = append(changed, fmt.Sprintf("%d -%v +%v", e.Iteration, e.Removed, e.Added))
	}
	wantChanged := []string{
		"1 -[root] +[a1 left right root]",
		"2 -[left] +[b1 deep left]",
		"2 -[right] +[d1 d2 right]",
		"3 -[deep] +[c1 deep]",
	}
	if diff := cmp.Diff(wantChanged, changed); diff != "" {
		t.Errorf("ToolsChanged (-want +got):\n%s", diff)
	}
}

// TestLoopExclusive: an exclusive facade leaves only its children (and its guide and
// context tools); a plain one keeps its siblings.
func TestLoopExclusive(t *testing.T) {
	c := &calls{}
	personality := tool.Of("change_personality", "Change the personality.", c.leaves("formal", "casual"), tool.Exclusive())
	p := newScript(t, onTurn(1, callTools(raw("change_personality", `{}`))), onTurn(2, text("done")))
	run(t, p, loop.Options{}, c.leaf("weather"), personality, c.leaf("news"))
	want := [][]string{
		{"weather", "change_personality", "news"},
		{"formal", "casual", "change_personality", "change_personality_context"},
	}
	if diff := cmp.Diff(want, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
}

// TestLoopDecoratesInjectedTools: every injected tool goes through Options.Decorate,
// nested children included, and the decorated tool is what the loop calls and unfolds.
func TestLoopDecoratesInjectedTools(t *testing.T) {
	c := &calls{}
	inner := tool.Of("inner", "Inner.", c.leaves("x", "y"))
	outer := tool.Of("outer", "Outer.", []tool.Tool{c.leaf("a"), inner})
	var mu sync.Mutex
	var decorated []string
	decorate := func(t tool.Tool) tool.Tool {
		mu.Lock()
		decorated = append(decorated, t.Definition().Name)
		mu.Unlock()
		return tool.WithDescription(t, "[d] "+t.Definition().Description)
	}
	p := newScript(t,
		onTurn(1, callTools(raw("outer", `{}`))),
		onTurn(2, callTools(raw("inner", `{}`))),
		onTurn(3, callTools(raw("x", `{}`))),
		onTurn(4, text("done")),
	)
	res := run(t, p, loop.Options{Decorate: decorate}, outer)
	want := []string{"a", "inner", "outer", "outer_context", "x", "y", "inner", "inner_context"}
	if diff := cmp.Diff(want, decorated); diff != "" {
		t.Errorf("decorated (-want +got):\n%s", diff)
	}
	for _, spec := range p.Requests()[3].Tools {
		if !strings.HasPrefix(spec.Description, "[d] ") {
			t.Errorf("tool %s offered undecorated: %q", spec.Name, spec.Description)
		}
	}
	if got := toolResults(res.History); got[2] != "x: x done" {
		t.Errorf("results = %q", got)
	}
}

// TestLoopSelectableBindsTools: a selector creates a tool bound to the call's arguments;
// it runs once per call although both the facade and the strategy select.
func TestLoopSelectableBindsTools(t *testing.T) {
	var runs atomic.Int32
	shop := tool.Selectable("shop", "Open a shop connection.", schema.Params(schema.String("conn", "Connection string")), nil,
		tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
			runs.Add(1)
			conn := strings.TrimSuffix(strings.TrimPrefix(in, `{"conn":"`), `"}`)
			return []tool.Tool{tool.New("cart_add", "Adds to the cart.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
				return tool.Text("added via " + conn), nil
			})}, nil
		}), tool.NoContextTool(), tool.NoGuideTool())
	p := newScript(t,
		onTurn(1, callTools(raw("shop", `{"conn":"db-7"}`))),
		onTurn(2, callTools(raw("cart_add", `{}`))),
		onTurn(3, text("done")),
	)
	res := run(t, p, loop.Options{RunID: "run-1"}, shop)
	if diff := cmp.Diff([]string{"shop: " + unfoldText("cart_add"), "cart_add: added via db-7"}, toolResults(res.History)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if runs.Load() != 1 {
		t.Errorf("selector ran %d times, want 1", runs.Load())
	}
}

// TestLoopShortcut: a call of the facade that names a child runs the child at once, and
// the facade unfolds all the same.
func TestLoopShortcut(t *testing.T) {
	c := &calls{}
	addTask := tool.New("add_task", "Adds a task.", schema.Params(schema.String("title", "Title")), func(_ context.Context, in string) (tool.Result, error) {
		return tool.Text("added " + in), nil
	})
	tasks := tool.Of("tasks", "Tasks.", []tool.Tool{addTask, c.leaf("list_tasks")}, tool.NoContextTool())
	p := newScript(t,
		onTurn(1, callTools(raw("tasks", `{"add_task": {"title": "Write report"}}`))),
		onTurn(2, text("done")),
	)
	res := run(t, p, loop.Options{}, tasks)
	if diff := cmp.Diff([]string{`tasks: added {"title":"Write report"}`}, toolResults(res.History)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]string{{"tasks"}, {"add_task", "list_tasks", "tasks"}}, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
}

// TestLoopChainedStrategies: the unfolding strategy with another one, both in the loop.
func TestLoopChainedStrategies(t *testing.T) {
	c := &calls{}
	audit := c.leaf("audit")
	f := tool.Of("db", "Database.", c.leaves("query"), tool.NoContextTool(), tool.NoGuideTool())
	auditAfterQuery := loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		if ic.Tool.Definition().Name == "query" {
			return loop.Injection{Add: []tool.Tool{audit}}, nil
		}
		return loop.Injection{}, nil
	})
	p := newScript(t,
		onTurn(1, callTools(raw("db", `{}`))),
		onTurn(2, callTools(raw("query", `{}`))),
		onTurn(3, text("done")),
	)
	run(t, p, loop.Options{Strategies: []loop.Strategy{progressive.New(), auditAfterQuery}}, f)
	if diff := cmp.Diff([][]string{{"db"}, {"query"}, {"query", "audit"}}, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
}
