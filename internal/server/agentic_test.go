package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func scriptedCall(name, args string) scripted.Reply {
	return scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: name, ArgumentsRaw: args}}}
}

// A playbook declared in the request runs its nested loop over the math workers: the
// locked tool answers with what unlocks it, then runs once its prerequisite ran. The
// nested loop's events arrive tagged with their scope, and GetRun shows both loops.
func TestAgenticPlaybookInARun(t *testing.T) {
	script := scripted.Script{Name: "pb", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "calc", Turn: 1}, Reply: scriptedCall("calc", `{"task":"6*7"}`)},
		{When: scripted.When{HasTool: "calc"}, Reply: scripted.Reply{Text: "outer: {{ result \"calc\" }}"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("multiply", `{"a":6,"b":7}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("add", `{"a":1,"b":1}`)},
		{When: scripted.When{Turn: 3}, Reply: scriptedCall("multiply", `{"a":6,"b":7}`)},
		{Reply: scripted.Reply{Text: "product {{ result \"multiply\" }}"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Math())
	req := &toolpb.RunRequest{RunId: "pb", Prompt: "go", Tools: []string{"calc"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "calc", Description: "Calculate.", Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK,
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}`,
		Tools:                []string{"add"},
		LockedTools:          []*toolpb.LockedTool{{Tool: "multiply", AfterAll: []string{"add"}}},
	}}}
	var locked, calcCall string
	var scopes []string
	var finished *toolpb.NestedLoopFinished
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && ev.GetScope() != nil && f.GetTool() == "multiply" && locked == "" {
			locked = f.GetContent()
		}
		if c := ev.GetToolCallStarted(); c != nil && ev.GetScope() == nil && c.GetTool() == "calc" {
			calcCall = c.GetCallId()
		}
		if s := ev.GetScope(); s != nil {
			scopes = append(scopes, s.GetTool()+"/"+s.GetKind().String())
			if s.GetParentCallId() != calcCall || calcCall == "" {
				t.Errorf("a nested loop's event names parent call %q, want calc's %q", s.GetParentCallId(), calcCall)
			}
		}
		if f := ev.GetNestedLoopFinished(); f != nil {
			finished = f
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != "outer: product 42" {
		t.Errorf("final %q", final.GetText())
	}
	if locked != "This tool is not yet available. You must first use: add" {
		t.Errorf("first multiply: %q", locked)
	}
	if len(scopes) == 0 || scopes[0] != "calc/AGENTIC_KIND_PLAYBOOK" {
		t.Errorf("scopes %v", scopes)
	}
	if finished == nil || finished.GetIterations() != 4 || finished.GetToolCalls() != 3 || finished.GetError() != "" {
		t.Errorf("finished %v", finished)
	}
	r, err := e.cl.GetRun(testContext(t), "pb")
	if err != nil {
		t.Fatal(err)
	}
	loops := r.GetLoops()
	if len(loops) != 2 || loops[0].GetScope().GetDepth() != 0 || loops[1].GetScope().GetParentLoopId() != loops[0].GetScope().GetLoopId() ||
		loops[1].GetScope().GetDepth() != 1 || loops[1].GetIterations() != 4 || loops[0].GetIterations() != 2 || loops[0].GetRunning() {
		t.Errorf("loops %v", loops)
	}
	// The nested loop's calls count for the run.
	if r.GetToolCalls() != 4 {
		t.Errorf("run tool calls %d, want 4", r.GetToolCalls())
	}
}

