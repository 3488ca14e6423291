package agentic

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func checkoutSpec() Spec {
	return Spec{Name: "checkout", Description: "Check out.", Kind: KindStateMachine, Tools: []string{"help"}, Initial: "CART",
		States: []State{
			{Name: "CART", Tools: []StateTool{{Tool: "add_item"}, {Tool: "confirm", TransitionsTo: "PAYMENT"}}},
			{Name: "PAYMENT", Tools: []StateTool{{Tool: "pay", TransitionsTo: "DONE"}}},
			{Name: "DONE", Tools: []StateTool{{Tool: "receipt"}}},
		}}
}

func checkoutCatalog() *catalog {
	cat := &catalog{}
	for _, n := range []string{"help", "add_item", "confirm", "pay", "receipt"} {
		cat.add(n, tool.Text(n+" ok"))
	}
	cat.add("art", tool.ArtifactResult("art", tool.Artifact{TypeName: "A", JSON: []byte(`{}`)}))
	return cat
}

// A state machine moves CART → PAYMENT → DONE on successful calls, refuses a tool of
// another state without running it, offers its global tool in every state, describes
// each tool's states, and returns text only.
func TestStateMachine(t *testing.T) {
	cat := checkoutCatalog()
	n := newNester(t,
		turn(1, call("pay")),
		turn(2, call("add_item")),
		turn(3, call("confirm")),
		turn(4, call("help")),
		turn(5, call("pay")),
		turn(6, call("receipt")),
		scripted.Rule{Reply: scripted.Reply{Text: "checked out"}},
	)
	at := compileOne(t, cat, checkoutSpec())
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil || res.Kind != tool.KindText || res.Content != "checked out" {
		t.Fatalf("%+v, %v", res, err)
	}
	if cat.called() != "add_item,confirm,help,pay,receipt" {
		t.Errorf("calls %s", cat.called())
	}
	reqs := n.prov.Requests()
	if reqs[0].System != StateMachineSystemPrompt("Check out.", "CART") {
		t.Errorf("system %q", reqs[0].System)
	}
	if got := reqs[1].Messages[len(reqs[1].Messages)-1].Text; got != "This tool is not available in the current state (CART). It is only available in state: PAYMENT" {
		t.Errorf("wrong state: %q", got)
	}
	want := map[string]string{
		"help":     "Tool help.\n\n[Available in all states]",
		"add_item": "Tool add_item.\n\n[Available in state: CART]",
		"confirm":  "Tool confirm.\n\n[Available in state: CART] [Transitions to: PAYMENT]",
		"pay":      "Tool pay.\n\n[Available in state: PAYMENT] [Transitions to: DONE]",
		"receipt":  "Tool receipt.\n\n[Available in state: DONE]",
	}
	for _, s := range reqs[0].Tools {
		if want[s.Name] != s.Description {
			t.Errorf("%s: %q, want %q", s.Name, s.Description, want[s.Name])
		}
	}
}

// One wrapper per tool name over the states it is in; name@STATE starts elsewhere; a
// failed call does not move the machine.
func TestStateMachineSetsOfStatesAndStartingIn(t *testing.T) {
	cat := checkoutCatalog()
	cat.tools["pay"] = tool.New("pay", "Tool pay.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Error("card declined"), nil
	})
	spec := checkoutSpec()
	spec.States[1].Tools = append(spec.States[1].Tools, StateTool{Tool: "add_item"})
	n := newNester(t,
		scripted.Rule{When: scripted.When{HasTool: "checkout", Turn: 1}, Reply: call("checkout")},
		scripted.Rule{When: scripted.When{HasTool: "pay", Turn: 1}, Reply: call("add_item")},
		scripted.Rule{When: scripted.When{HasTool: "pay", Turn: 2}, Reply: call("pay")},
		scripted.Rule{When: scripted.When{HasTool: "pay", Turn: 3}, Reply: call("receipt")},
		scripted.Rule{Reply: scripted.Reply{Text: "{{ results }}"}},
	)
	outer := compileOne(t, cat, Spec{Name: "outer", Description: "Outer.", Tools: []string{"checkout@PAYMENT"}}, spec)
	res, err := outer.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.runs) != 2 || n.runs[1].System != StateMachineSystemPrompt("Check out.", "PAYMENT") {
		t.Fatalf("loops %+v", n.runs)
	}
	// add_item runs in PAYMENT too; pay fails, so receipt is still refused.
	if cat.called() != "add_item" {
		t.Errorf("calls %s", cat.called())
	}
	if res.Content != "This tool is not available in the current state (PAYMENT). It is only available in state: DONE" {
		t.Errorf("result %q", res.Content)
	}
	var names []string
	for _, tl := range n.runs[1].Tools {
		names = append(names, tl.Definition().Name)
		if tl.Definition().Name == "add_item" && tl.Definition().Description != "Tool add_item.\n\n[Available in states: CART, PAYMENT]" {
			t.Errorf("add_item: %q", tl.Definition().Description)
		}
	}
	if strings.Join(names, ",") != "help,add_item,confirm,pay,receipt" {
		t.Errorf("tools %v: one per name", names)
	}
}

func TestStateNotes(t *testing.T) {
	for _, tc := range []struct {
		states  []string
		targets map[string]string
		want    string
	}{
		{[]string{"A"}, map[string]string{}, "[Available in state: A]"},
		{[]string{"A", "B"}, map[string]string{"A": "C", "B": "C"}, "[Available in states: A, B] [Transitions to: C]"},
		{[]string{"A", "B"}, map[string]string{"A": "C"}, "[Available in states: A, B] [Transitions to: C from A]"},
		{[]string{"A", "B"}, map[string]string{"A": "C", "B": "D"}, "[Available in states: A, B] [Transitions to: C from A, D from B]"},
	} {
		if got := stateNote(tc.states, tc.targets); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
	if got := wrongState("A", []string{"B", "C"}); got != "This tool is not available in the current state (A). It is only available in states: B, C" {
		t.Errorf("%q", got)
	}
}
