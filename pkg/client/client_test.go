package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// withInfo builds a status with an ErrorInfo (and optionally a BadRequest) detail, the
// way the orchestrator does.
func withInfo(code codes.Code, msg, reason string, meta map[string]string, violations ...string) error {
	st := status.New(code, msg)
	var details []protoadapt.MessageV1
	if reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: "toolmesh.dev", Metadata: meta})
	}
	if len(violations) > 0 {
		br := &errdetails.BadRequest{}
		for _, f := range violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: f, Description: "bad"})
		}
		details = append(details, br)
	}
	if len(details) > 0 {
		var err error
		if st, err = st.WithDetails(details...); err != nil {
			panic(err)
		}
	}
	return st.Err()
}

func TestConvert(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		sentinel error // nil: matches no sentinel
		want     *Error
		same     bool // the error is passed through unchanged
	}{
		{name: "invalid request", err: withInfo(codes.InvalidArgument, "prompt: is empty", "INVALID_REQUEST", map[string]string{"field": "prompt"}, "prompt"),
			sentinel: ErrInvalidRequest, want: &Error{Code: codes.InvalidArgument, Reason: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST, Message: "prompt: is empty", Field: "prompt"}},
		{name: "field from BadRequest only", err: withInfo(codes.InvalidArgument, "bad", "INVALID_REQUEST", nil, "limits.timeout", "other"),
			sentinel: ErrInvalidRequest, want: &Error{Code: codes.InvalidArgument, Reason: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST, Message: "bad", Field: "limits.timeout"}},
		{name: "ErrorInfo field wins", err: withInfo(codes.InvalidArgument, "bad", "INVALID_REQUEST", map[string]string{"field": "run_id"}, "prompt"),
			sentinel: ErrInvalidRequest, want: &Error{Code: codes.InvalidArgument, Reason: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST, Message: "bad", Field: "run_id"}},
		{name: "unknown group", err: withInfo(codes.NotFound, "no", "UNKNOWN_TOOL_GROUP", map[string]string{"field": "tool_groups[1]"}),
			sentinel: ErrUnknownGroup, want: &Error{Code: codes.NotFound, Reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP, Message: "no", Field: "tool_groups[1]"}},
		{name: "unknown tool", err: withInfo(codes.NotFound, "no", "UNKNOWN_TOOL", map[string]string{"field": "tools[0]"}),
			sentinel: ErrUnknownTool, want: &Error{Code: codes.NotFound, Reason: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL, Message: "no", Field: "tools[0]"}},
		{name: "max iterations", err: withInfo(codes.ResourceExhausted, "too many", "MAX_ITERATIONS", map[string]string{"run_id": "r1"}),
			sentinel: ErrMaxIterations, want: &Error{Code: codes.ResourceExhausted, Reason: toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS, Message: "too many", RunID: "r1"}},
		{name: "tool not found", err: withInfo(codes.FailedPrecondition, "m", "TOOL_NOT_FOUND", nil), sentinel: ErrToolNotFound,
			want: &Error{Code: codes.FailedPrecondition, Reason: toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND, Message: "m"}},
		{name: "model", err: withInfo(codes.Unavailable, "m", "MODEL_ERROR", nil), sentinel: ErrModel, want: &Error{Code: codes.Unavailable, Reason: toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR, Message: "m"}},
		{name: "empty response", err: withInfo(codes.FailedPrecondition, "m", "EMPTY_RESPONSE", nil), sentinel: ErrEmptyResponse, want: &Error{Code: codes.FailedPrecondition, Reason: toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE, Message: "m"}},
		{name: "tool signal", err: withInfo(codes.Aborted, "m", "TOOL_SIGNAL", nil), sentinel: ErrToolSignal, want: &Error{Code: codes.Aborted, Reason: toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL, Message: "m"}},
		{name: "cancelled run", err: withInfo(codes.Canceled, "run cancelled: x", "CANCELLED", map[string]string{"run_id": "r2"}), sentinel: ErrCancelled,
			want: &Error{Code: codes.Canceled, Reason: toolpb.ErrorReason_ERROR_REASON_CANCELLED, Message: "run cancelled: x", RunID: "r2"}},
		{name: "run timeout", err: withInfo(codes.DeadlineExceeded, "m", "RUN_TIMEOUT", nil), sentinel: ErrRunTimeout, want: &Error{Code: codes.DeadlineExceeded, Reason: toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT, Message: "m"}},
		{name: "run exists", err: withInfo(codes.AlreadyExists, "m", "RUN_EXISTS", map[string]string{"field": "run_id"}), sentinel: ErrRunExists,
			want: &Error{Code: codes.AlreadyExists, Reason: toolpb.ErrorReason_ERROR_REASON_RUN_EXISTS, Message: "m", Field: "run_id"}},
		{name: "run not found", err: withInfo(codes.NotFound, "m", "RUN_NOT_FOUND", nil), sentinel: ErrRunNotFound, want: &Error{Code: codes.NotFound, Reason: toolpb.ErrorReason_ERROR_REASON_RUN_NOT_FOUND, Message: "m"}},
		{name: "overloaded", err: withInfo(codes.ResourceExhausted, "m", "OVERLOADED", nil), sentinel: ErrOverloaded, want: &Error{Code: codes.ResourceExhausted, Reason: toolpb.ErrorReason_ERROR_REASON_OVERLOADED, Message: "m"}},
		{name: "shutting down", err: withInfo(codes.Unavailable, "m", "SHUTTING_DOWN", nil), sentinel: ErrShuttingDown, want: &Error{Code: codes.Unavailable, Reason: toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN, Message: "m"}},
		{name: "unknown reason", err: withInfo(codes.Internal, "m", "SOMETHING_NEW", nil), want: &Error{Code: codes.Internal, Message: "m"}},
		{name: "plain status", err: status.Error(codes.Unavailable, "connection refused"), want: &Error{Code: codes.Unavailable, Message: "connection refused"}},
		{name: "context canceled", err: context.Canceled, same: true},
		{name: "context deadline", err: context.DeadlineExceeded, same: true},
		{name: "wrapped context error", err: fmt.Errorf("recv: %w", context.Canceled), same: true},
		{name: "not a status", err: errors.New("plain"), same: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := convert(tc.err)
			if tc.same {
				if got != tc.err {
					t.Fatalf("convert(%v) = %#v, want it unchanged", tc.err, got)
				}
				return
			}
			var e *Error
			if !errors.As(got, &e) {
				t.Fatalf("convert(%v) = %#v, not an *Error", tc.err, got)
			}
			if !plainEqual(*e, *tc.want) {
				t.Errorf("convert = %#v, want %#v", e, tc.want)
			}
			// The status the orchestrator sent, details and all, is what gRPC sees.
			if want := status.Convert(tc.err); !proto.Equal(status.Convert(got).Proto(), want.Proto()) {
				t.Errorf("status.Convert(convert(err)) = %v, want %v", status.Convert(got).Proto(), want.Proto())
			}
			for _, s := range sentinels {
				if errors.Is(got, s) != (s == tc.sentinel) {
					t.Errorf("errors.Is(err, %q) = %v", s, s != tc.sentinel)
				}
			}
			if status.Code(got) != tc.want.Code {
				t.Errorf("status.Code = %v, want %v", status.Code(got), tc.want.Code)
			}
			if e.Error() != fmt.Sprintf("%s: %s", tc.want.Code, tc.want.Message) {
				t.Errorf("Error() = %q", e.Error())
			}
		})
	}
	if convert(nil) != nil {
		t.Error("convert(nil) != nil")
	}
}