// Bad agentic specs are refused before the run starts, with INVALID_ARGUMENT naming the
// field.
func TestAgenticSpecsRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.startWorker("w1", examplegroups.Math())
	for _, tc := range []struct {
		spec  *toolpb.AgenticToolSpec
		field string
	}{
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Tools: []string{"nope"}}, "agentic_tools[0].tools[0]"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Tools: []string{"add", "x"}}, "agentic_tools[0].tools[1]"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Kind: toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE,
			StateMachine: &toolpb.StateMachineSpec{States: []*toolpb.MachineState{{Name: "A", Tools: []*toolpb.MachineStateTool{{Tool: "add"}}}}}}, "agentic_tools[0].state_machine.initial_state"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK, Tools: []string{"add"},
			LockedTools: []*toolpb.LockedTool{{Tool: "multiply", When: "called.size("}}}, "agentic_tools[0].locked_tools[0].when"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK, Tools: []string{"add"},
			LockedTools: []*toolpb.LockedTool{{Tool: "multiply", When: "iteration"}}}, "agentic_tools[0].locked_tools[0].when"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Kind: toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE,
			StateMachine: &toolpb.StateMachineSpec{InitialState: "A", States: []*toolpb.MachineState{
				{Name: "A", Tools: []*toolpb.MachineStateTool{{Tool: "add"}}}, {Name: "B"}}}}, "agentic_tools[0].state_machine.states[1].name"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Tools: []string{"add"}, ParametersJsonSchema: `{"type":"objekt"}`}, "agentic_tools[0].parameters_json_schema"},
		{&toolpb.AgenticToolSpec{Name: "x", Tools: []string{"add"}}, "agentic_tools[0].description"},
		{&toolpb.AgenticToolSpec{Name: "x", Description: "X.", Tools: []string{"add"}, MaxIterations: 5000}, "agentic_tools[0].max_iterations"},
	} {
		_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"x"}, AgenticTools: []*toolpb.AgenticToolSpec{tc.spec}}, nil)
		st, _ := status.FromError(errors.Unwrap(err))
		if st == nil {
			st, _ = status.FromError(err)
		}
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) {
			t.Errorf("%v: %v, want INVALID_ARGUMENT naming %s", tc.spec, err, tc.field)
		}
	}
}

// Nesting deeper than loop.max_nesting_depth is refused: the innermost call gets an
// error result that says so, and the run still answers.
func TestAgenticDepthLimit(t *testing.T) {
	script := scripted.Script{Name: "deep", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "l1", Turn: 1}, Reply: scriptedCall("l1", `{}`)},
		{When: scripted.When{HasTool: "l2", Turn: 1}, Reply: scriptedCall("l2", `{}`)},
		{When: scripted.When{HasTool: "add", Turn: 1}, Reply: scriptedCall("add", `{"a":1,"b":2}`)},
		{Reply: scripted.Reply{Text: "{{ results }}"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Loop.MaxNestingDepth = 1
		c.AgenticTools = map[string]config.AgenticTool{
			"l1": {Description: "Level one.", Tools: []string{"l2"}},
			"l2": {Description: "Level two.", Tools: []string{"add"}},
		}
	}})
	e.startWorker("w1", examplegroups.Math())
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"l1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Error: agentic tool 'l2' was not run: nested loops go at most 1 deep (loop.max_nesting_depth)"; final.GetText() != want {
		t.Errorf("final %q, want %q", final.GetText(), want)
	}
}

