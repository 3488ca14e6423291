package server

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
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

// TestCallInsideAnUnopenedFacade: a model that calls a tool of a worker's facade without
// opening the facade first gets the tool's answer, from the worker — not a claim that the
// tool does not exist; the facade stays as it was offered. A name no facade holds is
// still unknown.
func TestCallInsideAnUnopenedFacade(t *testing.T) {
	script := scripted.Script{Name: "straight", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{
			{ID: "c1", Name: "add", ArgumentsRaw: `{"a":2,"b":3}`},
			{ID: "c2", Name: "exponent", ArgumentsRaw: `{"a":2,"b":3}`},
		}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "5"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", examplegroups.Math())
	fins := map[string]*toolpb.ToolCallFinished{}
	var changed bool
	if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "2+3", ToolGroups: []string{"math"}}, func(ev *toolpb.RunResponse) {
		if f := ev.GetToolCallFinished(); f != nil {
			fins[f.GetTool()] = f
		}
		if ev.GetToolsChanged() != nil {
			changed = true
		}
	}); err != nil {
		t.Fatal(err)
	}
	if f := fins["add"]; f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK || f.GetContent() != "5" || f.GetWorkerId() != "w1" {
		t.Errorf("add finished %v, want 5 from w1", f)
	}
	if f := fins["exponent"]; f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL {
		t.Errorf("exponent finished %v, want an unknown tool", f)
	}
	if changed {
		t.Error("the tool set changed: calling a tool inside the facade opened it")
	}
	second := e.model.Requests()[1]
	if len(second.Tools) != 1 || second.Tools[0].Name != "math" {
		t.Errorf("the second request offered %v, want the facade alone", second.Tools)
	}
}

// TestFlatteningAWorkersFacade: a config group's include patterns name the tools inside a
// worker's facade, and `offer: flat` offers them one by one instead of the facade; a call
// of one reaches the worker.
func TestFlatteningAWorkersFacade(t *testing.T) {
	script := scripted.Script{Name: "add", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "add", ArgumentsRaw: `{"a":2,"b":3}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "5"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Groups = map[string]config.Group{
			"calc": {Include: []string{"math/add", "math/mul*"}},
			"math": {Offer: "flat"},
		}
	}})
	e.startWorker("w1", examplegroups.Math())
	for _, tc := range []struct{ group, want string }{
		{"calc", "add,multiply"},
		{"math", "add,ceiling,divide,floor,max,mean,min,multiply,round,subtract"},
	} {
		var started []string
		var content string
		if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "2+3", ToolGroups: []string{tc.group}}, func(ev *toolpb.RunResponse) {
			if s := ev.GetStarted(); s != nil {
				started = s.GetTools()
			}
			if f := ev.GetToolCallFinished(); f != nil {
				content = f.GetContent()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(started, ",") != tc.want {
			t.Errorf("group %s offers %v, want %s", tc.group, started, tc.want)
		}
		if content != "5" {
			t.Errorf("group %s: add answered %q", tc.group, content)
		}
	}
}
