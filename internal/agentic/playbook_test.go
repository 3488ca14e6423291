package agentic

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// The hints of locked tools, by condition, as the model reads them in a call's answer
// and in the tool's description.
func TestLockedTexts(t *testing.T) {
	none := view{}
	for _, tc := range []struct {
		lock Lock
		want string
	}{
		{Lock{AfterAll: []string{"a", "b"}}, "This tool is not yet available. You must first use: a, b"},
		{Lock{AfterAny: []string{"a"}}, "This tool is not yet available. At least one prerequisite condition must be met."},
		{Lock{AfterAny: []string{"a", "b"}}, "This tool is not yet available. At least one prerequisite condition must be met."},
		{Lock{ArtifactType: "crm.Customer"}, "This tool is not yet available. You must first produce an artifact of type: Customer"},
		{Lock{BlackboardType: "Customer"}, "This tool is not yet available. Prerequisites have not been met yet."},
		{Lock{When: "iteration > 2"}, "This tool is not yet available. Prerequisites have not been met yet."},
		{Lock{AfterAll: []string{"a"}, ArtifactType: "X"}, "This tool is not yet available. Multiple conditions must be met before this tool is available."},
	} {
		c, err := lockCondition(tc.lock)
		if err != nil {
			t.Fatal(err)
		}
		if c.holds(none) {
			t.Errorf("%+v holds before anything ran", tc.lock)
		}
		if got := lockedPrefix + c.hint(none); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.lock, got, tc.want)
		}
	}
	// Only the prerequisites not yet called are named.
	c, _ := lockCondition(Lock{AfterAll: []string{"a", "b", "c"}})
	if got := c.hint(view{called: []string{"b"}}); got != "You must first use: a, c" {
		t.Errorf("hint %q", got)
	}
}

func TestConditions(t *testing.T) {
	v := view{
		called:    []string{"search", "fetch"},
		artifacts: []tool.Entry{{TypeName: "shop.Order", JSON: []byte(`{"total":120}`)}},
		board:     []tool.Entry{{TypeName: "Customer", JSON: []byte(`{"vip":true}`)}},
		iteration: 3,
	}
	for _, tc := range []struct {
		lock Lock
		want bool
	}{
		{Lock{AfterAll: []string{"search", "fetch"}}, true},
		{Lock{AfterAll: []string{"search", "pay"}}, false},
		{Lock{AfterAny: []string{"pay", "fetch"}}, true},
		{Lock{AfterAny: []string{"pay", "ship"}}, false},
		{Lock{ArtifactType: "Order"}, true},
		{Lock{ArtifactType: "shop.Order"}, true},
		{Lock{ArtifactType: "Invoice"}, false},
		{Lock{BlackboardType: "Customer"}, true},
		{Lock{BlackboardType: "Order"}, false},
		{Lock{When: `artifacts.exists(a, a.type == "shop.Order" && a.value.total > 100)`}, true},
		{Lock{When: `blackboard.exists(b, b.value.vip)`}, true},
		{Lock{When: `"pay" in called`}, false},
		{Lock{When: `iteration >= 3`}, true},
		{Lock{When: `artifacts[5].value.x == 1`}, false}, // fails at evaluation: false
		{Lock{AfterAll: []string{"search"}, ArtifactType: "Order"}, true},
		{Lock{AfterAll: []string{"search"}, ArtifactType: "Invoice"}, false},
	} {
		c, err := lockCondition(tc.lock)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.holds(v); got != tc.want {
			t.Errorf("%+v holds %v, want %v", tc.lock, got, tc.want)
		}
	}
}

