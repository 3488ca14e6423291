package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// statusScript unfolds agent_process, calls process_status, and answers with what it
// said; after the tool gate, when the run offers it, first.
func statusScript() scripted.Script {
	return scripted.Script{Name: "status", Rules: []scripted.Rule{
		{When: scripted.When{Tool: "process_status"}, Reply: scripted.Reply{Text: `{{ result "process_status" }}`}},
		{When: scripted.When{Tool: "agent_process"}, Reply: scriptedCall("process_status", `{}`)},
		{When: scripted.When{Turn: 1, HasTool: "gate"}, Reply: scriptedCall("gate", `{}`)},
		{Reply: scriptedCall("agent_process", `{}`)},
	}}
}

// statusLines are the lines of process_status but the running time.
func statusLines(t *testing.T, text string) []string {
	t.Helper()
	ls := strings.Split(text, "\n")
	if len(ls) != 5 || !strings.HasPrefix(ls[2], "Running time: ") {
		t.Fatalf("process_status answered %q", text)
	}
	return append(ls[:2:2], ls[3:]...)
}

// process_status reports the run's goal: the request's, else the name of the agent it
// runs, else none.
func TestProcessStatusReportsTheGoal(t *testing.T) {
	e := newEnv(t, envOptions{script: statusScript(), configure: func(c *config.Config) {
		c.AgenticTools = map[string]config.AgenticTool{"adder": {Kind: "agent", Description: "Adds.", Tools: []string{"add"}}}
	}})
	e.startWorker("w1", examplegroups.Math())
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		req  *toolpb.RunRequest
		goal string
	}{
		{"goal", &toolpb.RunRequest{RunId: "g-1", Goal: "Find the customer's last order"}, "Goal: Find the customer's last order"},
		{"none", &toolpb.RunRequest{RunId: "g-2"}, "Goal: No goal (utility process)"},
		{"agent", &toolpb.RunRequest{RunId: "g-3", Agent: "adder"}, "Goal: adder"},
		{"agent and goal", &toolpb.RunRequest{RunId: "g-4", Agent: "adder", Goal: "add up the invoice"}, "Goal: add up the invoice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Prompt, tc.req.ToolGroups = "go", []string{"agent_process"}
			final, err := e.cl.RunAndWait(ctx, tc.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := statusLines(t, final.GetText())
			want := []string{"Process ID: " + tc.req.GetRunId(), "Status: RUNNING", tc.goal, "Parent ID: none (root process)"}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("process_status:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// A subagent's child run reports its own goal, the subagent's name, and its parent.
func TestSubagentReportsItsGoalAndParent(t *testing.T) {
	script := scripted.Script{Name: "sub", Rules: []scripted.Rule{
		{When: scripted.When{Tool: "process_status"}, Reply: scripted.Reply{Text: `{{ result "process_status" }}`}},
		{When: scripted.When{Tool: "agent_process"}, Reply: scriptedCall("process_status", `{}`)},
		{When: scripted.When{User: `"child"`}, Reply: scriptedCall("agent_process", `{}`)},
		{When: scripted.When{Tool: "helper"}, Reply: scripted.Reply{Text: `{{ result "helper" }}`}},
		{Reply: scriptedCall("helper", `{"task":"child"}`)},
	}}
	e := newEnv(t, envOptions{script: script})
	var child string
	req := &toolpb.RunRequest{RunId: "triage-1", Prompt: "go", Goal: "triage the ticket", Tools: []string{"helper"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "helper", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, ToolGroups: []string{"agent_process"},
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}}}`,
	}}}
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if ev.GetNestedLoopStarted() != nil {
			child = ev.GetScope().GetChildRunId()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if child == "" {
		t.Fatal("no child run")
	}
	got := strings.Join(statusLines(t, final.GetText()), "\n")
	if want := "Process ID: " + child + "\nStatus: RUNNING\nGoal: helper\nParent ID: triage-1"; got != want {
		t.Errorf("the subagent's process_status:\n%s\nwant:\n%s", got, want)
	}
}

// A run resumed from its journal keeps its goal.
func TestGoalSurvivesAResume(t *testing.T) {
	ctx := testContext(t)
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	e1 := newEnv(t, envOptions{journal: j, script: statusScript()})
	e1.startWorker("w-1", reviewGroup(make(chan struct{})))
	req := &toolpb.RunRequest{RunId: "goal-1", Prompt: "go", Goal: "review the change", ToolGroups: []string{"danger", "agent_process"}, Detached: true}
	first, stop := context.WithCancel(ctx)
	for ev, err := range e1.cl.Run(first, req) {
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "gate" {
			break
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx) // the run stops unfinished, waiting for the gate
	cancel()

	release := make(chan struct{})
	close(release)
	e2 := newEnv(t, envOptions{journal: j, script: statusScript()})
	e2.startWorker("w-2", reviewGroup(release))
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	var final string
	for ev, err := range e2.cl.Watch(ctx, "goal-1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if got := statusLines(t, final); got[2] != "Goal: review the change" {
		t.Errorf("the resumed run's process_status:\n%s", final)
	}
}

// embedGroup's tool embed reports two calls of an embedding model, as a tool on a worker
// does: usage reports on the blackboard.
func embedGroup() worker.Group {
	embed := tool.New("embed", "Embeds the text.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		for range 2 {
			e, err := tool.NewEntry(process.EmbeddingUsageType, map[string]any{"provider": "openai", "model": "text-embedding-3-small", "inputs": 4})
			if err != nil {
				return tool.Result{}, err
			}
			if err := tool.BlackboardFrom(ctx).Add(e); err != nil {
				return tool.Result{}, err
			}
		}
		return tool.Text("embedded"), nil
	})
	return worker.Group{Role: "vectors", Tools: []tool.Tool{embed}}
}

// process_cost counts what the run did up to the call: the model calls of its own loop
// and of an agentic tool's nested loop, priced by the configured prices, and the
// embedding calls a worker's tool reported.
func TestProcessCostCountsTheRun(t *testing.T) {
	script := scripted.Script{Name: "cost", Rules: []scripted.Rule{
		{When: scripted.When{User: `"nested"`, Turn: 1}, Reply: scriptedCall("add", `{"a":1,"b":2}`)},
		{When: scripted.When{User: `"nested"`}, Reply: scripted.Reply{Text: "three"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("calc", `{"task":"nested"}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("embed", `{}`)},
		{When: scripted.When{Turn: 3}, Reply: scriptedCall("agent_process", `{}`)},
		{When: scripted.When{Turn: 4}, Reply: scriptedCall("process_cost", `{}`)},
		{Reply: scripted.Reply{Text: `{{ result "process_cost" }}`}},
	}}
	price := config.Price{InputPerMTok: 1000, OutputPerMTok: 3000}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Models.Prices = map[string]config.Price{"scripted/priced": price}
	}})
	e.startWorker("w1", examplegroups.Math(), embedGroup())
	req := &toolpb.RunRequest{RunId: "cost-1", Prompt: "go", Llm: &toolpb.LlmOptions{Model: "scripted/priced"},
		ToolGroups: []string{"agent_process", "vectors"}, Tools: []string{"calc"},
		AgenticTools: []*toolpb.AgenticToolSpec{{Name: "calc", Description: "Calculate.", Tools: []string{"add"},
			ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}}}`}}}
	var calls, nested int
	var in, out int64
	var cost float64
	asked := false
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "process_cost" {
			asked = true
		}
		u := ev.GetUsage()
		if u == nil || asked {
			return
		}
		calls++
		if ev.GetScope() != nil {
			nested++
		}
		in, out, cost = in+u.GetInputTokens(), out+u.GetOutputTokens(), cost+u.GetCostUsd()
		if want := price.Cost(u.GetInputTokens(), u.GetOutputTokens()); u.GetCostUsd() != want || want == 0 {
			t.Errorf("a model call of %d+%d tokens cost %v, want %v", u.GetInputTokens(), u.GetOutputTokens(), u.GetCostUsd(), want)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 6 || nested != 2 {
		t.Fatalf("%d model calls (%d nested) before process_cost, want 6 (2 nested)", calls, nested)
	}
	want := fmt.Sprintf("Cost and Usage:\n\nTotal cost: $%.6f\nLLM invocations: 6\nEmbedding invocations: 2\n\n"+
		"Tokens used:\n  Prompt tokens: %d\n  Completion tokens: %d\n  Total tokens: %d", cost, in, out, in+out)
	if got := final.GetText(); got != want {
		t.Errorf("process_cost:\n%s\nwant:\n%s", got, want)
	}
	snap, err := e.cl.GetRun(testContext(t), "cost-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.GetBlackboard()); n != 0 {
		t.Errorf("the usage reports joined the blackboard: %v", snap.GetBlackboard())
	}
}
