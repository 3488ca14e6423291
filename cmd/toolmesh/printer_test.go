package main

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// toolmesh run -stream: the text alongside tool calls is streamed, then the orchestrator
// sends it again as a message event of the same iteration; the printer shows it once.
func TestPrinterDoesNotRepeatStreamedText(t *testing.T) {
	evs := []*toolpb.RunResponse{
		{Event: &toolpb.RunResponse_TextDelta{TextDelta: &toolpb.TextDelta{Text: "Let me ", Iteration: 1}}},
		{Event: &toolpb.RunResponse_TextDelta{TextDelta: &toolpb.TextDelta{Text: "add.", Iteration: 1}}},
		{Event: &toolpb.RunResponse_Message{Message: &toolpb.AssistantMessage{Text: "Let me add.", Iteration: 1}}},
		{Event: &toolpb.RunResponse_ToolCallStarted{ToolCallStarted: &toolpb.ToolCallStarted{Tool: "add", ArgumentsJson: `{}`, Iteration: 1}}},
	}
	var out strings.Builder
	p := &printer{out: &out, terminal: true}
	for _, ev := range evs {
		p.print(ev)
	}
	p.endLine()
	if n := strings.Count(out.String(), "Let me add."); n != 1 {
		t.Errorf("the streamed text is printed %d times:\n%s", n, out.String())
	}
}
