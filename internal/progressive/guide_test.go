package progressive_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func TestGuideAndContextTools(t *testing.T) {
	c := &calls{}
	children := c.leaves("vector_search", "text_search")
	const desc = "Search Spotify for music data"
	const notes = "Try vector search first."
	tests := []struct {
		name     string
		tool     tool.Tool
		wantDef  tool.Definition
		wantText string
		advice   string
	}{
		{
			name: "guide tool",
			tool: progressive.NewGuideTool("spotify_search", children, ""),
			wantDef: tool.Definition{Name: "spotify_search", Description: "Call a specific tool instead: vector_search, text_search",
				InputSchema: schema.Empty()},
			wantText: lines("Use one of these tools directly:", "- vector_search: Does vector_search.", "- text_search: Does text_search."),
			advice:   "Call one of the tools listed there.",
		},
		{
			name: "guide tool with notes",
			tool: progressive.NewGuideTool("spotify_search", children, "  "+notes+"\n"),
			wantDef: tool.Definition{Name: "spotify_search", Description: "Call a specific tool instead: vector_search, text_search",
				InputSchema: schema.Empty()},
			wantText: lines("Use one of these tools directly:", "- vector_search: Does vector_search.", "- text_search: Does text_search.", "", "  "+notes),
			advice:   "Call one of the tools listed there.",
		},
		{
			name: "context tool",
			tool: progressive.NewContextTool("spotify_search", desc, children, " "),
			wantDef: tool.Definition{Name: "spotify_search_context", Description: desc + ". Available: vector_search, text_search",
				InputSchema: schema.Empty()},
			wantText: lines("Tools for "+desc+":", "- vector_search: Does vector_search.", "- text_search: Does text_search."),
			advice:   "Use the tools it describes.",
		},
		{
			name: "context tool with notes",
			tool: progressive.NewContextTool("spotify_search", desc, children, notes),
			wantDef: tool.Definition{Name: "spotify_search_context", Description: desc + ". Available: vector_search, text_search. " + notes,
				InputSchema: schema.Empty()},
			wantText: lines("Tools for "+desc+":", "- vector_search: Does vector_search.", "- text_search: Does text_search.", "", "Usage notes: "+notes),
			advice:   "Use the tools it describes.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.wantDef, tt.tool.Definition()); diff != "" {
				t.Errorf("Definition (-want +got):\n%s", diff)
			}
			if got := tt.tool.Definition().InputSchema.String(); got != `{"type":"object","properties":{}}` {
				t.Errorf("schema = %s", got)
			}
			loopA := toolcall.WithCallInfo(context.Background(), tool.CallInfo{LoopID: "a"})
			loopB := toolcall.WithCallInfo(context.Background(), tool.CallInfo{LoopID: "b"})
			for i, step := range []struct {
				ctx  context.Context
				want string
			}{
				{loopA, tt.wantText},
				{loopA, alreadyLoaded(tt.wantDef.Name, tt.advice)},
				{loopB, tt.wantText},
				{loopA, alreadyLoaded(tt.wantDef.Name, tt.advice)},
			} {
				res, err := tt.tool.Call(step.ctx, "{}")
				if err != nil || res != tool.Text(step.want) {
					t.Errorf("call %d = %+v, %v; want %q", i+1, res, err, step.want)
				}
			}
		})
	}
	if progressive.GuideAdvice != "Call one of the tools listed there." || progressive.ContextAdvice != "Use the tools it describes." {
		t.Error("the advice texts changed")
	}
}
