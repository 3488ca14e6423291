package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// agenticConfig declares a playbook and a state machine over the math workers.
const agenticConfig = `
agentic_tools:
  calc_pb:
    kind: playbook
    description: Multiply, once you have added.
    parameters: {type: object, properties: {task: {type: string}}, required: [task]}
    tools: [add]
    locked_tools:
      - {tool: multiply, after_all: [add]}
  calc_sm:
    kind: state_machine
    description: Add, then multiply, then subtract.
    parameters: {type: object, properties: {task: {type: string}}}
    state_machine:
      initial_state: ADD
      states:
        - {name: ADD, tools: [{tool: add, transitions_to: MUL}]}
        - {name: MUL, tools: [{tool: multiply, transitions_to: SUB}]}
        - {name: SUB, tools: [{tool: subtract}]}
  helper:
    kind: agent
    parameters: {type: object, properties: {task: {type: string}}}
    tools: [customer_summary, bind_customer]
`

// nestedEvents are the tool_call_finished events of the nested loops (scope set), by
// tool, in order.
func nestedEvents(evs []*toolpb.RunResponse) map[string][]*toolpb.ToolCallFinished {
	out := map[string][]*toolpb.ToolCallFinished{}
	for _, ev := range evs {
		if f := ev.GetToolCallFinished(); f != nil && ev.GetScope() != nil {
			out[f.GetTool()] = append(out[f.GetTool()], f)
		}
	}
	return out
}

