package router

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/builtin"
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
	wrk := telemetrytest.New(t, telemetry.Options{})
	add := builtin.MathOperations()[0]
	w, err := workersdk.New(workersdk.Options{ID: "w1", Orchestrator: deadAddress(t), Listen: "127.0.0.1:0", Logger: discard(),
		TracerProvider: wrk.TracerProvider()}, workersdk.Group{Role: "math", Description: "math", Tools: []tool.Tool{add}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	addr, err := w.Addr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(t, Options{Telemetry: orch.Telemetry})
	mustRegister(t, r, registration("w1", addr.String(), "math", add))
	stub, err := r.Tool("add")
	if err != nil {
		t.Fatal(err)
	}
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

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
