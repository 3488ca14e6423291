package worker

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/toolmesh/toolmesh/internal/ctxcodec"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// BenchmarkInvoke is the worker's side of a hop without the network: what pkg/worker
// does with a call gRPC has decoded (read the context from the metadata, validate the
// arguments, build the call's context, run a typed add, build the response), with the
// benchmark harness's arguments and four-key context. gRPC's own work on either side is
// in internal/router's BenchmarkHop and BenchmarkLimitParallel.
func BenchmarkInvoke(b *testing.B) {
	type pair struct {
		A float64 `json:"a" jsonschema:"the first operand"`
		B float64 `json:"b" jsonschema:"the second operand"`
	}
	add := tool.MustFunc("add", "Add two numbers: a + b", func(_ context.Context, in pair) (float64, error) { return in.A + in.B, nil })
	w, err := New(Options{ID: "w1", Orchestrator: "127.0.0.1:1", Logger: discard()}, group(add))
	if err != nil {
		b.Fatal(err)
	}
	md, err := ctxcodec.Codec{}.Encode(toolctx.MustOf(
		"tenant_id", "acme-corp",
		"user_id", "user-7f3c9a2e-5d41-4b8e-9c07-1a2b3c4d5e6f",
		"request_id", "req-01HZX4Q7N8P9R2S3T4V5W6X7Y8",
		"session_id", "sess-9b1d2f3e4a5c6b7d8e9f",
	))
	if err != nil {
		b.Fatal(err)
	}
	// What gRPC puts in a call's incoming metadata besides the context's entries.
	md[":authority"] = []string{"127.0.0.1:7070"}
	md["content-type"] = []string{"application/grpc"}
	md["user-agent"] = []string{"grpc-go/1.85.0"}
	base := metadata.NewIncomingContext(context.Background(), md)
	req := &toolpb.InvokeRequest{Tool: "add", RunId: "run_bench", LoopId: "loop_bench", CallId: "call_1", IdempotencyKey: "run_bench/loop_bench/call_1",
		ArgumentsJson: `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`}
	s := &invoker{w: w}
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(base, time.Minute) // gRPC's, from grpc-timeout
		resp, err := s.Invoke(ctx, req)
		cancel()
		if err != nil || resp.GetText() != "111111.11101111112" {
			b.Fatalf("Invoke = %v, %v", resp, err)
		}
	}
}
