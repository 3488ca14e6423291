package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCreatedToolAcrossReplicas: the database example's selectable facade creates a
// query tool for the connection its call names; the model is offered that tool under
// its own name, description and schema; its calls are served by the replica that did not
// run the selection too (it rebuilds the tool from the state), and a call with bad
// arguments is refused by the loop before it reaches a worker.
func TestCreatedToolAcrossReplicas(t *testing.T) {
	const query = "query_orders_replica"
	script := scripted.Script{Name: "database", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{ID: "c1", Name: "database", ArgumentsRaw: `{"connection":"orders-replica"}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{
			{ID: "c2", Name: query, ArgumentsRaw: `{"sql":"SELECT id, status FROM orders"}`},
			{ID: "c3", Name: query, ArgumentsRaw: `{"sql":"SELECT total FROM orders"}`},
			{ID: "c4", Name: query, ArgumentsRaw: `{"sql":"SELECT 1"}`},
			{ID: "c5", Name: query, ArgumentsRaw: `{"sql":5}`},
		}}},
		{When: scripted.When{Turn: 3}, Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Database())
	e.startWorker("w2", examplegroups.Database())
	fins := map[string]*toolpb.ToolCallFinished{}
	if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "list the orders", ToolGroups: []string{"database"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil {
			fins[f.GetCallId()] = f
		}
	}); err != nil {
		t.Fatal(err)
	}
	open := fins["c1"]
	const unfold = "Tools now available: query_orders_replica. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool.\n\nQuery with SELECT statements only: the databases are read-only."
	if open.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK || open.GetContent() != unfold {
		t.Fatalf("database finished %v, want %q", open, unfold)
	}
	other := false
	for _, id := range []string{"c2", "c3", "c4"} {
		f := fins[id]
		if want := "3 rows from orders-replica:\n" + examplegroups.DatabaseRows; f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK || f.GetContent() != want {
			t.Errorf("%s finished %v, want %q", id, f, want)
		}
		if f.GetWorkerId() != "" && f.GetWorkerId() != open.GetWorkerId() {
			other = true
		}
	}
	if !other {
		t.Errorf("every query ran on %s, the replica that ran the selection; want the other one too", open.GetWorkerId())
	}
	const refusal = `Error: invalid arguments for tool 'query_orders_replica': property "sql": expected string, got integer. Call it again with arguments that match its schema.`
	if f := fins["c5"]; f.GetContent() != refusal || f.GetWorkerId() != "" {
		t.Errorf("c5 finished %v, want the refusal %q from the loop", f, refusal)
	}
	reqs := e.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the model got %d requests, want 3", len(reqs))
	}
	type offered struct{ Name, Description, Schema string }
	var got []offered
	for _, s := range reqs[1].Tools {
		got = append(got, offered{s.Name, s.Description, string(s.Parameters)})
	}
	want := []offered{
		{query, "Query database at orders-replica", `{"type":"object","properties":{"sql":{"type":"string","description":"SQL-like query text, such as SELECT id, status, total FROM orders"}},"required":["sql"],"additionalProperties":false}`},
		{"database", "Call a specific tool instead: query_orders_replica", `{"type":"object","properties":{}}`},
		{"database_context", "", `{"type":"object","properties":{}}`},
	}
	if len(got) == 3 {
		got[2].Description = "" // the context tool's text is the facade's (pinned in internal/progressive)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tools of the second request (-want +got):\n%s", diff)
	}
}