// TestAgenticTools runs agentic tools in real processes: the orchestrator runs the
// nested loops, the workers serve the sub-tools.
func TestAgenticTools(t *testing.T) {
	m := startMesh(t, "agentic.yaml", agenticConfig)
	m.startWorker("math-1", "math")
	m.startWorker("crm-1", "crm,text")
	m.waitWorkers("math-1", "crm-1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("playbook", func(t *testing.T) { checkAgenticPlaybook(ctx, t, m) })
	t.Run("state machine", func(t *testing.T) { checkAgenticStateMachine(ctx, t, m) })
	// The subagent runs as a child run: it sees the customer the parent bound, and the
	// customer it binds is the parent's newest once it completed.
	t.Run("subagent", func(t *testing.T) { checkAgenticSubagent(ctx, t, m) })
	// research → lookup → find_customers: lookup returns the customers it found as its
	// artifact; research returns them too only when it captures nested artifacts.
	for _, capture := range []bool{false, true} {
		t.Run("two levels, capture "+map[bool]string{false: "off", true: "on"}[capture], func(t *testing.T) {
			checkAgenticTwoLevels(ctx, t, m, capture)
		})
	}
}

// checkAgenticPlaybook runs the playbook: multiply is refused until add has run.
func checkAgenticPlaybook(ctx context.Context, t *testing.T, m *mesh) {
	t.Helper()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "playbook", Tools: []string{"calc_pb"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "product 42" {
		t.Errorf("final %q", got)
	}
	mul := nestedEvents(evs)["multiply"]
	if len(mul) != 2 || mul[0].GetContent() != "This tool is not yet available. You must first use: add" || mul[0].GetWorkerId() != "" ||
		mul[1].GetContent() != "42" || mul[1].GetWorkerId() != "math-1" {
		t.Errorf("multiply calls %v", mul)
	}
}

// checkAgenticStateMachine runs the state machine: subtract is refused outside state
// SUB, and the nested loop shows in the events and in GetRun.
func checkAgenticStateMachine(ctx context.Context, t *testing.T, m *mesh) {
	t.Helper()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "sm", Prompt: "machine", Tools: []string{"calc_sm"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); got != "difference 19" {
		t.Errorf("final %q", got)
	}
	sub := nestedEvents(evs)["subtract"]
	if len(sub) != 2 || sub[0].GetContent() != "This tool is not available in the current state (ADD). It is only available in state: SUB" || sub[1].GetContent() != "19" {
		t.Errorf("subtract calls %v", sub)
	}
	var started *toolpb.NestedLoopStarted
	for _, ev := range evs {
		if s := ev.GetNestedLoopStarted(); s != nil {
			started = s
			if ev.GetScope().GetKind() != toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE || ev.GetScope().GetDepth() != 1 || ev.GetScope().GetTool() != "calc_sm" {
				t.Errorf("scope %v", ev.GetScope())
			}
		}
	}
	if started == nil || strings.Join(started.GetTools(), ",") != "add,multiply,subtract" {
		t.Errorf("nested loop started: %v", started)
	}
	r, err := m.c.GetRun(ctx, "sm")
	if err != nil || len(r.GetLoops()) != 2 || r.GetLoops()[1].GetIterations() != 5 || r.GetLoops()[1].GetToolCalls() != 4 {
		t.Errorf("GetRun loops %v, %v", r.GetLoops(), err)
	}
}

// checkAgenticSubagent runs the helper agent as a child run and checks what it saw and
// what it left on the parent's blackboard.
func checkAgenticSubagent(ctx context.Context, t *testing.T, m *mesh) {
	t.Helper()
	evs, err := m.run(ctx, &toolpb.RunRequest{RunId: "parent", Prompt: "subagent", ToolGroups: []string{"crm"}, Tools: []string{"helper"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	// The parent's last customer_summary reads the customer the child bound.
	if got := finalText(t, evs); got != "Grace Hopper (id 2) lives in New York; account active" {
		t.Errorf("final %q", got)
	}
	var child string
	for _, ev := range evs {
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "helper" && f.GetContent() != "child saw Ada Lovelace (id 1) lives in London; account active" {
			t.Errorf("helper: %q", f.GetContent())
		}
		if ev.GetNestedLoopStarted() != nil {
			child = ev.GetScope().GetChildRunId()
		}
	}
	r, err := m.c.GetRun(ctx, child)
	if err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || len(r.GetBlackboard()) != 2 {
		t.Errorf("child run %s: %v, %v", child, r, err)
	}
}

// checkAgenticTwoLevels runs research → lookup → find_customers, with research
// capturing nested artifacts or not.
func checkAgenticTwoLevels(ctx context.Context, t *testing.T, m *mesh, capture bool) {
	t.Helper()
	req := &toolpb.RunRequest{Prompt: "nested", Tools: []string{"research"}, AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "research", Description: "Research customers.", Tools: []string{"lookup", "uppercase"}, CaptureNestedArtifacts: capture,
			ParametersJsonSchema: `{"type":"object","properties":{"q":{"type":"string"}}}`},
		{Name: "lookup", Description: "Look customers up.", Tools: []string{"find_customers"},
			ParametersJsonSchema: `{"type":"object","properties":{"q":{"type":"string"}}}`},
	}}
	evs, err := m.run(ctx, req, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if got := finalText(t, evs); !strings.HasPrefix(got, "research found ") {
		t.Errorf("final %q", got)
	}
	var outer, inner *toolpb.ToolCallFinished
	depths := map[int32]bool{}
	for _, ev := range evs {
		depths[ev.GetScope().GetDepth()] = true
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "research" && ev.GetScope() == nil {
			outer = f
		}
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "lookup" && ev.GetScope().GetDepth() == 1 {
			inner = f
		}
	}
	if !depths[2] {
		t.Errorf("no event of the loop two levels down")
	}
	if inner == nil || inner.GetArtifact().GetTypeName() != "[]crm.Customer" || !strings.Contains(string(inner.GetArtifact().GetJson()), "Ada Lovelace") {
		t.Errorf("lookup: %v", inner)
	}
	if outer == nil {
		t.Fatal("no research call")
	}
	if capture != (outer.GetArtifact() != nil) || (capture && !strings.Contains(string(outer.GetArtifact().GetJson()), "Ada Lovelace")) {
		t.Errorf("capture %v: research's artifact %v", capture, outer.GetArtifact())
	}
}
