package router

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// hopArguments and hopContext are the benchmark harness's: about 100 bytes of JSON and a
// ToolCallContext of four keys.
const hopArguments = `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`

var hopContext = toolctx.MustOf(
	"tenant_id", "acme-corp",
	"user_id", "user-7f3c9a2e-5d41-4b8e-9c07-1a2b3c4d5e6f",
	"request_id", "req-01HZX4Q7N8P9R2S3T4V5W6X7Y8",
	"session_id", "sess-9b1d2f3e4a5c6b7d8e9f",
)

// hopCall serves the built-in add from a pkg/worker on loopback, registers it with a
// router, and returns a call of it as the loop makes one (call info, a four-key context,
// a dispatch record), checked once.
func hopCall(b *testing.B) func() (tool.Result, error) {
	add := examplegroups.MathOperations()[0]
	w := startSDK(b, "w1", add)
	r := newRouter(b, Options{})
	mustRegister(b, r, sdkRegistration(w, add))
	t, err := r.Tool("add")
	if err != nil {
		b.Fatal(err)
	}
	info := tool.CallInfo{RunID: "run_bench", LoopID: "loop_bench", CallID: "call_1"}
	call := func() (tool.Result, error) {
		ctx := toolcall.WithCallInfo(context.Background(), info)
		ctx = toolctx.NewContext(ctx, hopContext)
		ctx, _ = toolinternal.WithDispatch(ctx)
		return t.Call(ctx, hopArguments)
	}
	if res, err := call(); err != nil || res.IsError() || res.Content != "111111.11101111112" {
		b.Fatalf("add = %+v, %v", res, err)
	}
	return call
}

// BenchmarkHop is one call of the built-in add as the loop makes it (call info, a
// four-key context, a dispatch record) through the router and gRPC on loopback to a
// pkg/worker in this process, and back: both sides of the hop, allocations included.
// -cpuprofile and -memprofile show where a hop's CPU goes.
func BenchmarkHop(b *testing.B) {
	call := hopCall(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := call(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHopParallel is BenchmarkHop with 32 calls in flight, as the harness's
// throughput phase runs it: ns/op is the CPU the two sides spend per call on this
// machine's cores.
func BenchmarkHopParallel(b *testing.B) {
	call := hopCall(b)
	runParallel(b, func() error {
		if res, err := call(); err != nil || res.IsError() {
			return fmt.Errorf("add = %+v, %v", res, err)
		}
		return nil
	})
}

// runParallel runs call with 32 calls in flight, as the harness's throughput phase
// does, and reports allocations and the CPU this process spends per call.
func runParallel(b *testing.B, call func() error) {
	b.ReportAllocs()
	b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
	before := processCPU()
	defer func() { b.ReportMetric(float64(processCPU()-before)/float64(b.N)/1e3, "cpu-µs/op") }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// processCPU is the CPU time this process has used (user and system), in nanoseconds:
// what a hop costs, both sides being in this process, whatever else the machine runs.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