// Tool chaining inside an agentic tool: a state machine finds a user (its global tool)
// and then, in the state find_user's success does not change, runs the User method on
// it; the nested loop's bindings are its own, so the run's loop sees no user bound.
func TestChainingInsideAStateMachine(t *testing.T) {
	script := scripted.Script{Name: "sm", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "accounts", Turn: 1}, Reply: scriptedCall("accounts", `{}`)},
		{When: scripted.When{HasTool: "accounts", Turn: 2}, Reply: scriptedCall("profile", `{}`)},
		{When: scripted.When{HasTool: "accounts"}, Reply: scripted.Reply{Text: "{{ result \"profile\" }} / {{ latest \"accounts\" }}"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("find_user", `{"name":"grace"}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("updateEmail", `{"email":"grace@navy.mil"}`)},
		{When: scripted.When{Turn: 3}, Reply: scriptedCall("profile", `{}`)},
		{Reply: scripted.Reply{Text: "{{ result \"profile\" }}"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Users())
	req := &toolpb.RunRequest{Prompt: "go", Tools: []string{"accounts", "profile"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "accounts", Description: "Manage accounts.", Kind: toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE, Tools: []string{"find_user"},
		StateMachine: &toolpb.StateMachineSpec{InitialState: "EDIT", States: []*toolpb.MachineState{{Name: "EDIT", Tools: []*toolpb.MachineStateTool{
			{Tool: "updateEmail", TransitionsTo: "READ"}}}, {Name: "READ", Tools: []*toolpb.MachineStateTool{{Tool: "profile"}}}}},
	}}}
	final, err := e.cl.RunAndWait(testContext(t), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "This tool is not yet available. You must first retrieve a single User instance. / Grace Hopper (id 2) <grace@navy.mil>"; final.GetText() != want {
		t.Errorf("final %q, want %q", final.GetText(), want)
	}
}

// A subagent runs as a child run: it reads the parent's blackboard (a copy), what it
// binds joins the parent's blackboard once it completes, GetRun reports the child run,
// and its tool calls count for the parent.
func TestSubagent(t *testing.T) {
	script := scripted.Script{Name: "sub", Rules: []scripted.Rule{
		{When: scripted.When{User: `"child"`, Turn: 1}, Reply: scriptedCall("customer_summary", `{}`)},
		{When: scripted.When{User: `"child"`, Turn: 2}, Reply: scriptedCall("bind_customer", `{"id":2}`)},
		{When: scripted.When{User: `"child"`}, Reply: scripted.Reply{Text: `child saw {{ latest "customer_summary" }}`}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("bind_customer", `{"id":1}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("helper", `{"task":"child"}`)},
		{Reply: scripted.Reply{Text: `{{ result "helper" }}`}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.CRMGroup())
	var childRun string
	req := &toolpb.RunRequest{RunId: "parent", Prompt: "go", ToolGroups: []string{"crm"}, Tools: []string{"helper"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "helper", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"customer_summary", "bind_customer"},
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}}}`,
	}}}
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if s := ev.GetNestedLoopStarted(); s != nil {
			childRun = ev.GetScope().GetChildRunId()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != "child saw Ada Lovelace (id 1) lives in London; account active" {
		t.Errorf("final %q", final.GetText())
	}
	ctx := testContext(t)
	parent, err := e.cl.GetRun(ctx, "parent")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range parent.GetBlackboard() {
		names = append(names, b.GetName()+"="+b.GetJson())
	}
	if len(names) != 2 || !strings.Contains(names[1], "Grace Hopper") {
		t.Errorf("parent's blackboard %v: want the child's customer after the parent's", names)
	}
	if parent.GetToolCalls() != 4 {
		t.Errorf("parent tool calls %d, want 4 (2 of its own, 2 of the child)", parent.GetToolCalls())
	}
	if childRun == "" {
		t.Fatal("no child run id in the nested loop's scope")
	}
	child, err := e.cl.GetRun(ctx, childRun)
	if err != nil || child.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || len(child.GetBlackboard()) != 2 || child.GetIterations() != 3 {
		t.Errorf("child run %v, %v", child, err)
	}
	loops := parent.GetLoops()
	if len(loops) != 2 || loops[1].GetScope().GetChildRunId() != childRun || loops[1].GetScope().GetKind() != toolpb.AgenticKind_AGENTIC_KIND_AGENT {
		t.Errorf("loops %v", loops)
	}
}

// RunRequest.agent runs an agent directly: its tools and system prompt.
func TestRunAnAgentDirectly(t *testing.T) {
	script := scripted.Script{Name: "direct", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1, HasTool: "add"}, Reply: scriptedCall("add", `{"a":2,"b":2}`)},
		{Reply: scripted.Reply{Text: `{{ result "add" }}`}},
	}}
	store, err := runlog.OpenMemory(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{script: script, journal: store, configure: func(c *config.Config) {
		c.AgenticTools = map[string]config.AgenticTool{"adder": {Kind: "agent", Description: "Adds.", Tools: []string{"add"}, SystemPrompt: "You add."}}
	}})
	e.startWorker("w1", examplegroups.Math())
	var started *toolpb.RunStarted
	var runID string
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "2+2", Agent: "adder", SystemPrompt: "Be brief."}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started, runID = s, ev.GetRunId()
		}
	})
	if err != nil || final.GetText() != "4" {
		t.Fatalf("%v, %v", final, err)
	}
	if started == nil || strings.Join(started.GetTools(), ",") != "add" {
		t.Errorf("started %v", started)
	}
	checkAgentListing(t, e, runID)
	_, err = e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "x", Agent: "nobody"}, nil)
	if st, _ := status.FromError(errors.Unwrap(err)); st == nil || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "agent") {
		if st2, _ := status.FromError(err); st2.Code() != codes.InvalidArgument || !strings.Contains(st2.Message(), "agent") {
			t.Errorf("unknown agent: %v", err)
		}
	}
}

// Cancelling the parent run cancels its subagent's child run.
func TestCancellingTheParentCancelsTheChild(t *testing.T) {
	script := scripted.Script{Name: "slow", Rules: []scripted.Rule{
		{When: scripted.When{User: `"child"`, Turn: 1}, Reply: scriptedCall("export_report", `{"pages":10,"delay_ms":2000}`)},
		{When: scripted.When{User: `"child"`}, Reply: scripted.Reply{Text: "exported"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("helper", `{"task":"child"}`)},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.CRMGroup())
	req := &toolpb.RunRequest{RunId: "p2", Prompt: "go", Tools: []string{"helper"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "helper", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"export_report"},
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}}}`,
	}}}
	ctx := testContext(t)
	var child string
	start := time.Now()
	_, err := e.cl.RunAndWait(ctx, req, func(ev *toolpb.RunResponse) {
		if ev.GetNestedLoopStarted() != nil {
			child = ev.GetScope().GetChildRunId()
		}
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "export_report" {
			go func() { _, _ = e.cl.CancelRun(ctx, "p2", "enough") }()
		}
	})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("the parent ended with %v after %s", err, time.Since(start))
	}
	r, err := e.cl.GetRun(ctx, child)
	if err != nil || r.GetState() != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("child run %s: %v, %v", child, r.GetState(), err)
	}
}

