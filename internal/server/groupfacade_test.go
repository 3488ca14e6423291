package server

import (
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestGroupAsFacade: a group configured as a facade is offered as one tool that unfolds
// into the group's tools with the group's usage notes.
func TestGroupAsFacade(t *testing.T) {
	script := scripted.Script{Name: "open", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "text_tools"}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "opened"}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Groups = map[string]config.Group{"text": {Facade: &config.GroupFacade{Name: "text_tools"}}}
	}})
	e.startWorker("w1", examplegroups.TextGroup())
	var started []string
	var content string
	_, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", ToolGroups: []string{"text"}}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started = s.GetTools()
		}
		if f := ev.GetToolCallFinished(); f != nil {
			content = f.GetContent()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != 1 || started[0] != "text_tools" {
		t.Errorf("started with %v, want [text_tools]", started)
	}
	want := "Tools now available: lowercase, reverse, uppercase, word_count. You MUST call one of these tools to complete the user's request. Do NOT respond with text — call a tool.\n\n" + examplegroups.TextUsageNotes
	if content != want {
		t.Errorf("unfold text = %q, want %q", content, want)
	}
	second := e.model.Requests()[1]
	var offered []string
	for _, spec := range second.Tools {
		offered = append(offered, spec.Name)
	}
	if len(offered) != 6 { // four text tools, the guide tool and text_tools_context
		t.Errorf("second request offered %v", offered)
	}
}
