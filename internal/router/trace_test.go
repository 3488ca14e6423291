package router

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	workersdk "github.com/toolmesh/toolmesh/pkg/worker"
)

// A call to a worker is traced with one span on each side: the orchestrator's
// execute_tool span, whose trace context travels with the call, and the worker's
// execute_tool span (kind SERVER), its child in the same trace; no RPC span on either side.
func TestOneSpanPerSide(t *testing.T) {
	ctx := testContext(t)
	orch := telemetrytest.New(t, telemetry.Options{})
	wrk, stub := tracedAdd(t, newRouter(t, Options{Telemetry: orch.Telemetry}))
	cctx, span := orch.StartTool(toolctx.NewContext(ctx, toolctx.MustOf("tenant", "acme")), telemetry.ToolAttrs{Name: "add", Group: "math"})
	res, err := stub.Call(cctx, `{"a": 1, "b": 2}`)
	span.End()
	if err != nil || res.IsError() || res.Content != "3" {
		t.Fatalf("add = %+v, %v", res, err)
	}
	if n := len(orch.Ended()); n != 1 {
		t.Errorf("the orchestrator made %d spans, want its execute_tool span alone: %v", n, spanNames(orch.Ended()))
	}
	ws := wrk.Span(t, "execute_tool add")
	if n := len(wrk.Ended()); n != 1 {
		t.Errorf("the worker made %d spans, want its execute_tool span alone: %v", n, spanNames(wrk.Ended()))
	}
	os := orch.Span(t, "execute_tool add")
	if ws.SpanKind() != trace.SpanKindServer {
		t.Errorf("the worker's span is of kind %v, want SERVER", ws.SpanKind())
	}
	if ws.SpanContext().TraceID() != os.SpanContext().TraceID() || ws.Parent().SpanID() != os.SpanContext().SpanID() {
		t.Errorf("the worker's span (trace %s, parent %s) is not the child of the orchestrator's (trace %s, span %s)",
			ws.SpanContext().TraceID(), ws.Parent().SpanID(), os.SpanContext().TraceID(), os.SpanContext().SpanID())
	}
}

// tracedAdd starts a pkg/worker serving the built-in add with its spans recorded,
// registers it with r, and returns the recorder and r's stub of add.
func tracedAdd(t *testing.T, r *Router) (*telemetrytest.Recorder, tool.Tool) {
	t.Helper()
	wrk := telemetrytest.New(t, telemetry.Options{})
	add := examplegroups.MathOperations()[0]
	w, err := workersdk.New(workersdk.Options{ID: "w1", Orchestrator: deadAddress(t), Listen: "127.0.0.1:0", Logger: discard(),
		TracerProvider: wrk.TracerProvider()}, workersdk.Group{Role: "math", Description: "math", Tools: []tool.Tool{add}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	addr, err := w.Addr(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, registration("w1", addr.String(), "math", add))
	stub, err := r.Tool("add")
	if err != nil {
		t.Fatal(err)
	}
	return wrk, stub
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// An orchestrator with the SDK disabled (OTEL_SDK_DISABLED=true: no-op providers) still
// passes on the trace context it was called with, as the OpenTelemetry API does without
// an SDK: a traced worker's span joins the client's trace.
func TestTraceJoinsThroughAnUntracedOrchestrator(t *testing.T) {
	ctx := testContext(t)
	off, err := telemetry.FromProviders(tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wrk, stub := tracedAdd(t, newRouter(t, Options{Telemetry: off}))
	// The client's span, as the orchestrator's gRPC server leaves it in the Run's context.
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true})
	res, err := stub.Call(trace.ContextWithRemoteSpanContext(ctx, client), `{"a": 1, "b": 2}`)
	if err != nil || res.IsError() {
		t.Fatalf("add = %+v, %v", res, err)
	}
	ws := wrk.Span(t, "execute_tool add")
	if ws.Parent().SpanID() != client.SpanID() {
		t.Errorf("the worker's span has parent %s, want the client's span %s", ws.Parent().SpanID(), client.SpanID())
	}
	for _, s := range wrk.Ended() {
		if s.SpanContext().TraceID() != client.TraceID() {
			t.Errorf("worker span %q is in trace %s, not the client's %s", s.Name(), s.SpanContext().TraceID(), client.TraceID())
		}
	}
}
