package decorators

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Grouped is implemented by tools that belong to a tool group (worker and MCP tools):
// spans, metrics and artifact rules use the group's role.
type Grouped interface{ Group() string }

// traced records each call as an execute_tool span (OpenTelemetry GenAI conventions)
// and in the tool-call duration metric. The span is the parent of the router's call to
// the worker, so the worker's own span joins the run's trace.
type traced struct {
	base
	tel *telemetry.Telemetry
}

// Telemetry returns a decorator that traces and measures every call; with telemetry off
// (nil) it leaves the tool as it is.
func Telemetry(tel *telemetry.Telemetry) Decorator {
	if tel == nil {
		return func(t tool.Tool) tool.Tool { return t }
	}
	return func(t tool.Tool) tool.Tool { return traced{base{t}, tel} }
}

func (t traced) Call(ctx context.Context, input string) (tool.Result, error) {
	attrs := telemetry.ToolAttrs{Name: t.d.Definition().Name}
	if info, ok := tool.CallInfoFrom(ctx); ok {
		attrs.CallID = info.CallID
	}
	if g, ok := tool.As[Grouped](t.d); ok {
		attrs.Group = g.Group()
	}
	ctx, span := t.tel.StartTool(ctx, attrs)
	if t.tel.RecordsContext() {
		t.tel.ContextAttributes(span, toolctx.FromContext(ctx))
	}
	res, err := t.d.Call(ctx, input)
	end := telemetry.ToolResult{Arguments: input, Result: res.Content}
	if d := toolinternal.DispatchFrom(ctx); d != nil {
		end.WorkerID, end.Attempts = d.WorkerID, d.Attempts
	}
	switch {
	case err != nil:
		end.ErrorType = "SIGNAL"
	case res.IsError():
		end.ErrorType = string(res.Code)
		if end.ErrorType == "" {
			end.ErrorType = string(tool.CodeFailed)
		}
	}
	t.tel.EndTool(span, end)
	return res, err
}