// TestEveryReason goes over every error reason of the contract: the orchestrator's
// table gives each a status code, the client a sentinel, and a status built for it
// comes back through convert with its reason, code, run id and retry delay, matching
// its own sentinel and no other.
func TestEveryReason(t *testing.T) {
	for v, name := range toolpb.ErrorReason_name {
		r := toolpb.ErrorReason(v)
		if r == toolpb.ErrorReason_ERROR_REASON_UNSPECIFIED {
			continue
		}
		t.Run(name, func(t *testing.T) {
			info, ok := wire.Reasons[r]
			if !ok {
				t.Fatalf("wire.Reasons has no entry for %s", name)
			}
			if sentinels[r] == nil {
				t.Fatalf("the client has no sentinel for %s", name)
			}
			got := convert(wire.Error{Reason: r, Message: "m", Metadata: map[string]string{"run_id": "r1"}}.Err())
			var e *Error
			if !errors.As(got, &e) {
				t.Fatalf("convert = %#v, not an *Error", got)
			}
			want := &Error{Code: info.Code, Reason: r, Message: "m", RunID: "r1", RetryAfter: info.RetryAfter}
			if plain := *e; !plainEqual(plain, *want) {
				t.Errorf("convert = %#v, want %#v", e, want)
			}
			if e.Retryable() != (info.RetryAfter > 0) {
				t.Errorf("Retryable() = %v", e.Retryable())
			}
			for other, s := range sentinels {
				if errors.Is(got, s) != (other == r) {
					t.Errorf("errors.Is(err, %q) = %v", s, other != r)
				}
			}
		})
	}
	if len(wire.Reasons) != len(toolpb.ErrorReason_name)-1 || len(sentinels) != len(wire.Reasons) {
		t.Errorf("%d reasons in the contract, %d in wire.Reasons, %d sentinels", len(toolpb.ErrorReason_name)-1, len(wire.Reasons), len(sentinels))
	}
	retried := wire.Error{Reason: toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE, Message: "m", RetryAfter: 7 * time.Second}.Err()
	if e := new(Error); !errors.As(convert(retried), &e) || e.RetryAfter != 7*time.Second {
		t.Errorf("a status's own retry delay = %v, want 7s", e.RetryAfter)
	}
}

