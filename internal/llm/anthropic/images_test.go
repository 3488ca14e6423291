package anthropic_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
)

// TestToolResultImages: a tool result's images go in its tool_result block after the
// text, as base64 image sources; an image of a type the API does not read (here SVG)
// is not sent, and the text's placeholder stands for it.
func TestToolResultImages(t *testing.T) {
	s := llmtest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		sse(w, msgStart(90, 1), textStart(0), textDelta(0, "A red dot."), blockStop(0), msgDelta("end_turn", 4), msgStop())
	})
	p := newProvider(t, s)
	_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{
		Messages: []llm.Message{
			{Role: llm.RoleUser, Text: "Draw."},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "toolu_1", Name: "draw", Arguments: `{}`}}},
			{Role: llm.RoleTool, ToolCallID: "toolu_1", ToolName: "draw", Text: "[image: image/png, 3 bytes]\n[image: image/svg+xml, 5 bytes]",
				Images: []llm.Image{{MediaType: "image/png", Data: []byte("PNG")}, {MediaType: "image/svg+xml", Data: []byte("<svg>")}}},
		},
		Tools: []llm.ToolSpec{weatherTool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Only(t)
	want := llmtest.JSON(t, `[
		{"role":"user","content":[{"type":"text","text":"Draw."}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"draw","input":{}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_1","content":[
				{"type":"text","text":"[image: image/png, 3 bytes]\n[image: image/svg+xml, 5 bytes]"},
				{"type":"image","source":{"type":"base64","media_type":"image/png","data":"UE5H"}}]}]}]`)
	if diff := cmp.Diff(want, r.Body["messages"]); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}
