package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
)

// A process sets telemetry up once, instruments its gRPC servers and clients with
// ServerOptions / DialOptions, wraps its slog handler, and brackets each operation with a
// Start / End pair.
func Example() {
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceName: "orchestrator",
		Env:         telemetrytest.Env(nil), // os.Getenv in a real process
		Prometheus:  true,                   // serve tel.MetricsHandler() at /metrics
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == telemetry.LogKeyTraceID || a.Key == telemetry.LogKeySpanID {
				return slog.Attr{} // vary from run to run
			}
			return a
		},
	})))

	ctx, run := tel.StartRun(ctx, telemetry.RunAttrs{RunID: "run-1", LoopID: "loop-1"})
	toolCtx, span := tel.StartTool(ctx, telemetry.ToolAttrs{Name: "add", CallID: "call_1", Group: "math"})
	log.InfoContext(toolCtx, "tool call finished", "tool", "add")
	tel.EndTool(span, telemetry.ToolResult{WorkerID: "math-1", Attempts: 1})
	tel.EndRun(run, telemetry.RunResult{Outcome: "completed"})
	// Output:
	// {"level":"INFO","msg":"tool call finished","tool":"add","run_id":"run-1","loop_id":"loop-1"}
}
