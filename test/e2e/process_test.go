package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// processConfig publishes find_customers' artifacts to the blackboard and keeps
// export_report's reports as assets.
const processConfig = `
provider: {name: openai}
tools:
  find_customers:
    artifacts:
      - sinks: [blackboard]
  export_report:
    assets:
      - type: Report
`

// TestBlackboardAcrossReplicas: find_customers returns a list artifact, which the
// configured sink puts on the blackboard element by element; blackboard_last returns the
// newest; bind_customer, on one replica, binds a customer that customer_summary receives
// on the other replica (the first is killed before); GetRun shows the blackboard.
func TestBlackboardAcrossReplicas(t *testing.T) {
	var m *mesh
	var binder string
	var mu sync.Mutex
	bound := make(chan string, 1) // the replica that ran bind_customer, from the run's events
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"find_customers", `{"query":"London"}`}}},
		{calls: [][2]string{{"blackboard", `{}`}}},
		{calls: [][2]string{{"blackboard_last", `{"typeName":"Customer"}`}}},
		{calls: [][2]string{{"bind_customer", `{"id":2}`}}},
		{calls: [][2]string{{"customer_summary", `{}`}}, before: func() {
			// The event may reach the client after this request reaches the model.
			select {
			case id := <-bound:
				mu.Lock()
				binder = id
				mu.Unlock()
				_ = m.workers[id].Kill() // the replica that ran bind_customer
			case <-time.After(20 * time.Second):
			}
		}},
		{text: "Grace Hopper lives in New York."},
	}}
	useModel(t, model)
	m = startMesh(t, "", processConfig)
	m.startWorker("crm-1", "crm")
	m.startWorker("crm-2", "crm")
	m.waitWorkers("crm-1", "crm-2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "bb-1", Prompt: "Who is customer 2?", ToolGroups: []string{"crm", "blackboard"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "bind_customer" {
			bound <- f.GetWorkerId()
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "Grace Hopper lives in New York." {
		t.Errorf("final text %q", got)
	}
	byTool := map[string]*toolpb.ToolCallFinished{}
	for _, f := range finished(evs, 0) {
		byTool[f.GetTool()] = f
	}
	wantLast := "Last Customer:\n{\n  \"id\": 3,\n  \"name\": \"Alan Turing\",\n  \"city\": \"London\",\n  \"status\": \"blocked\"\n}"
	if got := byTool["blackboard_last"].GetContent(); got != wantLast {
		t.Errorf("blackboard_last = %q, want %q", got, wantLast)
	}
	sum := byTool["customer_summary"]
	if sum.GetContent() != "Grace Hopper (id 2) lives in New York; account active" {
		t.Errorf("customer_summary = %q", sum.GetContent())
	}
	if sum.GetWorkerId() == binder || binder == "" {
		t.Errorf("customer_summary ran on %s, bind_customer on %s: want different replicas", sum.GetWorkerId(), binder)
	}
	delete(m.workers, binder) // killed on purpose

	// Events: two captured artifacts, then three blackboard changes in order.
	var captured []string
	var changed []*toolpb.BlackboardChanged
	for _, ev := range evs {
		if a := ev.GetArtifact(); a != nil {
			captured = append(captured, a.GetSink()+":"+a.GetObject().GetJson())
		}
		if c := ev.GetBlackboardChanged(); c != nil {
			changed = append(changed, c)
		}
	}
	wantCaptured := []string{
		`blackboard:{"id":1,"name":"Ada Lovelace","city":"London","status":"active"}`,
		`blackboard:{"id":3,"name":"Alan Turing","city":"London","status":"blocked"}`,
	}
	if diff := cmp.Diff(wantCaptured, captured); diff != "" {
		t.Errorf("artifact events (-want +got):\n%s", diff)
	}
	if len(changed) != 3 || changed[2].GetObject().GetName() != "customer" || changed[2].GetTool() != "bind_customer" || changed[2].GetIndex() != 2 || changed[2].GetLoopId() == "" {
		t.Errorf("blackboard_changed events: %v", changed)
	}

	run, err := m.c.GetRun(ctx, "bb-1")
	if err != nil {
		t.Fatal(err)
	}
	var board []string
	for _, o := range run.GetBlackboard() {
		board = append(board, o.GetTypeName()+"|"+o.GetName()+"|"+o.GetJson())
	}
	wantBoard := []string{
		`crm.Customer||{"id":1,"name":"Ada Lovelace","city":"London","status":"active"}`,
		`crm.Customer||{"id":3,"name":"Alan Turing","city":"London","status":"blocked"}`,
		`crm.Customer|customer|{"id":2,"name":"Grace Hopper","city":"New York","status":"active"}`,
	}
	if diff := cmp.Diff(wantBoard, board); diff != "" {
		t.Errorf("GetRun blackboard (-want +got):\n%s", diff)
	}
	if b := run.GetBudget(); b.GetActions() != 5 {
		t.Errorf("GetRun budget: %v, want 5 actions", b)
	}
}

