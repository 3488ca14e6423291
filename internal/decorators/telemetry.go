package decorators

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Grouped is implemented by tools that belong to a tool group (worker and MCP tools):
// spans, metrics and artifact rules use the group's role.
type Grouped interface{ Group() string }

// TelemetryLayer records each call as an execute_tool span (OpenTelemetry GenAI
// conventions) and in the tool-call duration metric. The span is the parent of the
// router's call to the worker, so the worker's own span joins the run's trace. With
// telemetry off (nil) it does nothing.
func TelemetryLayer(tel *telemetry.Telemetry) toolcall.Layer {
	return toolcall.Layer{Name: LayerTelemetry, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		if tel == nil {
			return nil
		}
		name, group := t.Definition().Name, groupOf(t)
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				ctx, span := tel.StartTool(ctx, telemetry.ToolAttrs{Name: name, CallID: c.Info.CallID, Group: group})
				if tel.RecordsContext() {
					tel.ContextAttributes(span, toolctx.FromContext(ctx))
				}
				res, err := next(ctx, c)
				end := telemetry.ToolResult{Arguments: c.Input, Result: res.Content}
				if d := c.Dispatch; d != nil {
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
				tel.EndTool(span, end)
				return res, err
			}
		}
	}}
}

// Telemetry returns a decorator that traces and measures every call (TelemetryLayer);
// with telemetry off (nil) it leaves the tool as it is.
func Telemetry(tel *telemetry.Telemetry) Decorator {
	if tel == nil {
		return func(t tool.Tool) tool.Tool { return t }
	}
	return layer(TelemetryLayer(tel))
}

// groupOf is the group of a worker's or an MCP server's tool; "" for another.
func groupOf(t tool.Tool) string {
	if g, ok := tool.As[Grouped](t); ok {
		return g.Group()
	}
	return ""
}
