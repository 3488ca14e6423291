package router

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestCallForwardsRequestAndResult(t *testing.T) {
	ctx := testContext(t)
	var got atomic.Pointer[toolpb.InvokeRequest]
	f := startFake(t, func(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		got.Store(req)
		return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Artifact{Artifact: &toolpb.ArtifactResult{
			Content: "done", Artifact: &toolpb.Artifact{TypeName: "Receipt", Payload: &toolpb.Artifact_Json{Json: `{"n":1}`}},
		}}}, nil
	})
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))

	ctx = toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "run1", LoopID: "loop1", CallID: "call1"})
	res, d := call(ctx, t, r, "echo", `{"text":"hi"}`)
	if res.Kind != tool.KindArtifact || res.Content != "done" || res.Artifact.TypeName != "Receipt" || string(res.Artifact.JSON) != `{"n":1}` {
		t.Errorf("result = %+v", res)
	}
	if d.WorkerID != "a" || d.Attempts != 1 {
		t.Errorf("dispatch = %+v", d)
	}
	req := got.Load()
	if req.GetTool() != "echo" || req.GetArgumentsJson() != `{"text":"hi"}` || req.GetRunId() != "run1" ||
		req.GetLoopId() != "loop1" || req.GetCallId() != "call1" || req.GetIdempotencyKey() != "run1/loop1/call1" {
		t.Errorf("request = %v", req)
	}
	ws := r.ListWorkers()
	if ws[0].GetCalls() != 1 || ws[0].GetInFlight() != 0 {
		t.Errorf("worker stats = %v", ws[0])
	}
}

func TestCallWorkerErrorStatusIsAToolErrorNotRetried(t *testing.T) {
	ctx := testContext(t)
	bad := func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "no such thing")
	}
	a, b := startFake(t, bad), startFake(t, bad)
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("echo", tool.Idempotent())))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("echo", tool.Idempotent())))
	res, d := call(ctx, t, r, "echo", `{}`)
	if res.Code != tool.CodeFailed || !strings.Contains(res.Content, "no such thing") || d.Attempts != 1 {
		t.Errorf("result = %+v, dispatch %+v", res, d)
	}
	if n := a.calls.Load() + b.calls.Load(); n != 1 {
		t.Errorf("executions = %d, want 1", n)
	}
}

func TestP2CSpreadsSequentialCalls(t *testing.T) {
	ctx := testContext(t)
	a, b := startFake(t, answering("a")), startFake(t, answering("b"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("echo")))
	for range 10 {
		if res, _ := call(ctx, t, r, "echo", `{}`); res.IsError() {
			t.Fatalf("call failed: %v", res.Content)
		}
	}
	// Idle replicas tie on in-flight calls; ties go to the one that served fewer.
	if a.calls.Load() != 5 || b.calls.Load() != 5 {
		t.Errorf("calls a=%d b=%d, want 5 each", a.calls.Load(), b.calls.Load())
	}
}

func TestP2CPrefersLessLoadedReplica(t *testing.T) {
	ctx := testContext(t)
	release := newGate()
	started := make(chan string, 1)
	handler := func(name string) func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return func(ctx context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
			if req.GetArgumentsJson() == `{"hold":true}` {
				started <- name
				if err := release.wait(ctx); err != nil {
					return nil, err
				}
			}
			return textResponse(name), nil
		}
	}
	a, b := startFake(t, handler("a")), startFake(t, handler("b"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("echo")))

	held := make(chan tool.Result, 1)
	go func() {
		tl, _ := r.Tool("echo")
		res, _ := tl.Call(ctx, `{"hold":true}`)
		held <- res
	}()
	var busy string
	select {
	case busy = <-started:
	case <-ctx.Done():
		t.Fatal("held call never started")
	}
	for range 6 {
		res, d := call(ctx, t, r, "echo", `{}`)
		if res.IsError() || d.WorkerID == busy {
			t.Errorf("call went to %s (busy %s): %+v", d.WorkerID, busy, res)
		}
	}
	release.open()
	if res := <-held; res.Content != busy {
		t.Errorf("held call = %+v", res)
	}
}

