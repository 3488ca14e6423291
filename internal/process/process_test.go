package process_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A spawned child starts with the parent's blackboard and a goal of its own; Adopt puts on the parent what
// the child added after it, all or nothing.
func TestSpawnAndAdopt(t *testing.T) {
	parent := process.New("p", process.Limits{}, process.Bounds{MaxEntries: 3, MaxBytes: 1 << 20}, nil)
	e := func(v int) tool.Entry { x, _ := tool.NewEntry("N", v); return x }
	if err := parent.Add(process.Origin{}, "", e(1)); err != nil {
		t.Fatal(err)
	}
	child := parent.Spawn("c", "helper", nil)
	if st := child.Snapshot(); len(st.Blackboard.Entries) != 1 || st.ParentID != "p" || st.Goal != "helper" {
		t.Fatalf("child %+v", st)
	}
	_ = child.Add(process.Origin{}, "two", e(2))
	if err := parent.Adopt(child, 1, process.Origin{Tool: "sub"}); err != nil {
		t.Fatal(err)
	}
	if st := parent.Snapshot(); len(st.Blackboard.Entries) != 2 || st.Blackboard.NameOf(1)[0] != "two" {
		t.Fatalf("parent %+v", st.Blackboard)
	}
	big := parent.Spawn("c2", "helper", nil)
	_ = big.Add(process.Origin{}, "", e(3))
	_ = parent.Add(process.Origin{}, "", e(4)) // the parent fills up meanwhile
	if err := parent.Adopt(big, 2, process.Origin{}); err == nil {
		t.Error("Adopt past the bounds succeeded")
	}
	if err := parent.Adopt(child, 1, process.Origin{}); err == nil {
		t.Error("Adopt past the bounds succeeded")
	}
	if n := len(parent.Snapshot().Blackboard.Entries); n != 3 {
		t.Errorf("parent has %d entries after refused adoptions, want 3", n)
	}
}

// A run's goal is set once it is known; the process tools read it.
func TestSetGoal(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	if g := p.Snapshot().Goal; g != "" {
		t.Fatalf("a new process has the goal %q", g)
	}
	p.SetGoal("find the customer")
	if g := p.Snapshot().Goal; g != "find the customer" {
		t.Errorf("goal %q", g)
	}
}