// TestRemoteReplan: a worker tool raises replan with a reason and a blackboard object;
// the run ends REPLAN_REQUESTED, its last event says why and what was added, and the
// stream ends OK.
func TestRemoteReplan(t *testing.T) {
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"check_credit", `{"id":3}`}}},
		{text: "unreachable"},
	}}
	useModel(t, model)
	m := startMesh(t, "", processConfig)
	m.startWorker("crm-1", "crm")
	m.waitWorkers("crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "replan-1", Prompt: "Order for customer 3", ToolGroups: []string{"crm"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	last := evs[len(evs)-1].GetReplanRequested()
	if last == nil {
		t.Fatalf("last event %v, want replan_requested", evs[len(evs)-1])
	}
	if last.GetReason() != "customer 3 (Alan Turing) is blocked: the order cannot go ahead" || last.GetTool() != "check_credit" || last.GetLoopId() == "" {
		t.Errorf("replan_requested %v", last)
	}
	if a := last.GetAdded(); len(a) != 1 || a[0].GetName() != "credit_hold" || a[0].GetJson() != `{"customer_id":3,"reason":"account blocked"}` {
		t.Errorf("added %v", a)
	}
	run, err := m.c.GetRun(ctx, "replan-1")
	if err != nil {
		t.Fatal(err)
	}
	if run.GetState() != toolpb.RunState_RUN_STATE_REPLAN_REQUESTED || run.GetReason() != last.GetReason() || len(run.GetBlackboard()) != 1 {
		t.Errorf("GetRun: %v", run)
	}
	// RunAndWait says why it has no final result.
	_, err = m.c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "Order for customer 3", ToolGroups: []string{"crm"}}, nil)
	var re *client.ReplanError
	if !errors.As(err, &re) || re.Replan.GetTool() != "check_credit" {
		t.Errorf("RunAndWait: %v, want a ReplanError", err)
	}
}