func TestP2CWeighsCapacity(t *testing.T) {
	small := &worker{id: "small", capacity: 1}
	big := &worker{id: "big", capacity: 10}
	small.inFlight.Store(1)
	big.inFlight.Store(5)
	if got := better(small, big); got != big {
		t.Errorf("better picked %s, want big (half loaded, not full)", got.id)
	}
	if got := better(big, small); got != big {
		t.Errorf("better is not symmetric: picked %s", got.id)
	}
}

func TestFailoverFromDeadPort(t *testing.T) {
	ctx := testContext(t)
	live := startFake(t, answering("live"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("dead", deadAddress(t), "text", echoTool("echo")))
	mustRegister(t, r, registration("live", live.addr, "text", echoTool("echo")))
	workerOf(t, r, "live").calls.Store(1000) // make the dead replica the first choice

	res, d := call(ctx, t, r, "echo", `{}`)
	if res.IsError() || res.Content != "live" {
		t.Fatalf("result = %+v, want live's answer", res)
	}
	if d.Attempts != 2 || d.WorkerID != "live" {
		t.Errorf("dispatch = %+v, want 2 attempts ending on live", d)
	}
	if live.calls.Load() != 1 {
		t.Errorf("live executions = %d", live.calls.Load())
	}
}

func TestNoReplicaLeftAfterDeadPort(t *testing.T) {
	ctx := testContext(t)
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("dead", deadAddress(t), "text", echoTool("echo")))
	res, d := call(ctx, t, r, "echo", `{}`)
	if res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "unreachable") || d.Attempts != 1 {
		t.Errorf("result = %+v, dispatch %+v", res, d)
	}
}

func TestDrainingWorkerAnswerIsResent(t *testing.T) {
	ctx := testContext(t)
	draining := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		st, _ := status.New(codes.Unavailable, "worker is draining").WithDetails(&errdetails.ErrorInfo{Reason: wire.ReasonName(toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING), Domain: "toolmesh.dev"})
		return nil, st.Err()
	})
	live := startFake(t, answering("live"))
	r := newRouter(t, Options{EjectAfter: 1})
	mustRegister(t, r, registration("draining", draining.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("live", live.addr, "text", echoTool("echo")))
	workerOf(t, r, "live").calls.Store(1000)

	res, d := call(ctx, t, r, "echo", `{}`)
	if res.IsError() || res.Content != "live" || d.Attempts != 2 || d.WorkerID != "live" {
		t.Errorf("result = %+v, dispatch %+v", res, d)
	}
	if draining.calls.Load() != 1 {
		t.Errorf("draining worker saw %d calls", draining.calls.Load())
	}
	// A refusal to start is not a failure of the replica.
	if st := stateOf(r, "draining"); st != toolpb.WorkerState_WORKER_STATE_READY {
		t.Errorf("draining replica state = %v, want READY (not ejected)", st)
	}
}

func TestUnavailableWithoutDrainingReasonIsNotResent(t *testing.T) {
	ctx := testContext(t)
	failing := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return nil, status.Error(codes.Unavailable, "something broke")
	})
	live := startFake(t, answering("live"))
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("failing", failing.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("live", live.addr, "text", echoTool("echo")))
	workerOf(t, r, "live").calls.Store(1000)

	res, d := call(ctx, t, r, "echo", `{}`)
	if res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "outcome of tool 'echo' is unknown") || d.Attempts != 1 {
		t.Errorf("result = %+v, dispatch %+v", res, d)
	}
	if live.calls.Load() != 0 {
		t.Errorf("a call whose outcome is unknown was re-sent")
	}
}

