package agentic

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A facade bound to a state unfolds into children available in the same states only;
// the facade's transition moved the machine on, so its child is refused afterwards.
func TestStateMachineFacade(t *testing.T) {
	cat := &catalog{}
	cat.add("add", tool.Text("3"))
	cat.add("done", tool.Text("finished"))
	cat.tools["box"] = tool.Of("box", "A box.", []tool.Tool{cat.tools["add"]})
	n := newNester(t,
		turn(1, call("box")),
		turn(2, call("add")),
		turn(3, call("done")),
		scripted.Rule{Reply: scripted.Reply{Text: "{{ latest \"add\" }}"}},
	)
	at := compileOne(t, cat, Spec{Name: "m", Description: "M.", Kind: KindStateMachine, Initial: "A", States: []State{
		{Name: "A", Tools: []StateTool{{Tool: "box", TransitionsTo: "B"}}},
		{Name: "B", Tools: []StateTool{{Tool: "done"}}},
	}})
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "This tool is not available in the current state (B). It is only available in state: A" {
		t.Errorf("add after the box moved the machine: %q", res.Content)
	}
	if strings.Contains(cat.called(), "add") {
		t.Errorf("calls %s", cat.called())
	}
}

// A locked facade does not unfold while locked; once unlocked it unfolds and its
// children count as having run for other locks.
func TestPlaybookFacade(t *testing.T) {
	cat := &catalog{}
	cat.add("add", tool.Text("3"))
	cat.add("key", tool.Text("unlocked"))
	cat.add("final", tool.Text("final ran"))
	cat.tools["box"] = tool.Of("box", "A box.", []tool.Tool{cat.tools["add"]})
	n := newNester(t,
		turn(1, call("box")),
		turn(2, call("add")),
		turn(3, call("key")),
		turn(4, call("box")),
		turn(5, call("add")),
		turn(6, call("final")),
		scripted.Rule{Reply: scripted.Reply{Text: "{{ results }}"}},
	)
	at := compileOne(t, cat, Spec{Name: "p", Description: "P.", Kind: KindPlaybook, Tools: []string{"key"},
		Locks: []Lock{{Tool: "box", AfterAll: []string{"key"}}, {Tool: "final", AfterAll: []string{"add"}}}})
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "final ran" || cat.called() != "key,add,final" {
		t.Errorf("result %q, calls %s", res.Content, cat.called())
	}
	reqs := n.prov.Requests()
	for _, s := range reqs[1].Tools {
		if s.Name == "add" {
			t.Error("the locked box unfolded")
		}
	}
}
