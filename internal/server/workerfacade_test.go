package server

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// TestWorkerByCategoryFacade: a worker's by-category facade, called with a category it
// lists, opens that category's tools; called with a category it does not list, or with
// none, it opens all of them — the loop does not refuse the call against the category's
// enum before it reaches the facade.
func TestWorkerByCategoryFacade(t *testing.T) {
	leaf := func(name string) tool.Tool {
		return tool.New(name, "Does "+name+".", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text(name), nil })
	}
	facade := tool.ByCategory("records", "Works with records, by category.", []tool.Category{
		{Name: "read", Tools: []tool.Tool{leaf("find"), leaf("count")}},
		{Name: "write", Tools: []tool.Tool{leaf("insert")}},
	})
	const all = "Tools now available: find, count, insert. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."
	for _, tc := range []struct{ name, args, want string }{
		{"a listed category", `{"category":"write"}`, "Tools now available: insert. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool."},
		{"an unknown category", `{"category":"archive"}`, all},
		{"no category", `{}`, all},
		{"no arguments", ``, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := scripted.Script{Name: "open", Rules: []scripted.Rule{
				{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "records", ArgumentsRaw: tc.args}}}},
				{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "opened"}},
			}}
			e := newEnv(t, envOptions{script: script})
			e.startWorker("w1", worker.Group{Role: "records", Description: "Records.", Tools: []tool.Tool{facade}})
			var fin *toolpb.ToolCallFinished
			if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"records"}}, func(ev *toolpb.RunResponse) {
				if f := ev.GetToolCallFinished(); f != nil {
					fin = f
				}
			}); err != nil {
				t.Fatal(err)
			}
			if fin == nil || fin.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK || fin.GetContent() != tc.want {
				t.Errorf("the facade's call finished %v, want %q", fin, tc.want)
			}
		})
	}
}