// loop.max_nested_loops bounds the nested loops of one run: past it, a call of an agentic
// tool gets an error result naming the limit.
func TestNestedLoopCountLimit(t *testing.T) {
	script := scripted.Script{Name: "count", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "once", Turn: 1}, Reply: scriptedCall("once", `{}`)},
		{When: scripted.When{HasTool: "once", Turn: 2}, Reply: scriptedCall("once", `{}`)},
		{When: scripted.When{HasTool: "once"}, Reply: scripted.Reply{Text: "{{ result \"once\" }}"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("add", `{"a":1,"b":2}`)},
		{Reply: scripted.Reply{Text: "{{ result \"add\" }}"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Loop.MaxNestedLoops = 1
		c.AgenticTools = map[string]config.AgenticTool{"once": {Description: "Add once.", Tools: []string{"add"}}}
	}})
	e.startWorker("w1", examplegroups.Math())
	var results []string
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"once"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && ev.GetScope() == nil {
			results = append(results, f.GetContent())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"3", "Error: agentic tool 'once' was not run: a run starts at most 1 nested loops (loop.max_nested_loops)"}
	if strings.Join(results, "|") != strings.Join(want, "|") || final.GetText() != want[1] {
		t.Errorf("results %q, final %q", results, final.GetText())
	}
}

// whoGroup is a worker group whose tool answers with the run id and call id it received.
func whoGroup() worker.Group {
	who := tool.MustFunc("whoami", "Say who calls.", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := tool.CallInfoFrom(ctx)
		return "run=" + info.RunID + " call=" + info.CallID, nil
	})
	return worker.Group{Role: "who", Description: "Who calls.", Tools: []tool.Tool{who}}
}

