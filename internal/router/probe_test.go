package router

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// serveOther serves a gRPC server on loopback with what register puts on it, and no
// ToolWorkerService.
func serveOther(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return lis.Addr().String()
}

// TestRegistrationProbesTheAddress: the orchestrator accepts a registration only when
// its address serves ToolWorkerService, and says why it refuses one.
func TestRegistrationProbesTheAddress(t *testing.T) {
	healthOnly := serveOther(t, func(g *grpc.Server) {
		hs := health.NewServer() // knows "" only, as an unrelated service's health would
		healthpb.RegisterHealthServer(g, hs)
	})
	noHealth := serveOther(t, func(*grpc.Server) {})
	notServing := serveOther(t, func(g *grpc.Server) {
		hs := health.NewServer()
		hs.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(g, hs)
	})
	good := startFake(t, answering("ok"))
	tests := []struct {
		name, addr string
		want       error
	}{
		{"a worker", good.addr, nil},
		{"a server whose health does not know ToolWorkerService", healthOnly, ErrWrongService},
		{"a server without a health service", noHealth, ErrWrongService},
		{"a worker that is not serving", notServing, ErrUnreachable},
		{"nothing listening", deadAddress(t), ErrUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRouter(t, Options{Probe: HealthProbe})
			_, rej, err := r.Register(registration("w", tt.addr, "text", echoTool("echo")))
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Register = %v, want %v", err, tt.want)
			}
			if tt.want == nil {
				return
			}
			if len(rej) != 1 || !strings.Contains(rej[0].GetReason(), tt.addr) {
				t.Errorf("rejections %v do not name the address", rej)
			}
			if len(r.ListWorkers()) != 0 || len(r.ListTools()) != 0 {
				t.Errorf("a refused registration left entries: %v %v", r.ListWorkers(), r.ListTools())
			}
		})
	}
}

// TestUnimplementedIsAReplicaFault: an address that stops serving ToolWorkerService
// (another program took it over after the worker registered) answers UNIMPLEMENTED. The
// call never ran there, so it is sent to another replica, even for a tool that is not
// idempotent, and the replica is ejected after repeated failures.
func TestUnimplementedIsAReplicaFault(t *testing.T) {
	ctx := testContext(t)
	other := serveOther(t, func(*grpc.Server) {})
	good := startFake(t, answering("served"))
	r := newRouter(t, Options{EjectAfter: 2}) // the impostor got in before its address changed hands
	mustRegister(t, r, registration("impostor", other, "text", echoTool("echo")))
	mustRegister(t, r, registration("good", good.addr, "text", echoTool("echo")))
	for i := range 6 {
		res, d := call(ctx, t, r, "echo", `{}`)
		if res.IsError() || res.Content != "served" || d.WorkerID != "good" {
			t.Fatalf("call %d = %+v on %+v, want it served by the good replica", i, res, d)
		}
	}
	if got := workerOf(t, r, "impostor").status(r.now()); got != toolpb.WorkerState_WORKER_STATE_EJECTED {
		t.Errorf("impostor state = %s, want EJECTED", got)
	}
	if n := good.calls.Load(); n != 6 {
		t.Errorf("good replica served %d calls, want 6", n)
	}
}

// TestNotServedIsAReplicaFault: a worker that refuses a tool it registered as not served
// (NOT_FOUND, reason UNKNOWN_TOOL: another worker process took its address) did not run
// the call: the call goes to a replica that serves the tool, even for a tool that is not
// idempotent, and the stale replica is ejected. A tool result with code UNKNOWN_TOOL is a
// tool's answer, and neither.
func TestNotServedIsAReplicaFault(t *testing.T) {
	ctx := testContext(t)
	stale := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return nil, wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL, Message: "tool 'echo' is not served by worker other"}.Err()
	})
	good := startFake(t, answering("served"))
	r := newRouter(t, Options{EjectAfter: 2})
	mustRegister(t, r, registration("stale", stale.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("good", good.addr, "text", echoTool("echo")))
	for i := range 6 {
		res, d := call(ctx, t, r, "echo", `{}`)
		if res.IsError() || res.Content != "served" || d.WorkerID != "good" {
			t.Fatalf("call %d = %+v on %+v, want it served by the good replica", i, res, d)
		}
	}
	if got := workerOf(t, r, "stale").status(r.now()); got != toolpb.WorkerState_WORKER_STATE_EJECTED {
		t.Errorf("stale replica state = %s, want EJECTED", got)
	}
	if n := stale.calls.Load(); n > 2 {
		t.Errorf("stale replica was sent %d calls, want at most 2 (then ejected)", n)
	}

	// A proxy tool whose downstream tool is missing ran, and answered UNKNOWN_TOOL as its
	// result: the model hears it, the call is not sent again, the worker is healthy.
	proxy := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeUnknownTool, "downstream tool 'x' is gone"))
	})
	r2 := newRouter(t, Options{EjectAfter: 1})
	mustRegister(t, r2, registration("proxy", proxy.addr, "text", echoTool("echo")))
	for range 3 {
		res, _ := call(ctx, t, r2, "echo", `{}`)
		if !res.IsError() || res.Code != tool.CodeUnknownTool || !strings.Contains(res.Content, "downstream") {
			t.Fatalf("proxy answer = %+v, want its UNKNOWN_TOOL result", res)
		}
	}
	if n := proxy.calls.Load(); n != 3 {
		t.Errorf("proxy was sent %d calls, want 3 (no resend)", n)
	}
	if got := workerOf(t, r2, "proxy").status(r2.now()); got != toolpb.WorkerState_WORKER_STATE_READY {
		t.Errorf("proxy state = %s, want READY", got)
	}
}

// TestOversizedResultIsAToolErrorNotAFailure: a worker whose result is over the
// router's receive limit ran the call and is healthy: the model gets an error result
// saying so, the call is not sent again, even for an idempotent tool, and no replica is
// held at fault however often it happens.
func TestOversizedResultIsAToolErrorNotAFailure(t *testing.T) {
	ctx := testContext(t)
	big := func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return textResponse(strings.Repeat("x", 5<<20)), nil
	}
	a, b := startFake(t, big), startFake(t, big)
	r := newRouter(t, Options{EjectAfter: 2})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("echo", tool.Idempotent())))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("echo", tool.Idempotent())))
	for i := range 5 {
		res, d := call(ctx, t, r, "echo", `{}`)
		if !res.IsError() || res.Code != tool.CodeFailed || !strings.Contains(res.Content, "too large") || d.Attempts != 1 {
			t.Fatalf("call %d = %+v (dispatch %+v), want one attempt and an error result about the size", i, res, d)
		}
	}
	if n := a.calls.Load() + b.calls.Load(); n != 5 {
		t.Errorf("executions = %d, want 5: an oversized result is not retried", n)
	}
	for _, id := range []string{"a", "b"} {
		if got := workerOf(t, r, id).status(r.now()); got != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("%s state = %s, want READY", id, got)
		}
	}
	// A worker that refuses the call with RESOURCE_EXHAUSTED before running it is not
	// confused with one that answered too much.
	busy := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return nil, status.Error(codes.ResourceExhausted, "no slot")
	})
	r2 := newRouter(t, Options{})
	mustRegister(t, r2, registration("busy", busy.addr, "text", echoTool("echo")))
	if res, _ := call(ctx, t, r2, "echo", `{}`); !res.IsError() || strings.Contains(res.Content, "too large") {
		t.Errorf("refusal = %+v", res)
	}
}