func TestToolTimeout(t *testing.T) {
	ctx := testContext(t)
	block := func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	a, b := startFake(t, block), startFake(t, block)
	r := newRouter(t, Options{DefaultTimeout: 20 * time.Millisecond})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("own", tool.Timeout(30*time.Millisecond), tool.Idempotent()), echoTool("default")))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("own", tool.Timeout(30*time.Millisecond), tool.Idempotent()), echoTool("default")))

	for _, tc := range []struct{ name, after string }{{"own", "30ms"}, {"default", "20ms"}} {
		res, d := call(ctx, t, r, tc.name, `{}`)
		if res.Code != tool.CodeTimeout || !strings.Contains(res.Content, "timed out after "+tc.after) || !strings.Contains(res.Content, "outcome is unknown") {
			t.Errorf("%s: result = %+v", tc.name, res)
		}
		if d.Attempts != 1 {
			t.Errorf("%s: a timed-out call was re-sent (%d attempts)", tc.name, d.Attempts)
		}
	}
	// Each call reaches a worker at most once. It may reach none: on a loaded machine
	// the deadline can pass before the request leaves the orchestrator.
	if n := a.calls.Load() + b.calls.Load(); n > 2 {
		t.Errorf("executions = %d, want at most 2 (one per call)", n)
	}
}

func TestCallerCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	started := make(chan struct{})
	f := startFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	go func() { <-started; cancel() }()
	res, _ := call(ctx, t, r, "echo", `{}`)
	if res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "cancelled") {
		t.Errorf("result = %+v", res)
	}
}

// A replica that keeps failing is ejected for EjectFor, doubling while it keeps failing,
// and takes calls again when the time is up.
func TestEjectionAndReturn(t *testing.T) {
	ctx := testContext(t)
	var failing atomic.Bool
	failing.Store(true)
	flaky := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		if failing.Load() {
			return nil, status.Error(codes.Unavailable, "flaky")
		}
		return textResponse("flaky"), nil
	})
	live := startFake(t, answering("live"))
	r := newRouter(t, Options{EjectAfter: 2, EjectFor: time.Minute})
	now := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return now }
	mustRegister(t, r, registration("flaky", flaky.addr, "text", echoTool("echo", tool.Idempotent())))
	mustRegister(t, r, registration("live", live.addr, "text", echoTool("echo", tool.Idempotent())))
	workerOf(t, r, "live").calls.Store(1000) // flaky is the first choice whenever it is routable

	expect := func(step string, attempts int, state toolpb.WorkerState) {
		t.Helper()
		res, d := call(ctx, t, r, "echo", `{}`)
		if res.IsError() || d.Attempts != attempts {
			t.Errorf("%s: result %+v after %d attempts, want success after %d", step, res, d.Attempts, attempts)
		}
		if got := stateOf(r, "flaky"); got != state {
			t.Errorf("%s: flaky is %v, want %v", step, got, state)
		}
	}
	expect("first failure", 2, toolpb.WorkerState_WORKER_STATE_READY)
	expect("second failure ejects", 2, toolpb.WorkerState_WORKER_STATE_EJECTED)
	expect("ejected replica is skipped", 1, toolpb.WorkerState_WORKER_STATE_EJECTED)

	now = now.Add(time.Minute)
	expect("back after EjectFor, fails again: ejected for twice as long", 2, toolpb.WorkerState_WORKER_STATE_EJECTED)
	now = now.Add(time.Minute)
	expect("still ejected after one EjectFor", 1, toolpb.WorkerState_WORKER_STATE_EJECTED)
	// ListWorkers says until when; a worker in rotation has no such time.
	for _, w := range r.ListWorkers() {
		switch w.GetWorkerId() {
		case "flaky":
			if want := now.Add(time.Minute); !w.GetEjectedUntil().AsTime().Equal(want) {
				t.Errorf("flaky is listed as ejected until %v, want %v", w.GetEjectedUntil().AsTime(), want)
			}
		case "live":
			if w.GetEjectedUntil() != nil {
				t.Errorf("live is listed as ejected until %v", w.GetEjectedUntil().AsTime())
			}
		}
	}

	failing.Store(false)
	now = now.Add(time.Minute)
	res, d := call(ctx, t, r, "echo", `{}`)
	if res.Content != "flaky" || d.Attempts != 1 || d.WorkerID != "flaky" {
		t.Errorf("after the doubled stay: %+v via %+v, want flaky's answer", res, d)
	}
	if f := workerOf(t, r, "flaky"); f.failures != 0 {
		t.Errorf("a success left %d consecutive failures", f.failures)
	}
}

