package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCreatedToolFromAnotherReplica serves the database group from two real toolworker
// processes: the facade database creates query_orders_replica for the connection its call
// names; the model is offered that tool with its own description and schema; once the
// replica that ran the selection is killed, the other one, which never saw the
// selection, serves the tool's calls from the state; a call with bad arguments is refused
// with the loop's text, never reaching a worker.
func TestCreatedToolFromAnotherReplica(t *testing.T) {
	const prompt = "List the orders."
	var m *mesh
	var opener string
	opened := make(chan string, 1) // the replica that ran the selector, from the run's events
	model := &promptModel{scripts: map[string]*turnModel{prompt: {turns: []modelTurn{
		{calls: [][2]string{{"database", `{"connection":"orders-replica"}`}}},
		{calls: [][2]string{{"query_orders_replica", `{"sql":"SELECT id, status, total FROM orders"}`}}, before: func() {
			// The event may reach the client after this request reaches the model.
			select {
			case opener = <-opened:
				_ = m.workers[opener].Kill()
			case <-time.After(20 * time.Second):
			}
		}},
		{calls: [][2]string{{"query_orders_replica", `{"sql":42}`}}},
		{text: "Three orders."},
	}}}}
	useModel(t, model)
	m = startMesh(t, "", "provider: {name: openai}")
	m.startWorker("database-1", "database")
	m.startWorker("database-2", "database")
	m.waitWorkers("database-1", "database-2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"database"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "database" {
			opened <- f.GetWorkerId()
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if opener == "" {
		t.Fatal("the database call's event never came")
	}
	defer delete(m.workers, opener) // killed on purpose
	if got := finalText(t, evs); got != "Three orders." {
		t.Errorf("final text %q", got)
	}
	type call struct {
		Tool, Content, Worker string
		Outcome               toolpb.ToolCallOutcome
	}
	var got []call
	for _, f := range finished(evs, 0) {
		got = append(got, call{f.GetTool(), f.GetContent(), f.GetWorkerId(), f.GetOutcome()})
	}
	other := "database-1"
	if opener == "database-1" {
		other = "database-2"
	}
	want := []call{
		{"database", unfoldText("Query with SELECT statements only: the databases are read-only.", "query_orders_replica"), opener, toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK},
		{"query_orders_replica", "3 rows from orders-replica:\nid=1 status=shipped total=12.50\nid=2 status=pending total=7.25\nid=3 status=delivered total=30.00", other, toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK},
		{"query_orders_replica", `Error: invalid arguments for tool 'query_orders_replica': property "sql": expected string, got integer. Call it again with arguments that match its schema.`, "", toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	reqs := model.requests(prompt)
	if len(reqs) != 4 {
		t.Fatalf("the model got %d requests, want 4", len(reqs))
	}
	first := []offeredTool{{"database", "Connect to a database. Call it with a connection's name, such as orders-replica, to get the tool that queries that database.",
		`{"properties":{"connection":{"description":"name of the database connection, such as orders-replica","type":"string"}},"required":["connection"],"type":"object"}`}}
	if diff := cmp.Diff(first, reqs[0].tools); diff != "" {
		t.Errorf("tools of the first request (-want +got):\n%s", diff)
	}
	query := offeredTool{"query_orders_replica", "Query database at orders-replica",
		`{"additionalProperties":false,"properties":{"sql":{"description":"SQL-like query text, such as SELECT id, status, total FROM orders","type":"string"}},"required":["sql"],"type":"object"}`}
	var second *offeredTool
	for _, o := range reqs[1].tools {
		if o.Name == query.Name {
			second = &o
		}
	}
	if second == nil || *second != query {
		t.Errorf("the second request offered %v, want %v among them", reqs[1].tools, query)
	}
}