// TestProgressAndCommunicateInOrder: a slow worker tool reports progress while it runs,
// then the model calls progress and communicate; the client sees the reports before the
// tool's finished event, then the model's report and message, in order — as progress and
// message events only: the calls of progress and communicate, which those events show,
// are left out of the stream, and still count in GetRun. The report becomes an asset.
func TestProgressAndCommunicateInOrder(t *testing.T) {
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"export_report", `{"pages":3,"delay_ms":150}`}}},
		{calls: [][2]string{{"progress", `{"status":"Checking the report"}`}}},
		{calls: [][2]string{{"communicate", `{"message":"Your report is ready."}`}}},
		{text: "Done."},
	}}
	useModel(t, model)
	m := startMesh(t, "", processConfig)
	m.startWorker("crm-1", "crm")
	m.waitWorkers("crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "progress-1", Prompt: "Export the report", ToolGroups: []string{"crm", "communication"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	var seq []string
	for _, ev := range evs {
		switch {
		case ev.GetToolCallStarted() != nil:
			seq = append(seq, "start "+ev.GetToolCallStarted().GetTool())
		case ev.GetToolCallFinished() != nil:
			seq = append(seq, "finish "+ev.GetToolCallFinished().GetTool())
		case ev.GetProgress() != nil:
			seq = append(seq, "progress "+ev.GetProgress().GetTool()+": "+ev.GetProgress().GetStatus())
		case ev.GetMessageToUser() != nil:
			seq = append(seq, "message: "+ev.GetMessageToUser().GetText())
		case ev.GetAssetAdded() != nil:
			seq = append(seq, "asset "+ev.GetAssetAdded().GetAsset().GetObject().GetTypeName())
		case ev.GetFinalResult() != nil:
			seq = append(seq, "final")
		}
	}
	want := []string{
		"start export_report",
		"progress export_report: exporting page 1 of 3",
		"progress export_report: exporting page 2 of 3",
		"progress export_report: exporting page 3 of 3",
		"asset crm.Report",
		"finish export_report",
		"progress progress: Checking the report",
		"message: Your report is ready.",
		"final",
	}
	if diff := cmp.Diff(want, seq); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	for i := 1; i < len(evs); i++ {
		// The run's journal numbers its events among its other records: they increase.
		if evs[i].GetSequence() <= evs[i-1].GetSequence() {
			t.Fatalf("sequence %d after %d", evs[i].GetSequence(), evs[i-1].GetSequence())
		}
	}
	run, err := m.c.GetRun(ctx, "progress-1")
	if err != nil {
		t.Fatal(err)
	}
	if a := run.GetAssets(); len(a) != 1 || a[0].GetTool() != "export_report" || !strings.Contains(a[0].GetObject().GetJson(), `"pages":3`) {
		t.Errorf("GetRun assets: %v", a)
	}
	if run.GetToolCalls() != 3 {
		t.Errorf("GetRun tool calls %d, want 3 (progress and communicate count)", run.GetToolCalls())
	}
}

// TestActionBudget: with an action budget of 3, the fourth tool call is not run; the
// run ends with BUDGET_EXCEEDED and the budget message.
func TestActionBudget(t *testing.T) {
	call := modelTurn{calls: [][2]string{{"find_customers", `{"query":""}`}}}
	model := &turnModel{turns: []modelTurn{call, call, call, call, {text: "unreachable"}}}
	useModel(t, model)
	m := startMesh(t, "", processConfig)
	m.startWorker("crm-1", "crm")
	m.waitWorkers("crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "Find everyone, again and again", ToolGroups: []string{"crm"},
		Limits: &toolpb.RunLimits{MaxActions: 3}}, nil)
	if status.Code(err) != codes.ResourceExhausted {
		m.dump()
		t.Fatalf("run error %v, want RESOURCE_EXHAUSTED", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Reason != toolpb.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED {
		t.Errorf("error %v, want reason BUDGET_EXCEEDED", err)
	}
	const msg = "run budget exceeded: the action budget of 3 tool calls is used up; tool 'find_customers' was not run"
	fins := finished(evs, 0)
	if len(fins) != 4 || fins[3].GetContent() != "Error: not run: "+msg || fins[3].GetWorkerId() != "" {
		t.Errorf("finished events: %v", fins)
	}
	if e := evs[len(evs)-1].GetError(); e == nil || e.GetMessage() != msg {
		t.Errorf("last event %v", evs[len(evs)-1])
	}
	if calls := workerCalls(t, m.c)["crm-1"]; calls != 3 {
		t.Errorf("the worker ran %d calls, want 3", calls)
	}
}

// TestSinkErrors: a run's transform that fails gives the model an error it can read and
// the run goes on; a sink name that nobody provides is refused before the run starts,
// naming the field; and an orchestrator whose config names an unknown sink refuses to
// start, naming the key.
func TestSinkErrors(t *testing.T) {
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"find_customers", `{"query":"Ada"}`}}},
		{text: "Could not keep the result."},
	}}
	useModel(t, model)
	m := startMesh(t, "", "provider: {name: openai}")
	m.startWorker("crm-1", "crm")
	m.waitWorkers("crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "Find Ada", ToolGroups: []string{"crm"},
		ArtifactSinks: []*toolpb.ArtifactSinkSpec{{Tools: []string{"find_customers"}, Transform: "value.no_such_field", Sinks: []string{"blackboard"}}}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "Could not keep the result." {
		t.Errorf("final text %q", got)
	}
	f := finished(evs, 1)
	if len(f) != 1 || f[0].GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR ||
		!contains(f[0].GetContent(), "Error: tool 'find_customers' ran, but its artifact could not go to the blackboard sink: the transform failed", "no such key", "Its result was: Found 1 customer(s)") {
		t.Errorf("finished %v", f)
	}

	_, err = m.c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "x", ToolGroups: []string{"crm"},
		ArtifactSinks: []*toolpb.ArtifactSinkSpec{{Sinks: []string{"blackboard", "archive"}}}}, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `artifact_sinks[0].sinks[1]: unknown sink "archive"`) {
		t.Errorf("unknown sink in a request: %v", err)
	}
	_, err = m.c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "x", ToolGroups: []string{"crm"},
		ArtifactSinks: []*toolpb.ArtifactSinkSpec{{When: "value.id >", Sinks: []string{"blackboard"}}}}, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "artifact_sinks[0].when: invalid CEL expression") {
		t.Errorf("bad predicate in a request: %v", err)
	}

	bin, err := harness.Bin("orchestrator")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfg, []byte("provider: {name: scripted}\ngroups:\n  crm:\n    artifacts:\n      - sinks: [blackboard, archive]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmdCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	out, err := exec.CommandContext(cmdCtx, bin, "--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `groups.crm.artifacts[0].sinks[1]: unknown sink "archive"`) {
		t.Errorf("orchestrator with an unknown sink: %v\n%s", err, out)
	}
}

