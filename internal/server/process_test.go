package server

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestDefaultGroupsAndStreamedText: the config's default groups join every run (a built-in
// group and a worker group; one nobody serves is left out), the run's own tools first; the
// model's text streams as deltas that add up to the answer.
func TestDefaultGroupsAndStreamedText(t *testing.T) {
	script := scripted.Script{Name: "talk", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "communicate", ArgumentsRaw: `{"message":"Working on it."}`}}}},
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "All done, the message was sent."}},
	}}
	e := newEnv(t, envOptions{script: script, configure: func(c *config.Config) {
		c.Loop.DefaultToolGroups = []string{"communication", "text", "nobody_serves_this"}
	}})
	e.startWorker("w1", builtin.TextGroup())
	var started []string
	var deltas strings.Builder
	var messages []string
	final, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "go", StreamText: true}, func(ev *toolpb.RunResponse) {
		if s := ev.GetStarted(); s != nil {
			started = s.GetTools()
		}
		if d := ev.GetTextDelta(); d != nil {
			deltas.WriteString(d.GetText())
		}
		if m := ev.GetMessageToUser(); m != nil {
			messages = append(messages, m.GetText())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(started, ",") != "communicate,lowercase,progress,reverse,uppercase,word_count" {
		t.Errorf("started with %v", started)
	}
	if len(messages) != 1 || messages[0] != "Working on it." {
		t.Errorf("messages %v", messages)
	}
	if deltas.String() != final.GetText() || final.GetText() != "All done, the message was sent." {
		t.Errorf("deltas %q, final %q", deltas.String(), final.GetText())
	}
}
