package progressive

import (
	"context"
	"strings"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// ContextSuffix ends the name of a facade's context tool: "<facade>_context".
const ContextSuffix = "_context"

// GuideAdvice and ContextAdvice end the ALREADY LOADED text (toolctx.AlreadyLoaded) that
// a repeated call of the guide or the context tool gets in the same loop.
const (
	GuideAdvice   = "Call one of the tools listed there."
	ContextAdvice = "Use the tools it describes."
)

// NewGuideTool returns the guide tool of an unfolded facade: it
// has the facade's name, so that a model that calls the facade again gets the list of its
// children instead of a not-found error:
//
//	description: Call a specific tool instead: <n1, n2>
//	answer:      Use one of these tools directly:
//	             - <name>: <description>
//	             ...
//
//	             <usage notes>
//
// It answers once per loop; later calls in the loop get the ALREADY LOADED text with
// GuideAdvice (toolctx.OneShotPerLoop).
func NewGuideTool(facadeName string, children []tool.Tool, usageNotes string) tool.Tool {
	var b strings.Builder
	b.WriteString("Use one of these tools directly:")
	writeToolLines(&b, children)
	if strings.TrimSpace(usageNotes) != "" {
		b.WriteString("\n\n" + usageNotes)
	}
	answer := strings.TrimSpace(b.String())
	guide := tool.New(facadeName, "Call a specific tool instead: "+strings.Join(names(children), ", "), schema.Empty(),
		func(context.Context, string) (tool.Result, error) { return tool.Text(answer), nil })
	return toolctx.OneShotPerLoop(guide, GuideAdvice)
}

// NewContextTool returns the context tool of an unfolded facade, "<facade>_context",
// which keeps what the facade's description said about its children:
//
//	description: <facade description>. Available: <n1, n2>[. <usage notes>]
//	answer:      Tools for <facade description>:
//	             - <name>: <description>
//	             ...
//
//	             Usage notes: <usage notes>
//
// It answers once per loop; later calls in the loop get the ALREADY LOADED text with
// ContextAdvice, so that a model cannot call it again and again in a loop.
func NewContextTool(facadeName, facadeDescription string, children []tool.Tool, usageNotes string) tool.Tool {
	notes := strings.TrimSpace(usageNotes)
	description := facadeDescription + ". Available: " + strings.Join(names(children), ", ")
	if notes != "" {
		description += ". " + notes
	}
	var b strings.Builder
	b.WriteString("Tools for " + facadeDescription + ":")
	writeToolLines(&b, children)
	if notes != "" {
		b.WriteString("\n\nUsage notes: " + usageNotes)
	}
	answer := strings.TrimSpace(b.String())
	ctxTool := tool.New(facadeName+ContextSuffix, description, schema.Empty(),
		func(context.Context, string) (tool.Result, error) { return tool.Text(answer), nil })
	return toolctx.OneShotPerLoop(ctxTool, ContextAdvice)
}

func writeToolLines(b *strings.Builder, tools []tool.Tool) {
	for _, t := range tools {
		d := t.Definition()
		b.WriteString("\n- " + d.Name + ": " + d.Description)
	}
}
