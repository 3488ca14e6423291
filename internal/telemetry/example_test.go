package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A process builds its Telemetry over the providers its SDK setup made (pkg/otelsetup's
// in the binaries), instruments its gRPC servers and clients with ServerOptions /
// DialOptions, wraps its slog handler, and brackets each operation with a Start / End
// pair.
func Example() {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider() // otelsetup.FromEnv(...).TracerProvider in a binary
	defer func() { _ = tp.Shutdown(ctx) }()
	tel, err := telemetry.FromProviders(tp, nil, telemetry.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // varies from run to run
			}
			if a.Key == telemetry.LogKeyTraceID || a.Key == telemetry.LogKeySpanID {
				return slog.String(a.Key, "…") // present, but random
			}
			return a
		},
	})))

	// The run's ids travel in the call info, where the log handler finds them.
	ctx = toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "run-1", LoopID: "loop-1", CallID: "call_1"})
	ctx, run := tel.StartRun(ctx, telemetry.RunAttrs{RunID: "run-1", LoopID: "loop-1"})
	toolCtx, span := tel.StartTool(ctx, telemetry.ToolAttrs{Name: "add", CallID: "call_1", Group: "math"})
	log.InfoContext(toolCtx, "tool call finished", "tool", "add")
	tel.EndTool(span, telemetry.ToolResult{WorkerID: "math-1", Attempts: 1})
	tel.EndRun(run, telemetry.RunResult{Outcome: "completed"})
	// Output:
	// {"level":"INFO","msg":"tool call finished","tool":"add","trace_id":"…","span_id":"…","run_id":"run-1","loop_id":"loop-1","call_id":"call_1"}
}