// TestProcessToolsAndTermination: the model opens the agent_process facade, reads its
// budget, and a worker tool terminates the agent: the run ends TERMINATED with the
// reason, and the stream ends OK.
func TestProcessToolsAndTermination(t *testing.T) {
	model := &turnModel{turns: []modelTurn{
		{calls: [][2]string{{"agent_process", `{}`}}},
		{calls: [][2]string{{"process_budget", `{}`}}},
		{calls: [][2]string{{"escalate_to_human", `{"reason":"the customer asked for a person"}`}}},
		{text: "unreachable"},
	}}
	useModel(t, model)
	m := startMesh(t, "", processConfig)
	m.startWorker("crm-1", "crm")
	m.waitWorkers("crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "term-1", Prompt: "I want a human", ToolGroups: []string{"crm", "agent_process"},
		Limits: &toolpb.RunLimits{MaxActions: 10}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	fins := finished(evs, 0)
	if len(fins) < 2 || !strings.HasPrefix(fins[0].GetContent(), "Tools now available: process_status, process_budget, process_cost, process_history, process_tools_stats, process_models.") ||
		!strings.Contains(fins[1].GetContent(), "Action limit: 10\n  Used: 1\n  Remaining: 9") || fins[1].GetWorkerId() != "" {
		t.Errorf("finished: %v", fins)
	}
	last := evs[len(evs)-1].GetTerminated()
	if last == nil || last.GetScope() != toolpb.TerminateScope_TERMINATE_SCOPE_AGENT || last.GetReason() != "the customer asked for a person" || last.GetTool() != "escalate_to_human" {
		t.Fatalf("last event %v, want terminated", evs[len(evs)-1])
	}
	run, err := m.c.GetRun(ctx, "term-1")
	if err != nil {
		t.Fatal(err)
	}
	if run.GetState() != toolpb.RunState_RUN_STATE_TERMINATED || run.GetReason() != "the customer asked for a person" {
		t.Errorf("GetRun: %v", run)
	}
}