func TestEjectionDoublesUpToEightTimes(t *testing.T) {
	w := &worker{state: toolpb.WorkerState_WORKER_STATE_READY}
	base := time.Unix(0, 0)
	want := []time.Duration{0, 10, 20, 40, 80, 80, 80} // seconds of ejection after each failure
	for i, wantFor := range want {
		ejected := w.failed(base, 2, 10*time.Second)
		if ejected != (i >= 1) {
			t.Errorf("failure %d: ejected = %v", i+1, ejected)
		}
		if got := w.ejectedUntil.Sub(base); wantFor > 0 && got != wantFor*time.Second {
			t.Errorf("failure %d: ejected for %s, want %ds", i+1, got, wantFor)
		}
		if w.routable(base.Add(wantFor*time.Second-time.Nanosecond)) == (wantFor > 0) {
			t.Errorf("failure %d: routable just before the ejection ends", i+1)
		}
		if !w.routable(base.Add(wantFor * time.Second)) {
			t.Errorf("failure %d: not routable when the ejection ends", i+1)
		}
	}
	w.succeeded()
	if w.failed(base, 2, 10*time.Second) {
		t.Error("one failure after a success ejected the worker")
	}
}

// A worker whose registration is replaced (its stream broke and it registered again)
// keeps serving the calls it is running: they must finish, not be cut off.
func TestReplacedRegistrationLetsCallsInFlightFinish(t *testing.T) {
	ctx := testContext(t)
	started, release := newGate(), newGate()
	f := startFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		started.open()
		if err := release.wait(ctx); err != nil {
			return nil, err
		}
		return textResponse("finished"), nil
	})
	r := newRouter(t, Options{})
	lease := mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	done := make(chan tool.Result, 1)
	go func() {
		res, _ := call(ctx, t, r, "echo", `{}`)
		done <- res
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	lease.End() // the stream broke and the worker reconnects
	mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	release.open()
	if res := <-done; res.IsError() || res.Content != "finished" {
		t.Errorf("call in flight during re-registration = %+v, want its answer", res)
	}
}

// A draining worker leaves the table as soon as its stream ends, but the calls it was
// asked to finish must still come back.
func TestRemovedWorkerLetsCallsInFlightFinish(t *testing.T) {
	ctx := testContext(t)
	started, release := newGate(), newGate()
	f := startFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		started.open()
		if err := release.wait(ctx); err != nil {
			return nil, err
		}
		return textResponse("finished"), nil
	})
	r := newRouter(t, Options{})
	lease := mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	done := make(chan tool.Result, 1)
	go func() {
		res, _ := call(ctx, t, r, "echo", `{}`)
		done <- res
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	lease.Drain()
	lease.End()
	eventually(t, "the draining worker to leave", func() bool { return len(r.ListWorkers()) == 0 })
	release.open()
	if res := <-done; res.IsError() || res.Content != "finished" {
		t.Errorf("call in flight during removal = %+v, want its answer", res)
	}
}

// A stub handed out before a worker re-registered (for example a run's tools, resolved
// at its start) must route to the re-registered worker.
func TestStubSurvivesReRegistration(t *testing.T) {
	ctx := testContext(t)
	f := startFake(t, answering("ok"))
	r := newRouter(t, Options{GracePeriod: time.Minute})
	lease := mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	stub, err := r.Tool("echo")
	if err != nil {
		t.Fatal(err)
	}
	_, groupTools, _ := r.Group("text")
	lease.End()
	mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	for _, s := range []tool.Tool{stub, groupTools[0]} {
		if res, err := s.Call(ctx, `{}`); err != nil || res.IsError() || res.Content != "ok" {
			t.Errorf("old stub after re-registration: %+v, %v", res, err)
		}
	}
}