// Regressions from a review of nested loops:
//   - a nested loop's tool calls carry the run's id (a subagent's: its child run's), so
//     idempotency keys differ between runs;
//   - a subagent's record counts what its own nested loops do, and their events name
//     the child run.
func TestNestedCallsCarryTheirRun(t *testing.T) {
	script := scripted.Script{Name: "who", Rules: []scripted.Rule{
		{When: scripted.When{User: `"inner"`, Turn: 1}, Reply: scriptedCall("whoami", `{}`)},
		{When: scripted.When{User: `"inner"`}, Reply: scripted.Reply{Text: `{{ result "whoami" }}`}},
		{When: scripted.When{User: `"sub"`, Turn: 1}, Reply: scriptedCall("whoami", `{}`)},
		{When: scripted.When{User: `"sub"`, Turn: 2}, Reply: scriptedCall("inner", `{"q":"inner"}`)},
		{When: scripted.When{User: `"sub"`}, Reply: scripted.Reply{Text: `{{ result "inner" }}`}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("sub", `{"q":"sub"}`)},
		{Reply: scripted.Reply{Text: `{{ result "sub" }}`}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", whoGroup())
	params := `{"type":"object","properties":{"q":{"type":"string"}}}`
	req := &toolpb.RunRequest{RunId: "who-1", Prompt: "go", Tools: []string{"sub"}, AgenticTools: []*toolpb.AgenticToolSpec{
		{Name: "sub", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"whoami", "inner"}, ParametersJsonSchema: params},
		{Name: "inner", Description: "Inner.", Tools: []string{"whoami"}, ParametersJsonSchema: params},
	}}
	var child string
	var innerScopes []*toolpb.LoopScope
	var whos []string
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if s := ev.GetScope(); s != nil && ev.GetNestedLoopStarted() != nil {
			if s.GetTool() == "sub" {
				child = s.GetChildRunId()
			} else {
				innerScopes = append(innerScopes, s)
			}
		}
		if f := ev.GetToolCallFinished(); f != nil && f.GetTool() == "whoami" {
			whos = append(whos, f.GetContent())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if child == "" || len(whos) != 2 || whos[0] != "run="+child+" call=call_1_0" || whos[1] != "run="+child+" call=call_1_0" {
		t.Errorf("child %q, whoami answers %q: want the child run's id", child, whos)
	}
	if final.GetText() != whos[1] {
		t.Errorf("final %q", final.GetText())
	}
	if len(innerScopes) != 1 || innerScopes[0].GetChildRunId() != child || innerScopes[0].GetDepth() != 2 {
		t.Errorf("inner loop scopes %v", innerScopes)
	}
	r, err := e.cl.GetRun(testContext(t), child)
	if err != nil || r.GetToolCalls() != 3 || len(r.GetLoops()) != 2 {
		t.Errorf("child run: %d tool calls, %d loops, %v; want 3 and 2", r.GetToolCalls(), len(r.GetLoops()), err)
	}
}

// A nested loop that uses up the run's budget fails the run, as a flat loop would.
func TestNestedBudgetFailsTheRun(t *testing.T) {
	script := scripted.Script{Name: "budget", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "calc", Turn: 1}, Reply: scriptedCall("calc", `{}`)},
		{When: scripted.When{HasTool: "calc"}, Reply: scripted.Reply{Text: "outer: {{ result \"calc\" }}"}},
		{Reply: scriptedCall("add", `{"a":1,"b":2}`)},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Math())
	req := &toolpb.RunRequest{RunId: "b1", Prompt: "go", Tools: []string{"calc"}, Limits: &toolpb.RunLimits{MaxActions: 3},
		AgenticTools: []*toolpb.AgenticToolSpec{{Name: "calc", Description: "Add.", Tools: []string{"add"}}}}
	_, err := e.cl.RunAndWait(testContext(t), req, nil)
	if err == nil || !strings.Contains(err.Error(), "run budget exceeded") {
		t.Fatalf("run: %v, want the budget error", err)
	}
	r, err := e.cl.GetRun(testContext(t), "b1")
	if err != nil || r.GetState() != toolpb.RunState_RUN_STATE_FAILED {
		t.Errorf("run state %v, %v", r.GetState(), err)
	}
}

// Request specs are checked whether the run offers them or not; one may not reuse the
// name of a config agentic tool, nor of a tool the mesh serves; an agent run directly
// reports the faults of its spec by the spec's fields.
func TestAgenticNamesAndUnofferedSpecs(t *testing.T) {
	e := newEnv(t, envOptions{configure: func(c *config.Config) {
		c.AgenticTools = map[string]config.AgenticTool{"cfg": {Description: "C.", Tools: []string{"add"}}}
	}})
	e.startWorker("w1", examplegroups.Math())
	for _, tc := range []struct {
		req   *toolpb.RunRequest
		field string
	}{
		{&toolpb.RunRequest{Prompt: "go", AgenticTools: []*toolpb.AgenticToolSpec{{Name: "x", Description: "X.", Kind: toolpb.AgenticKind_AGENTIC_KIND_STATE_MACHINE, Tools: []string{"x"}}}},
			"agentic_tools[0].state_machine.initial_state"},
		{&toolpb.RunRequest{Prompt: "go", AgenticTools: []*toolpb.AgenticToolSpec{{Name: "x", Description: "X.", Tools: []string{"nope"}}}}, "agentic_tools[0].tools[0]"},
		{&toolpb.RunRequest{Prompt: "go", Tools: []string{"cfg"}, AgenticTools: []*toolpb.AgenticToolSpec{{Name: "cfg", Description: "X.", Tools: []string{"add"}}}}, "agentic_tools[0].name"},
		{&toolpb.RunRequest{Prompt: "go", Tools: []string{"add"}, AgenticTools: []*toolpb.AgenticToolSpec{{Name: "add", Description: "X.", Tools: []string{"multiply"}}}}, "tools[0]"},
		{&toolpb.RunRequest{Prompt: "go", Agent: "ag", AgenticTools: []*toolpb.AgenticToolSpec{{Name: "ag", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add", "nope"}}}}, "agentic_tools[0].tools[1]"},
	} {
		_, err := e.cl.RunAndWait(testContext(t), tc.req, nil)
		st, _ := status.FromError(errors.Unwrap(err))
		if st == nil {
			st, _ = status.FromError(err)
		}
		if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field+":") {
			t.Errorf("%v: %v, want INVALID_ARGUMENT naming %s", tc.req.GetAgenticTools(), err, tc.field)
		}
	}
}

// What a nested loop's tool calls do to the run's process (a blackboard entry, a
// progress report) arrives tagged with the nested loop's scope.
func TestNestedProcessEventsCarryTheirScope(t *testing.T) {
	script := scripted.Script{Name: "scoped", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "helper", Turn: 1}, Reply: scriptedCall("helper", `{}`)},
		{When: scripted.When{HasTool: "helper"}, Reply: scripted.Reply{Text: "done"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("bind_customer", `{"id":1}`)},
		{When: scripted.When{Turn: 2}, Reply: scriptedCall("progress", `{"status":"half way"}`)},
		{Reply: scripted.Reply{Text: "ok"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.CRMGroup())
	req := &toolpb.RunRequest{Prompt: "go", Tools: []string{"helper"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "helper", Description: "Help.", Tools: []string{"bind_customer", "progress"},
	}}}
	var board, progress *toolpb.RunResponse
	if _, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if ev.GetBlackboardChanged() != nil {
			board = ev
		}
		if ev.GetProgress() != nil {
			progress = ev
		}
	}); err != nil {
		t.Fatal(err)
	}
	for name, ev := range map[string]*toolpb.RunResponse{"blackboard_changed": board, "progress": progress} {
		if ev == nil || ev.GetScope().GetTool() != "helper" || ev.GetScope().GetDepth() != 1 {
			t.Errorf("%s: %v, want the helper's scope", name, ev)
		}
	}
}

// A subagent inherits the parent's verbosity: with stream_text, its loop's text streams
// too, tagged with its child run; and its calls count against the parent's action
// budget.
func TestSubagentInheritsVerbosityAndBudget(t *testing.T) {
	script := scripted.Script{Name: "verbose", Rules: []scripted.Rule{
		{When: scripted.When{User: `"child"`, Turn: 1}, Reply: scriptedCall("add", `{"a":1,"b":2}`)},
		{When: scripted.When{User: `"child"`, Turn: 2}, Reply: scriptedCall("add", `{"a":3,"b":4}`)},
		{When: scripted.When{User: `"child"`}, Reply: scripted.Reply{Text: "child says hello"}},
		{When: scripted.When{Turn: 1}, Reply: scriptedCall("helper", `{"task":"child"}`)},
		{Reply: scripted.Reply{Text: `{{ result "helper" }}`}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Math())
	spec := &toolpb.AgenticToolSpec{Name: "helper", Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, Tools: []string{"add"},
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}}}`}
	var streamed strings.Builder
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"helper"}, StreamText: true,
		AgenticTools: []*toolpb.AgenticToolSpec{spec}}, func(ev *toolpb.RunResponse) {
		if d := ev.GetTextDelta(); d != nil && ev.GetScope().GetChildRunId() != "" {
			streamed.WriteString(d.GetText())
		}
	})
	if err != nil || final.GetText() != "child says hello" {
		t.Fatalf("%v, %v", final, err)
	}
	if streamed.String() != "child says hello" {
		t.Errorf("the child's streamed text %q", streamed.String())
	}
	// With 2 actions: the parent's call of helper and the child's first add; the child's
	// second add would be a third.
	_, err = e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", Tools: []string{"helper"}, Limits: &toolpb.RunLimits{MaxActions: 2},
		AgenticTools: []*toolpb.AgenticToolSpec{spec}}, nil)
	if err == nil || !strings.Contains(err.Error(), "action budget of 2") {
		t.Errorf("a child over the parent's budget: %v", err)
	}
}

// A system prompt template renders the nested loop's system prompt for each call: over
// the tool's arguments, the run's context (without its secrets and credentials) and the
// newest object of a type on the run's blackboard, extending the kind's default.
func TestAgenticSystemPromptTemplate(t *testing.T) {
	script := scripted.Script{Name: "template", Rules: []scripted.Rule{
		{When: scripted.When{HasTool: "brief", Turn: 1}, Reply: scriptedCall("bind_customer", `{"id":2}`)},
		{When: scripted.When{HasTool: "brief", Turn: 2}, Reply: scriptedCall("brief", `{"topic":"renewal"}`)},
		{When: scripted.When{HasTool: "brief"}, Reply: scripted.Reply{Text: `{{ result "brief" }}`}},
		{Reply: scripted.Reply{Text: "briefed"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) { c.Context.Secrets = []string{"ssn"} }})
	e.startWorker("w1", examplegroups.CRMGroup())
	tmpl := `Brief {{.Context.user}} on {{.Input.topic}} for {{(last "Customer").name}} of {{(last "Customer").city}}; context:` +
		`{{range $k, $v := .Context}} {{$k}}={{$v}}{{end}}` + "\n{{.Default}}"
	req := &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"crm"}, Tools: []string{"brief"},
		Context: map[string]string{"user": "ada", "ssn": "123-45-6789", "authorization": "Bearer s3cr3t"},
		AgenticTools: []*toolpb.AgenticToolSpec{{
			Name: "brief", Description: "Brief on a customer.", Tools: []string{"customer_summary"}, SystemPromptTemplate: tmpl,
			ParametersJsonSchema: `{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]}`,
		}}}
	final, err := e.cl.RunAndWait(testContext(t), req, nil)
	if err != nil || final.GetText() != "briefed" {
		t.Fatalf("%v, %v", final, err)
	}
	var nested []string
	for _, r := range e.model.Requests() {
		if !slices.ContainsFunc(r.Tools, func(s llm.ToolSpec) bool { return s.Name == "brief" }) {
			nested = append(nested, r.System)
		}
	}
	want := "Brief ada on renewal for Grace Hopper of New York; context: user=ada\n" + agentic.DefaultSystemPrompt("Brief on a customer.")
	if len(nested) == 0 || nested[0] != want {
		t.Errorf("the nested loop's system prompts %q, want first %q", nested, want)
	}
}

// An agent run directly renders its template once, as the run starts, over the run's
// prompt and context; a template that fails refuses the run, naming the agent.
func TestRunAnAgentWithATemplate(t *testing.T) {
	script := scripted.Script{Name: "direct", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "4"}}}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.AgenticTools = map[string]config.AgenticTool{
			"adder":  {Kind: "agent", Description: "Adds.", Tools: []string{"add"}, SystemPromptTemplate: "For {{.Context.user}}: {{.Input}}. {{.Default}}"},
			"broken": {Kind: "agent", Description: "Breaks.", Tools: []string{"add"}, SystemPromptTemplate: "For {{.Context.nobody}}."},
		}
	}})
	e.startWorker("w1", examplegroups.Math())
	ctx := testContext(t)
	final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "2+2", Agent: "adder", SystemPrompt: "Be brief.", Context: map[string]string{"user": "ada"}}, nil)
	if err != nil || final.GetText() != "4" {
		t.Fatalf("%v, %v", final, err)
	}
	reqs := e.model.Requests()
	if want := "For ada: 2+2. " + agentic.DefaultSystemPrompt("Adds.") + "\n\nBe brief."; len(reqs) != 1 || reqs[0].System != want {
		t.Errorf("system prompt %q, want %q", reqs[0].System, want)
	}
	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "2+2", Agent: "broken"}, nil)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != codes.InvalidArgument || ce.Field != "agent" || !strings.Contains(err.Error(), `map has no entry for key "nobody"`) {
		t.Errorf("a template that fails: %v", err)
	}
}

// checkAgentListing: ListRuns filtered by agent lists the agent's run (with its agent)
// and a filter naming another agent does not; GetRun reports the agent.
func checkAgentListing(t *testing.T, e *env, runID string) {
	t.Helper()
	for agent, listed := range map[string]bool{"adder": true, "nobody": false} {
		resp, err := e.orch.ListRuns(testContext(t), &toolpb.ListRunsRequest{Agent: agent})
		found := slices.ContainsFunc(resp.GetRuns(), func(r *toolpb.RunSummary) bool { return r.GetRunId() == runID && r.GetAgent() == "adder" })
		if err != nil || found != listed {
			t.Errorf("ListRuns agent=%s: %v, %v; want run %s listed %v", agent, resp.GetRuns(), err, runID, listed)
		}
	}
	if got, err := e.orch.GetRun(testContext(t), &toolpb.GetRunRequest{RunId: runID}); err != nil || got.GetAgent() != "adder" {
		t.Errorf("GetRun: agent %q, %v", got.GetAgent(), err)
	}
}