// A playbook: the model calls a locked tool first and reads what unlocks it, the
// description says it is locked; after the prerequisite ran, the tool runs and its
// description is the original again. A locked call is not recorded.
func TestPlaybook(t *testing.T) {
	cat := &catalog{}
	cat.add("search", tool.Text("found"))
	cat.add("buy", tool.ArtifactResult("bought", tool.Artifact{TypeName: "Order", JSON: []byte(`{"id":1}`)}))
	cat.add("ship", tool.Text("shipped"))
	n := newNester(t,
		turn(1, call("buy")),
		turn(2, call("search")),
		turn(3, call("buy")),
		turn(4, call("ship")),
		scripted.Rule{Reply: scripted.Reply{Text: "all done"}},
	)
	at := compileOne(t, cat, Spec{Name: "shop", Description: "Shop.", Kind: KindPlaybook, Tools: []string{"search"},
		Locks: []Lock{{Tool: "buy", AfterAll: []string{"search"}}, {Tool: "ship", ArtifactType: "Order"}}})
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil || res.Content != "all done" || res.Artifact == nil || string(res.Artifact.JSON) != `{"id":1}` {
		t.Fatalf("%+v, %v", res, err)
	}
	if cat.called() != "search,buy,ship" {
		t.Errorf("calls %s: a locked tool ran", cat.called())
	}
	reqs := n.prov.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d model calls", len(reqs))
	}
	if reqs[0].System != PlaybookSystemPrompt("Shop.") {
		t.Errorf("system %q", reqs[0].System)
	}
	desc := func(i int, name string) string {
		for _, s := range reqs[i].Tools {
			if s.Name == name {
				return s.Description
			}
		}
		return "<absent>"
	}
	if got := desc(0, "buy"); got != "Tool buy.\n\nThis tool is not yet available. You must first use: search" {
		t.Errorf("locked description %q", got)
	}
	if got := desc(2, "buy"); got != "Tool buy." {
		t.Errorf("unlocked description %q", got)
	}
	if got := desc(2, "ship"); got != "Tool ship.\n\nThis tool is not yet available. You must first produce an artifact of type: Order" {
		t.Errorf("ship description %q", got)
	}
	if got := reqs[1].Messages[len(reqs[1].Messages)-1]; got.Text != "This tool is not yet available. You must first use: search" || got.IsError {
		t.Errorf("locked answer %+v", got)
	}
}

// A predicate over the run's blackboard unlocks a tool once the board holds the object.
func TestPlaybookBlackboard(t *testing.T) {
	cat := &catalog{}
	cat.add("a", tool.Text("a"))
	board := toolcall.NewCallBoard(nil, 10)
	at := compileOne(t, cat, Spec{Name: "p", Description: "P.", Kind: KindPlaybook, Locks: []Lock{{Tool: "a", BlackboardType: "Ticket"}}})
	n := newNester(t, turn(1, call("a")), scripted.Rule{Reply: scripted.Reply{Text: "{{ result \"a\" }}"}})
	ctx := toolcall.WithBlackboard(WithNester(ctxT(t), n), board)
	if res, _ := at.Call(ctx, `{}`); res.Content != "This tool is not yet available. Prerequisites have not been met yet." {
		t.Errorf("before: %q", res.Content)
	}
	e, _ := tool.NewEntry("Ticket", map[string]int{"id": 1})
	_ = board.Add(e)
	if res, _ := at.Call(ctx, `{}`); res.Content != "a" {
		t.Errorf("after: %q", res.Content)
	}
	if strings.Count(cat.called(), "a") != 1 {
		t.Errorf("calls %q", cat.called())
	}
}

// A CEL condition over a tracker sees what was recorded, decoded once, as it grows.
func TestWhenOverATracker(t *testing.T) {
	board := toolcall.NewCallBoard(nil, 1<<10)
	st := &tracker{board: board}
	c, err := lockCondition(Lock{When: `artifacts.size() == 2 && blackboard.exists(b, b.value.vip)`})
	if err != nil {
		t.Fatal(err)
	}
	st.record("a", tool.ArtifactResult("", tool.Artifact{TypeName: "X", JSON: []byte(`{"n":1}`)}))
	if c.holds(st.view()) {
		t.Fatal("holds with one artifact")
	}
	st.record("b", tool.ArtifactResult("", tool.Artifact{TypeName: "X", JSON: []byte(`{"n":2}`)}))
	if c.holds(st.view()) {
		t.Fatal("holds without the blackboard object")
	}
	e, _ := tool.NewEntry("Customer", map[string]bool{"vip": true})
	_ = board.Add(e)
	if !c.holds(st.view()) {
		t.Error("does not hold once both are there")
	}
	if a, b := st.view().celInputs(); len(a) != 2 || len(b) != 1 {
		t.Errorf("decoded %d artifacts and %d blackboard entries", len(a), len(b))
	}
}
