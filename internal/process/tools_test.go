package process_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// child finds a facade's child by name.
func child(t *testing.T, f tool.Facade, name string) tool.Tool {
	t.Helper()
	for _, c := range f.Children() {
		if c.Definition().Name == name {
			return c
		}
	}
	t.Fatalf("facade %s has no child %s", f.Definition().Name, name)
	return nil
}

func call(t *testing.T, ctx context.Context, tl tool.Tool, input string) tool.Result {
	t.Helper()
	res, err := tl.Call(ctx, input)
	if err != nil {
		t.Fatalf("%s: %v", tl.Definition().Name, err)
	}
	return res
}

func names(ts []tool.Tool) []string {
	var out []string
	for _, c := range ts {
		out = append(out, c.Definition().Name)
	}
	return out
}

func entry(t *testing.T, typeName, js string) tool.Entry {
	t.Helper()
	e, err := tool.EntryFromJSON(typeName, []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestAgentProcessFacade(t *testing.T) {
	f := process.AgentProcessTools()
	d := f.Definition()
	if d.Name != "agent_process" || d.Description != "Access information about the current agent process including status, budget, cost, and history. Invoke to see available operations." {
		t.Errorf("definition %q %q", d.Name, d.Description)
	}
	if got := f.Options().UsageNotes; got != "Use process_status for current state and runtime. Use process_budget to check limits. Use process_cost to see spending." {
		t.Errorf("usage notes %q", got)
	}
	want := []string{"process_status", "process_budget", "process_cost", "process_history", "process_tools_stats", "process_models"}
	if diff := cmp.Diff(want, names(f.Children())); diff != "" {
		t.Errorf("children (-want +got):\n%s", diff)
	}
	descs := map[string]string{
		"process_status":      "Get the current process status, ID, running time, and goal information",
		"process_budget":      "Get the budget limits and current usage against those limits",
		"process_cost":        "Get detailed cost and token usage information",
		"process_history":     "Get the history of actions taken in this process",
		"process_tools_stats": "Get statistics about tool usage in this process",
		"process_models":      "Get information about which models (LLM and embedding) have been used",
	}
	for _, c := range f.Children() {
		if got := c.Definition().Description; got != descs[c.Definition().Name] {
			t.Errorf("%s description %q", c.Definition().Name, got)
		}
		if got := string(c.Definition().InputSchema.JSON()); got != `{"type":"object","properties":{}}` {
			t.Errorf("%s schema %s", c.Definition().Name, got)
		}
		// Without a process every inner tool says so, as text.
		res := call(t, context.Background(), c, "{}")
		if res.IsError() || res.Content != "No agent process available. These tools require an active agent context." {
			t.Errorf("%s without a process: %v %q", c.Definition().Name, res.Kind, res.Content)
		}
	}
}

func TestAgentProcessTexts(t *testing.T) {
	p := process.Restore(process.State{
		ID: "run_1", Status: process.StatusRunning, Started: time.Now().Add(-3 * time.Second),
		Limits: process.Limits{MaxCostUSD: 2, MaxTokens: 1000000, MaxActions: 50},
	}, nil)
	ctx := process.NewContext(context.Background(), p)
	f := process.AgentProcessTools()

	status := call(t, ctx, child(t, f, "process_status"), "{}").Content
	lines := strings.Split(status, "\n")
	if len(lines) != 5 || lines[0] != "Process ID: run_1" || lines[1] != "Status: RUNNING" || !strings.HasPrefix(lines[2], "Running time: 3.") ||
		lines[3] != "Goal: No goal (utility process)" || lines[4] != "Parent ID: none (root process)" {
		t.Errorf("process_status:\n%s", status)
	}
	if got := call(t, ctx, child(t, f, "process_history"), "{}").Content; got != "No actions have been executed yet." {
		t.Errorf("empty history %q", got)
	}
	if got := call(t, ctx, child(t, f, "process_tools_stats"), "{}").Content; got != "No tools have been called yet." {
		t.Errorf("empty stats %q", got)
	}
	if got := call(t, ctx, child(t, f, "process_models"), "{}").Content; got != "No models have been used yet." {
		t.Errorf("empty models %q", got)
	}

	p.RecordModelCall("openai", "gpt-4o", 1200, 300, 0.0125)
	p.RecordModelCall("openai", "gpt-4o", 800, 200, 0.0075)
	p.RecordModelCall("anthropic", "claude-sonnet-4-5", 10, 5, 0)
	p.RecordAction(process.Action{Tool: "search", Duration: 250 * time.Millisecond})
	p.RecordAction(process.Action{Tool: "fetch", Duration: 2*time.Minute + 5*time.Second})
	p.RecordAction(process.Action{Tool: "search", Duration: 1500 * time.Millisecond, Failed: true})

	wantBudget := "Budget Status:\n\nCost limit: $2.0000\n  Used: $0.0200\n  Remaining: $1.9800\n\n" +
		"Token limit: 1,000,000\n  Used: 2515\n  Remaining: 997485\n\nAction limit: 50\n  Used: 3\n  Remaining: 47"
	if got := call(t, ctx, child(t, f, "process_budget"), "{}").Content; got != wantBudget {
		t.Errorf("process_budget:\n%s\nwant:\n%s", got, wantBudget)
	}
	wantCost := "Cost and Usage:\n\nTotal cost: $0.020000\nLLM invocations: 3\nEmbedding invocations: 0\n\n" +
		"Tokens used:\n  Prompt tokens: 2010\n  Completion tokens: 505\n  Total tokens: 2515"
	if got := call(t, ctx, child(t, f, "process_cost"), "{}").Content; got != wantCost {
		t.Errorf("process_cost:\n%s\nwant:\n%s", got, wantCost)
	}
	wantHistory := "Action history (3 action(s)):\n\n1. search (250ms)\n2. fetch (2m 5s)\n3. search (1.5s)"
	if got := call(t, ctx, child(t, f, "process_history"), "{}").Content; got != wantHistory {
		t.Errorf("process_history:\n%s", got)
	}
	wantStats := "Tool Usage Statistics:\n\nTotal tool calls: 3\nUnique tools used: 2\n\nCalls by tool:\n  search: 2 calls\n  fetch: 1 calls"
	if got := call(t, ctx, child(t, f, "process_tools_stats"), "{}").Content; got != wantStats {
		t.Errorf("process_tools_stats:\n%s", got)
	}
	wantModels := "Models used (2):\n\n- gpt-4o (openai)\n- claude-sonnet-4-5 (anthropic)"
	if got := call(t, ctx, child(t, f, "process_models"), "{}").Content; got != wantModels {
		t.Errorf("process_models:\n%s", got)
	}
}

// Every limit reads as three lines, whether the run has it or not: a limit it does not
// have is none, and what remains of it unlimited.
func TestBudgetVariants(t *testing.T) {
	const (
		costSet      = "Cost limit: $2.0000\n  Used: $0.0200\n  Remaining: $1.9800"
		costNone     = "Cost limit: none\n  Used: $0.0200\n  Remaining: unlimited"
		tokensSet    = "Token limit: 1,000,000\n  Used: 2500\n  Remaining: 997500"
		tokensNone   = "Token limit: none\n  Used: 2500\n  Remaining: unlimited"
		actionsSet   = "Action limit: 50\n  Used: 3\n  Remaining: 47"
		actionsNone  = "Action limit: none\n  Used: 3\n  Remaining: unlimited"
		header       = "Budget Status:\n\n"
		fullyUnbound = header + "Cost limit: none\n  Used: $0.0000\n  Remaining: unlimited\n\n" +
			"Token limit: none\n  Used: 0\n  Remaining: unlimited\n\nAction limit: none\n  Used: 0\n  Remaining: unlimited"
	)
	for _, tc := range []struct {
		name   string
		limits process.Limits
		want   string
	}{
		{"all", process.Limits{MaxCostUSD: 2, MaxTokens: 1000000, MaxActions: 50}, header + costSet + "\n\n" + tokensSet + "\n\n" + actionsSet},
		{"none", process.Limits{}, header + costNone + "\n\n" + tokensNone + "\n\n" + actionsNone},
		{"cost only", process.Limits{MaxCostUSD: 2}, header + costSet + "\n\n" + tokensNone + "\n\n" + actionsNone},
		{"tokens only", process.Limits{MaxTokens: 1000000}, header + costNone + "\n\n" + tokensSet + "\n\n" + actionsNone},
		{"actions only", process.Limits{MaxActions: 50}, header + costNone + "\n\n" + tokensNone + "\n\n" + actionsSet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := process.New("run_2", tc.limits, process.Bounds{}, nil)
			p.RecordModelCall("openai", "gpt-4o", 2000, 500, 0.02)
			for range 3 {
				p.RecordAction(process.Action{Tool: "search"})
			}
			got := call(t, process.NewContext(context.Background(), p), child(t, process.AgentProcessTools(), "process_budget"), "{}").Content
			if got != tc.want {
				t.Errorf("process_budget:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	fresh := process.New("run_3", process.Limits{}, process.Bounds{}, nil)
	if got := call(t, process.NewContext(context.Background(), fresh), child(t, process.AgentProcessTools(), "process_budget"), "{}").Content; got != fullyUnbound {
		t.Errorf("process_budget of a fresh run:\n%s\nwant:\n%s", got, fullyUnbound)
	}
}

func TestStatusWithGoalAndParent(t *testing.T) {
	p := process.Restore(process.State{ID: "child", ParentID: "run_1", Goal: "find the customer", Status: process.StatusRunning, Started: time.Now()}, nil)
	got := call(t, process.NewContext(context.Background(), p), child(t, process.AgentProcessTools(), "process_status"), "{}").Content
	if !strings.Contains(got, "\nGoal: find the customer\nParent ID: run_1") {
		t.Errorf("process_status:\n%s", got)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                     "0ms",
		999 * time.Millisecond:                "999ms",
		time.Second:                           "1.0s",
		59*time.Second + 950*time.Millisecond: "59.9s",
		time.Minute:                           "1m 0s",
		time.Hour + 2*time.Minute + 3*time.Second: "1h 2m 3s",
	} {
		if got := process.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestBlackboardFacade(t *testing.T) {
	f := process.BlackboardTools(nil)
	d := f.Definition()
	if d.Name != "blackboard" || d.Description != "Access objects in the current process context. Invoke to see available operations for listing, getting, and describing objects." {
		t.Errorf("definition %q %q", d.Name, d.Description)
	}
	if got := f.Options().UsageNotes; got != "Use blackboard_list to see what's available. Use blackboard_get for named bindings, blackboard_last for the most recent of a type." {
		t.Errorf("usage notes %q", got)
	}
	if diff := cmp.Diff([]string{"blackboard_list", "blackboard_get", "blackboard_last", "blackboard_describe", "blackboard_count"}, names(f.Children())); diff != "" {
		t.Errorf("children (-want +got):\n%s", diff)
	}
	if got := string(child(t, f, "blackboard_last").Definition().InputSchema.JSON()); !strings.Contains(got, `"The type name (e.g., 'User' or 'com.example.User')"`) {
		t.Errorf("blackboard_last schema %s", got)
	}
	for _, c := range f.Children() {
		res := call(t, context.Background(), c, `{"name":"x","typeName":"X"}`)
		if res.IsError() || res.Content != "No agent process available. Blackboard tools require an active agent context." {
			t.Errorf("%s without a process: %q", c.Definition().Name, res.Content)
		}
	}

	p := process.New("run_3", process.Limits{}, process.Bounds{}, nil)
	ctx := process.NewContext(context.Background(), p)
	get := func(name, input string) string { return call(t, ctx, child(t, f, name), input).Content }
	if got := get("blackboard_list", "{}"); got != "Blackboard is empty - no objects available." {
		t.Errorf("empty list %q", got)
	}
	add := func(name string, e tool.Entry) {
		if err := p.Add(process.Origin{}, name, e); err != nil {
			t.Fatal(err)
		}
	}
	add("", entry(t, "com.example.User", `{"name":"Ann"}`))
	add("user", entry(t, "com.example.User", `{"name":"Bob"}`))
	add("note", entry(t, "Note", `{"content":"call back on Monday"}`))

	checks := []struct{ tool, input, want string }{
		{"blackboard_list", "", "Blackboard contains 3 object(s):\n[0] User\n[1] User\n[2] Note"},
		{"blackboard_get", `{"name":"user"}`, "User bound to 'user':\n{\n  \"name\": \"Bob\"\n}"},
		{"blackboard_get", `{}`, "Missing required parameter: name"},
		{"blackboard_get", `not json`, "Missing required parameter: name"},
		{"blackboard_get", `{"name":"nobody"}`, "No object found with binding name 'nobody'"},
		{"blackboard_last", `{"typeName":"User"}`, "Last User:\n{\n  \"name\": \"Bob\"\n}"},
		{"blackboard_last", `{"typeName":"com.example.User"}`, "Last User:\n{\n  \"name\": \"Bob\"\n}"},
		{"blackboard_last", `{"typeName":"org.other.User"}`, "No object of type 'org.other.User' found in blackboard"},
		{"blackboard_last", `{}`, "Missing required parameter: typeName"},
		{"blackboard_describe", `{"name":"note"}`, "Description of Note 'note':\ncall back on Monday"},
		{"blackboard_describe", `{"name":"x"}`, "No object found with binding name 'x'"},
		{"blackboard_count", `{"typeName":"User"}`, "Found 2 object(s) of type 'User' in blackboard"},
		{"blackboard_count", `{"typeName":"Order"}`, "Found 0 object(s) of type 'Order' in blackboard"},
		{"blackboard_count", `{}`, "Missing required parameter: typeName"},
	}
	for _, c := range checks {
		if got := get(c.tool, c.input); got != c.want {
			t.Errorf("%s %s:\n got %q\nwant %q", c.tool, c.input, got, c.want)
		}
	}
}

// Every blackboard tool that shows an entry shows it with the formatter it was made with.
func TestCustomFormatter(t *testing.T) {
	f := process.BlackboardTools(func(e tool.Entry) string { return "<" + e.TypeName + ">" })
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	_ = p.Add(process.Origin{}, "u", entry(t, "User", `{}`))
	ctx := process.NewContext(context.Background(), p)
	for tl, want := range map[string]string{
		"blackboard_get":      "User bound to 'u':\n<User>",
		"blackboard_describe": "Description of User 'u':\n<User>",
		"blackboard_last":     "Last User:\n<User>",
	} {
		if got := call(t, ctx, child(t, f, tl), `{"name":"u","typeName":"User"}`).Content; got != want {
			t.Errorf("%s: got %q, want %q", tl, got, want)
		}
	}
}

func TestProgressTool(t *testing.T) {
	pt := process.ProgressTool()
	d := pt.Definition()
	if d.Description != "Report progress to the user. Call this during long-running work to show what you're doing." {
		t.Errorf("description %q", d.Description)
	}
	if got := string(d.InputSchema.JSON()); got != `{"type":"object","properties":{"status":{"type":"string","description":"Short progress message describing what you're currently doing"}},"required":["status"]}` {
		t.Errorf("schema %s", got)
	}
	if res := call(t, context.Background(), pt, `{}`); !res.IsError() || res.Content != "Missing 'status' parameter" {
		t.Errorf("missing status: %v %q", res.Kind, res.Content)
	}
	if res := call(t, context.Background(), pt, `{"status":"working"}`); res.IsError() || res.Content != "Progress noted (no active process to display it)." {
		t.Errorf("no process: %q", res.Content)
	}
	var got []process.Output
	p := process.New("run", process.Limits{}, process.Bounds{}, func(o process.Output) error { got = append(got, o); return nil })
	ctx := process.NewContext(toolcall.WithCallInfo(context.Background(), tool.CallInfo{RunID: "run", LoopID: "loop_1", CallID: "c1"}), p)
	if res := call(t, ctx, pt, `{"status":"reading page 2"}`); res.Content != "Progress reported: reading page 2" {
		t.Errorf("reported: %q", res.Content)
	}
	want := []process.Output{process.ProgressReported{Tool: "progress", CallID: "c1", LoopID: "loop_1", Status: "reading page 2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outputs (-want +got):\n%s", diff)
	}
}

func TestCommunicateTool(t *testing.T) {
	ct := process.CommunicateTool()
	d := ct.Definition()
	if d.Name != "communicate" || d.Description != "Send a permanent message to the user. Use this to report results, share links (e.g., PR URLs), or inform the user of important outcomes. Unlike progress, this creates a visible chat message." {
		t.Errorf("definition %q %q", d.Name, d.Description)
	}
	if got := string(d.InputSchema.JSON()); got != `{"type":"object","properties":{"message":{"type":"string","description":"The message to send to the user"}},"required":["message"]}` {
		t.Errorf("schema %s", got)
	}
	if res := call(t, context.Background(), ct, `{}`); !res.IsError() || res.Content != "Missing 'message' parameter" {
		t.Errorf("missing message: %v %q", res.Kind, res.Content)
	}
	if res := call(t, context.Background(), ct, `{"message":"hi"}`); res.IsError() || res.Content != "Message noted (no active process to deliver it)." {
		t.Errorf("no process: %q", res.Content)
	}
	var got []process.Output
	p := process.New("run", process.Limits{}, process.Bounds{}, func(o process.Output) error { got = append(got, o); return nil })
	ctx := process.NewContext(context.Background(), p)
	if res := call(t, ctx, ct, `{"message":"PR opened: https://example.com/pr/1"}`); res.IsError() || res.Content != "Message sent to user." {
		t.Errorf("sent: %q", res.Content)
	}
	if len(got) != 1 || got[0].(process.MessageSent).Text != "PR opened: https://example.com/pr/1" {
		t.Errorf("outputs %v", got)
	}
	// A blank message is refused without sending.
	if res := call(t, ctx, ct, `{"message":"  "}`); !res.IsError() || !strings.Contains(res.Content, "must not be blank") || len(got) != 1 {
		t.Errorf("blank: %q, %d outputs", res.Content, len(got))
	}
	// A channel failure is never reported as success.
	failing := process.New("run", process.Limits{}, process.Bounds{}, func(process.Output) error { return errors.New("client gone") })
	if res := call(t, process.NewContext(context.Background(), failing), ct, `{"message":"hello"}`); !res.IsError() || !strings.Contains(res.Content, "client gone") {
		t.Errorf("channel failure: %q", res.Content)
	}
	// Invalid JSON is an error the model reads.
	if res := call(t, ctx, ct, `{"message":`); !res.IsError() {
		t.Errorf("invalid JSON: %q", res.Content)
	}
}

// The built-in groups' tools are made once: every call gets the same tools, in a slice
// of its own that a caller may change without changing the next call's.
func TestGroupToolsMadeOnce(t *testing.T) {
	a, ok := process.GroupTools(process.GroupCommunication, nil)
	if !ok || len(a) != 2 {
		t.Fatalf("communication: %v, %v", a, ok)
	}
	a[0] = nil
	b, _ := process.GroupTools(process.GroupCommunication, nil)
	if b[0] == nil || b[0].Definition().Name != "progress" || b[1].Definition().Name != "communicate" {
		t.Fatalf("a caller's change reached the next call: %v", b)
	}
	if _, ok := process.GroupTools("no_such_group", nil); ok {
		t.Error("an unknown role is a built-in group")
	}
}

// The blackboard tools show a blob as its type, media type and size, never its bytes,
// whatever the formatter.
func TestBlackboardToolsShowBlobs(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	png := tool.Entry{TypeName: "chart.Png", Data: []byte("\x89PNG\r\n\x1a\n1234"), MediaType: "image/png"}
	if err := p.Add(process.Origin{}, "chart", png); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(process.Origin{}, "", entry(t, "Note", `{"content":"see the chart"}`)); err != nil {
		t.Fatal(err)
	}
	ctx := process.NewContext(context.Background(), p)
	for _, f := range []process.Formatter{nil, func(e tool.Entry) string { return "<" + string(e.JSON) + string(e.Data) + ">" }} {
		bb := process.BlackboardTools(f)
		for _, c := range []struct{ tool, input, want string }{
			{"blackboard_list", `{}`, "Blackboard contains 2 object(s):\n[0] Png (image/png, 12 bytes)\n[1] Note"},
			{"blackboard_describe", `{"name":"chart"}`, "Description of Png 'chart':\nchart.Png (image/png, 12 bytes)"},
			{"blackboard_get", `{"name":"chart"}`, "Png bound to 'chart':\nchart.Png (image/png, 12 bytes)"},
			{"blackboard_last", `{"typeName":"Png"}`, "Last Png:\nchart.Png (image/png, 12 bytes)"},
			{"blackboard_count", `{"typeName":"chart.Png"}`, "Found 1 object(s) of type 'chart.Png' in blackboard"},
		} {
			if got := call(t, ctx, child(t, bb, c.tool), c.input).Content; got != c.want {
				t.Errorf("%s %s:\n got %q\nwant %q", c.tool, c.input, got, c.want)
			}
		}
	}
	if got := process.DefaultFormatter(png); got != "chart.Png (image/png, 12 bytes)" {
		t.Errorf("DefaultFormatter = %q", got)
	}
}