func TestConvertCtx(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()

	clientCancel := status.Error(codes.Canceled, "context canceled")
	clientDeadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	serverCancel := withInfo(codes.Canceled, "run cancelled: x", "CANCELLED", nil)

	if err := convertCtx(cancelled, clientCancel); !errors.Is(err, context.Canceled) {
		t.Errorf("own cancellation = %#v, want context.Canceled", err)
	}
	if err := convertCtx(expired, clientDeadline); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("own deadline = %#v, want context.DeadlineExceeded", err)
	}
	// A run the orchestrator cancelled stays an *Error even if the caller gave up too.
	if err := convertCtx(cancelled, serverCancel); !errors.Is(err, ErrCancelled) {
		t.Errorf("server cancellation with a cancelled ctx = %#v, want ErrCancelled", err)
	}
	// With a live context a Canceled status is the server's.
	if err := convertCtx(live, clientCancel); errors.Is(err, context.Canceled) {
		t.Errorf("Canceled status with a live ctx = %#v, must not look like the caller's cancellation", err)
	}
	if err := convertCtx(cancelled, status.Error(codes.Unavailable, "down")); status.Code(err) != codes.Unavailable {
		t.Errorf("unrelated status = %v", err)
	}
	// The server enforces the propagated deadline and may report it before ctx ends.
	soon, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	if err := convertCtx(soon, clientDeadline); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline status with a deadline not yet passed = %#v, want context.DeadlineExceeded", err)
	}
	if err := convertCtx(live, clientDeadline); errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline status without a deadline = %#v, want an *Error", err)
	}
	if convertCtx(cancelled, nil) != nil {
		t.Error("convertCtx(ctx, nil) != nil")
	}
}

// fakeOrchestrator serves canned answers.
type fakeOrchestrator struct {
	toolpb.UnimplementedOrchestratorServiceServer
	events []*toolpb.RunResponse
	end    error
	block  bool // after the events, wait for the client to go away
	got    chan *toolpb.RunRequest
	// gone is closed when a Run call's context ends, if set.
	gone chan struct{}
}