// A stub must not send calls to a tool that was re-registered with another definition:
// the model built its arguments from the old one.
func TestStubRefusesChangedDefinition(t *testing.T) {
	ctx := testContext(t)
	f := startFake(t, answering("ok"))
	r := newRouter(t, Options{})
	lease := mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo")))
	stub, _ := r.Tool("echo")
	lease.End()
	mustRegister(t, r, registration("a", f.addr, "text", echoTool("echo", tool.Idempotent())))
	res, _ := stub.Call(ctx, `{}`)
	if !res.IsError() || res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "changed") {
		t.Errorf("call through a stale stub = %+v, want an error saying the tool changed", res)
	}
	if f.calls.Load() != 0 {
		t.Errorf("the changed tool was called")
	}
}

// A router given a bare Dial (none of DialOptions) still tells a call that left from
// one that did not: a non-idempotent call that failed in flight is not re-sent.
func TestCustomDialDoesNotResend(t *testing.T) {
	ctx := testContext(t)
	started := newGate()
	dying := startFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		started.open()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	live := startFake(t, answering("live"))
	r := newRouter(t, Options{Dial: func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}})
	mustRegister(t, r, registration("dying", dying.addr, "text", echoTool("charge")))
	mustRegister(t, r, registration("live", live.addr, "text", echoTool("charge")))
	workerOf(t, r, "live").calls.Store(1000)
	go func() {
		if started.wait(ctx) == nil {
			dying.srv.Stop()
		}
	}()
	res, _ := call(ctx, t, r, "charge", `{}`)
	if res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "outcome") {
		t.Errorf("result = %+v, want outcome unknown", res)
	}
	if live.calls.Load() != 0 {
		t.Errorf("non-idempotent call re-sent to another replica")
	}
}

// A call that finds every replica at its in-flight bound is not sent: it fails at once
// with an error the model reads, and the replicas never see it; a replica with room
// takes calls while the other is full.
func TestInFlightBoundFailsFast(t *testing.T) {
	ctx := testContext(t)
	release := newGate()
	hold := func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		if err := release.wait(ctx); err != nil {
			return nil, err
		}
		return textResponse("ok"), nil
	}
	a, b := startFake(t, hold), startFake(t, hold)
	r := newRouter(t, Options{MaxInFlightPerWorker: 2})
	mustRegister(t, r, registration("a", a.addr, "text", echoTool("echo")))
	mustRegister(t, r, registration("b", b.addr, "text", echoTool("echo")))
	results := make(chan tool.Result, 4)
	for range 4 {
		go func() {
			tl, _ := r.Tool("echo")
			res, _ := tl.Call(ctx, `{}`)
			results <- res
		}()
	}
	for a.calls.Load()+b.calls.Load() < 4 {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d calls reached the replicas", a.calls.Load()+b.calls.Load())
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	res, d := call(ctx, t, r, "echo", `{}`)
	if !res.IsError() || res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "router.max_in_flight_per_worker") || d.Attempts != 0 {
		t.Errorf("a call over the bound = %+v (%d attempts), want a fast refusal", res, d.Attempts)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the refusal took %s", el)
	}
	if n := a.calls.Load() + b.calls.Load(); n != 4 {
		t.Errorf("the replicas saw %d calls, want 4 (the refused one never left)", n)
	}
	release.open()
	for range 4 {
		if res := <-results; res.IsError() {
			t.Errorf("a call within the bound failed: %+v", res)
		}
	}
	// A declared capacity bounds it too: 4 × capacity.
	w := &worker{capacity: 3}
	if got := w.limit(1024); got != 12 {
		t.Errorf("limit with capacity 3 = %d, want 12", got)
	}
}
