package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestRunNamingThroughWorkers: through the real orchestrator and toolworker, the config
// re-describes a worker's tool (tools.<name>.note) and a run renames and leaves out tools
// (tool_names, exclude_tools), for the tools a worker's facade opens too: the model reads
// the new names and texts, and a call of a new name reaches the worker.
func TestRunNamingThroughWorkers(t *testing.T) {
	const prompt = "Add two and three."
	model := &promptModel{scripts: map[string]*turnModel{
		prompt: {turns: []modelTurn{
			{calls: [][2]string{{"math", `{}`}}},
			{calls: [][2]string{{"plus", `{"a":2,"b":3}`}}},
			{text: "5"},
		}},
	}}
	useModel(t, model)
	m := startMesh(t, "", "provider: {name: openai}\ntools: {add: {note: \"Use it for sums\"}}\n")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: prompt, ToolGroups: []string{"math"},
		ToolNames: map[string]string{"add": "plus"}, ExcludeTools: []string{"divide", "mean"}}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	var plus *toolpb.ToolCallFinished
	for _, f := range finished(evs, 0) {
		if f.GetTool() == "plus" {
			plus = f
		}
	}
	if plus == nil || plus.GetContent() != "5" || plus.GetWorkerId() != "math-1" {
		t.Errorf("plus finished %v, want 5 from math-1", plus)
	}
	reqs := model.requests(prompt)
	if len(reqs) < 2 {
		t.Fatalf("the model was asked %d times", len(reqs))
	}
	var names []string
	for _, o := range reqs[1].tools {
		names = append(names, o.Name)
		if o.Name == "plus" && !strings.HasSuffix(o.Description, ". Use it for sums") {
			t.Errorf("plus reads %q, want the config's note after its description", o.Description)
		}
	}
	got := strings.Join(names, ",")
	if !strings.Contains(got, "plus") || strings.Contains(got, "add,") || strings.Contains(got, "divide") || strings.Contains(got, "mean") {
		t.Errorf("after opening math the model was offered %s", got)
	}
}