func (f *fakeOrchestrator) Run(req *toolpb.RunRequest, stream toolpb.OrchestratorService_RunServer) error {
	if f.got != nil {
		f.got <- req
	}
	if f.gone != nil {
		defer func() { <-stream.Context().Done(); close(f.gone) }()
	}
	for _, ev := range f.events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if f.block {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return f.end
}

func (f *fakeOrchestrator) GetRun(_ context.Context, req *toolpb.GetRunRequest) (*toolpb.GetRunResponse, error) {
	if req.GetRunId() != "r1" {
		return nil, withInfo(codes.NotFound, "no run", "RUN_NOT_FOUND", map[string]string{"field": "run_id"})
	}
	return &toolpb.GetRunResponse{RunId: "r1", State: toolpb.RunState_RUN_STATE_SUCCEEDED}, nil
}

func (f *fakeOrchestrator) CancelRun(_ context.Context, req *toolpb.CancelRunRequest) (*toolpb.CancelRunResponse, error) {
	if req.GetReason() != "why" {
		return nil, status.Error(codes.InvalidArgument, "reason not passed")
	}
	return &toolpb.CancelRunResponse{State: toolpb.RunState_RUN_STATE_CANCELLED}, nil
}

func (f *fakeOrchestrator) ListTools(_ context.Context, req *toolpb.ListToolsRequest) (*toolpb.ListToolsResponse, error) {
	var out []*toolpb.ToolInfo
	for _, g := range req.GetToolGroups() {
		out = append(out, &toolpb.ToolInfo{Group: g})
	}
	return &toolpb.ListToolsResponse{Tools: out}, nil
}

func (f *fakeOrchestrator) ListToolGroups(context.Context, *toolpb.ListToolGroupsRequest) (*toolpb.ListToolGroupsResponse, error) {
	return &toolpb.ListToolGroupsResponse{Groups: []*toolpb.ToolGroupStatus{{Tools: []string{"add"}}}}, nil
}

func (f *fakeOrchestrator) ListWorkers(context.Context, *toolpb.ListWorkersRequest) (*toolpb.ListWorkersResponse, error) {
	return nil, withInfo(codes.Unavailable, "down", "SHUTTING_DOWN", nil)
}

// serve starts f on bufconn and returns a Client of it.
func serve(t *testing.T, f *fakeOrchestrator) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	g := grpc.NewServer()
	toolpb.RegisterOrchestratorServiceServer(g, f)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	c, err := Dial("passthrough:///bufnet", insecure.NewCredentials(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		g.Stop()
		<-served
	})
	return c
}

func events() []*toolpb.RunResponse {
	return []*toolpb.RunResponse{
		{RunId: "r1", Sequence: 1, Event: &toolpb.RunResponse_Started{Started: &toolpb.RunStarted{Model: "scripted/x"}}},
		{RunId: "r1", Sequence: 2, Event: &toolpb.RunResponse_Usage{Usage: &toolpb.Usage{InputTokens: 3}}},
		{RunId: "r1", Sequence: 3, Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{Text: "done", Iterations: 1}}},
	}
}

func TestRunAndWait(t *testing.T) {
	ctx := testContext(t)
	f := &fakeOrchestrator{events: events(), got: make(chan *toolpb.RunRequest, 1)}
	c := serve(t, f)
	var seen []int64
	final, err := c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", RunId: "r1"}, func(ev *toolpb.RunResponse) { seen = append(seen, ev.GetSequence()) })
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != "done" || final.GetIterations() != 1 {
		t.Errorf("final = %v", final)
	}
	if fmt.Sprint(seen) != "[1 2 3]" {
		t.Errorf("onEvent saw %v, want [1 2 3]", seen)
	}
	if req := <-f.got; req.GetPrompt() != "hi" || req.GetRunId() != "r1" {
		t.Errorf("server got %v", req)
	}
	// onEvent may be nil.
	if _, err := c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi"}, nil); err != nil {
		t.Errorf("nil onEvent: %v", err)
	}
	<-f.got
}

func TestRunAndWaitError(t *testing.T) {
	ctx := testContext(t)
	evs := events()[:2]
	evs = append(evs, &toolpb.RunResponse{RunId: "r1", Sequence: 3, Event: &toolpb.RunResponse_Error{Error: &toolpb.RunError{Reason: toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS}}})
	c := serve(t, &fakeOrchestrator{events: evs, end: withInfo(codes.ResourceExhausted, "loop", "MAX_ITERATIONS", map[string]string{"run_id": "r1"})})
	var n int
	final, err := c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi"}, func(*toolpb.RunResponse) { n++ })
	var e *Error
	if final != nil || !errors.Is(err, ErrMaxIterations) || !errors.As(err, &e) || e.RunID != "r1" {
		t.Fatalf("RunAndWait = %v, %#v; want ErrMaxIterations for r1", final, err)
	}
	if n != 3 {
		t.Errorf("onEvent called %d times, want 3 (the error event too)", n)
	}
}

