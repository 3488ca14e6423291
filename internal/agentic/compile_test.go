package agentic

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Bad specs are refused naming the field.
func TestCompileRefuses(t *testing.T) {
	cat := &catalog{groups: map[string][]tool.Tool{}}
	cat.add("a", tool.Text("a"))
	cat.add("b", tool.Text("b"))
	cat.groups["g"] = []tool.Tool{cat.tools["a"]}
	sm := func(mod func(*Spec)) Spec {
		s := Spec{Name: "m", Description: "M.", Kind: KindStateMachine, Initial: "S1", States: []State{
			{Name: "S1", Tools: []StateTool{{Tool: "a", TransitionsTo: "S2"}}},
			{Name: "S2", Tools: []StateTool{{Tool: "b"}}},
		}}
		mod(&s)
		return s
	}
	for _, tc := range []struct {
		name  string
		specs []Spec
		field string
		text  string
	}{
		{"unknown sub-tool", []Spec{{Name: "x", Description: "X.", Tools: []string{"a", "nope"}}}, "agentic_tools[0].tools[1]", `unknown tool "nope"`},
		{"unknown group", []Spec{{Name: "x", Description: "X.", Groups: []string{"ghost"}}}, "agentic_tools[0].tool_groups[0]", `no tools in group "ghost"`},
		{"contains itself", []Spec{{Name: "x", Description: "X.", Tools: []string{"a", "x"}}}, "agentic_tools[0].tools[1]", `agentic tool "x" contains itself (x → x)`},
		{"a cycle", []Spec{{Name: "x", Description: "X.", Tools: []string{"y"}}, {Name: "y", Description: "Y.", Tools: []string{"x"}}}, "agentic_tools[1].tools[0]", `contains itself (x → y → x)`},
		{"no sub-tools", []Spec{{Name: "x", Description: "X."}}, "agentic_tools[0].tools", "needs sub-tools"},
		{"no description", []Spec{{Name: "x", Tools: []string{"a"}}}, "agentic_tools[0].description", "needs a description"},
		{"bad name", []Spec{{Name: "a b", Description: "X.", Tools: []string{"a"}}}, "agentic_tools[0].name", "not a tool name"},
		{"twice", []Spec{{Name: "x", Description: "X.", Tools: []string{"a"}}, {Name: "x", Description: "X.", Tools: []string{"a"}}}, "agentic_tools[1].name", `also the name of agentic_tools[0]`},
		{"a sub-tool twice", []Spec{{Name: "x", Description: "X.", Tools: []string{"a", "a"}}}, "agentic_tools[0].tools", `two sub-tools are named "a"`},
		{"unknown kind", []Spec{{Name: "x", Description: "X.", Kind: "swarm", Tools: []string{"a"}}}, "agentic_tools[0].kind", `unknown kind "swarm"`},
		{"locks on a simple tool", []Spec{{Name: "x", Description: "X.", Tools: []string{"a"}, Locks: []Lock{{Tool: "b", AfterAll: []string{"a"}}}}}, "agentic_tools[0].locked_tools", "only a playbook"},
		{"a lock without condition", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Tools: []string{"a"}, Locks: []Lock{{Tool: "b"}}}}, "agentic_tools[0].locked_tools[0]", "needs a condition"},
		{"CEL that does not compile", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Tools: []string{"a"}, Locks: []Lock{{Tool: "b", When: "called.exists("}}}}, "agentic_tools[0].locked_tools[0].when", "invalid CEL expression"},
		{"CEL of the wrong type", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Tools: []string{"a"}, Locks: []Lock{{Tool: "b", When: "iteration + 1"}}}}, "agentic_tools[0].locked_tools[0].when", "yields int, not bool"},
		{"CEL naming an unknown variable", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Tools: []string{"a"}, Locks: []Lock{{Tool: "b", When: "customer.vip"}}}}, "agentic_tools[0].locked_tools[0].when", "undeclared reference"},
		{"a locked tool unlocking itself", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Locks: []Lock{{Tool: "b", AfterAll: []string{"b"}}}}}, "agentic_tools[0].locked_tools[0].after_all[0]", "cannot unlock itself"},
		{"no initial state", []Spec{sm(func(s *Spec) { s.Initial = "" })}, "agentic_tools[0].state_machine.initial_state", "needs an initial state"},
		{"an undeclared initial state", []Spec{sm(func(s *Spec) { s.Initial = "S9" })}, "agentic_tools[0].state_machine.initial_state", `"S9" is not one of the states (S1, S2)`},
		{"a transition to nowhere", []Spec{sm(func(s *Spec) { s.States[1].Tools[0].TransitionsTo = "S3" })}, "agentic_tools[0].state_machine.states[1].tools[0].transitions_to", `"S3" is not one of the states`},
		{"a state no tool uses", []Spec{sm(func(s *Spec) { s.States = append(s.States, State{Name: "S3"}) })}, "agentic_tools[0].state_machine.states[2].name", `state "S3" has no tools`},
		{"a state twice", []Spec{sm(func(s *Spec) { s.States = append(s.States, State{Name: "S1", Tools: []StateTool{{Tool: "b"}}}) })}, "agentic_tools[0].state_machine.states[2].name", "declared twice"},
		{"states on a playbook", []Spec{{Name: "x", Description: "X.", Kind: KindPlaybook, Tools: []string{"a"}, Initial: "S"}}, "agentic_tools[0].state_machine", "only a state machine"},
		{"a global tool bound to a state", []Spec{sm(func(s *Spec) { s.Tools = []string{"a"} })}, "agentic_tools[0].state_machine.states[0].tools[0].tool", "either global or bound"},
		{"a group's tool bound to a state", []Spec{sm(func(s *Spec) { s.Groups = []string{"g"} })}, "agentic_tools[0].state_machine", `"a" is bound to states and is also a global tool`},
		{"a missing state machine tool", []Spec{sm(func(s *Spec) { s.States[0].Tools[0].Tool = "zz" })}, "agentic_tools[0].state_machine.states[0].tools[0].tool", `unknown tool "zz"`},
		{"@ on a simple tool", []Spec{{Name: "x", Description: "X.", Tools: []string{"y@S"}}, {Name: "y", Description: "Y.", Tools: []string{"a"}}}, "agentic_tools[0].tools[0]", "not a state machine"},
		{"@ an unknown state", []Spec{{Name: "x", Description: "X.", Tools: []string{"m@S7"}}, sm(func(*Spec) {})}, "agentic_tools[0].tools[0]", `state machine "m" has no state "S7" (S1, S2)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.specs {
				tc.specs[i].Key = "agentic_tools[" + string(rune('0'+i)) + "]"
			}
			_, err := Compile(tc.specs, []string{tc.specs[0].Name}, cat)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Problem, tc.text) {
				t.Errorf("err %v, want %s: …%s…", err, tc.field, tc.text)
			}
		})
	}
}
