package server

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
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
	e.startWorker("w1", builtin.Math())
	req := &toolpb.RunRequest{RunId: "pb", Prompt: "go", Tools: []string{"calc"}, AgenticTools: []*toolpb.AgenticToolSpec{{
		Name: "calc", Description: "Calculate.", Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK,
		ParametersJsonSchema: `{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}`,
		Tools:                []string{"add"},
		LockedTools:          []*toolpb.LockedTool{{Tool: "multiply", AfterAll: []string{"add"}}},
	}}}
	var locked string
	var scopes []string
	var finished *toolpb.NestedLoopFinished
	final, err := e.cl.RunAndWait(testContext(t), req, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil && ev.GetScope() != nil && f.GetTool() == "multiply" && locked == "" {
			locked = f.GetContent()
		}
		if s := ev.GetScope(); s != nil {
			scopes = append(scopes, s.GetTool()+"/"+s.GetKind().String())
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
	e.startWorker("w1", builtin.Math())
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
	e.startWorker("w1", builtin.Math())
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
	e.startWorker("w1", builtin.Users())
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