func TestRunAndWaitNoFinalResult(t *testing.T) {
	ctx := testContext(t)
	c := serve(t, &fakeOrchestrator{events: events()[:2]})
	if _, err := c.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi"}, nil); err == nil {
		t.Error("a stream that ended OK without a final result was accepted")
	}
}

func TestRunCallerCancels(t *testing.T) {
	ctx := testContext(t)
	c := serve(t, &fakeOrchestrator{events: events()[:1], block: true})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err := c.RunAndWait(rctx, &toolpb.RunRequest{Prompt: "hi"}, func(*toolpb.RunResponse) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RunAndWait after the caller cancelled = %#v, want context.Canceled", err)
	}

	dctx, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	_, err = c.RunAndWait(dctx, &toolpb.RunRequest{Prompt: "hi"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RunAndWait past the caller's deadline = %#v, want context.DeadlineExceeded", err)
	}
}

func TestRunStopsWhenTheConsumerBreaks(t *testing.T) {
	ctx := testContext(t)
	c := serve(t, &fakeOrchestrator{events: events(), block: true})
	n := 0
	for ev, err := range c.Run(ctx, &toolpb.RunRequest{Prompt: "hi"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if ev.GetSequence() == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("iterated %d events, want 2", n)
	}
	// goleak (TestMain) checks the stream's goroutines are gone once ctx ends.
}

func TestUnaryCalls(t *testing.T) {
	ctx := testContext(t)
	c := serve(t, &fakeOrchestrator{})

	if r, err := c.GetRun(ctx, "r1"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("GetRun(r1) = %v, %v", r, err)
	}
	var e *Error
	if _, err := c.GetRun(ctx, "r2"); !errors.Is(err, ErrRunNotFound) || !errors.As(err, &e) || e.Field != "run_id" {
		t.Errorf("GetRun(r2) = %#v, want ErrRunNotFound", err)
	}
	if st, err := c.CancelRun(ctx, "r1", "why"); err != nil || st != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("CancelRun = %v, %v", st, err)
	}
	if st, err := c.CancelRun(ctx, "r1", ""); status.Code(err) != codes.InvalidArgument || st != toolpb.RunState_RUN_STATE_UNSPECIFIED {
		t.Errorf("CancelRun without reason = %v, %v", st, err)
	}
	if tools, err := c.ListTools(ctx, "a", "b"); err != nil || len(tools) != 2 || tools[1].GetGroup() != "b" {
		t.Errorf("ListTools(a, b) = %v, %v", tools, err)
	}
	if groups, err := c.ListToolGroups(ctx); err != nil || len(groups) != 1 {
		t.Errorf("ListToolGroups = %v, %v", groups, err)
	}
	if _, err := c.ListWorkers(ctx); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("ListWorkers = %#v, want ErrShuttingDown", err)
	}
}

func TestNewDoesNotOwnTheConnection(t *testing.T) {
	c := New(nil)
	if err := c.Close(); err != nil {
		t.Errorf("Close of a client made by New = %v", err)
	}
}

// TestLeavingTheRunLoopCancelsTheCall: breaking out of the range over Run ends the call,
// so the orchestrator sees the client go away (and cancels the run) instead of running it
// to its end with the stream open.
func TestLeavingTheRunLoopCancelsTheCall(t *testing.T) {
	ctx := testContext(t)
	f := &fakeOrchestrator{events: events(), block: true, gone: make(chan struct{})}
	c := serve(t, f)
	n := 0
	for ev, err := range c.Run(ctx, &toolpb.RunRequest{Prompt: "hi"}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; ev.GetStarted() != nil {
			break
		}
	}
	select {
	case <-f.gone:
	case <-ctx.Done():
		t.Fatal("the orchestrator's stream is still open after the loop was left")
	}
	if n != 1 {
		t.Errorf("%d events before the break, want 1", n)
	}
}

// plainEqual compares two errors' exported fields.
func plainEqual(a, b Error) bool {
	a.st, b.st = nil, nil
	return a == b
}
