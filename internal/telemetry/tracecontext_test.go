package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// TestOffServerTakesTraceContext checks that a server whose Telemetry records nothing
// still takes the caller's trace context into the call's, without otelgrpc.
func TestOffServerTakesTraceContext(t *testing.T) {
	tel, err := FromProviders(nil, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := traceContextHandler{t: tel}
	info := &stats.RPCTagInfo{FullMethodName: "/toolmesh.v1.OrchestratorService/Run"}
	if ctx := h.TagRPC(context.Background(), info); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("a call without a traceparent has a span context")
	}
	md := metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := h.TagRPC(metadata.NewIncomingContext(context.Background(), md), info)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("span context = %+v, want the caller's, remote", sc)
	}
	run, span := tel.StartRun(ctx, RunAttrs{RunID: "r1"})
	if run != ctx || span.SpanContext().TraceID() != sc.TraceID() || span.IsRecording() {
		t.Errorf("StartRun over no-op providers: a new context or a span of another trace (%v)", span.SpanContext())
	}
	tel.EndRun(span, RunResult{Outcome: "completed"})
}
