package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason toolpb.ErrorReason
	}{
		{"max iterations", fmt.Errorf("run: %w", &loop.MaxIterationsError{Max: 3}), codes.ResourceExhausted, toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS},
		{"tool not found", &loop.ToolNotFoundError{}, codes.FailedPrecondition, toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND},
		{"tool signal", &loop.SignalError{Tool: "t", Signal: errors.New("stop")}, codes.Aborted, toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL},
		{"empty response", loop.ErrEmptyResponse, codes.FailedPrecondition, toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE},
		{"cancelled by CancelRun", fmt.Errorf("%w: because", run.ErrCancelled), codes.Canceled, toolpb.ErrorReason_ERROR_REASON_CANCELLED},
		{"run deadline", context.DeadlineExceeded, codes.DeadlineExceeded, toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT},
		{"client went away", context.Canceled, codes.Canceled, toolpb.ErrorReason_ERROR_REASON_CANCELLED},
		{"model error", &loop.ModelError{Iteration: 1, Err: errors.New("503")}, codes.Unavailable, toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR},
		// A provider's own request timeout is the provider failing, not the run timing out.
		{"model error wrapping a deadline", &loop.ModelError{Iteration: 2, Err: fmt.Errorf("http: %w", context.DeadlineExceeded)}, codes.Unavailable, toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR},
		{"unknown group", router.ErrUnknownGroup, codes.NotFound, toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP},
		{"unknown tool", router.ErrUnknownTool, codes.NotFound, toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL},
		{"anything else", errors.New("boom"), codes.Internal, toolpb.ErrorReason_ERROR_REASON_INTERNAL},
	}
	for _, tc := range cases {
		reason := classify(tc.err)
		if code := wire.Reasons[reason].Code; code != tc.code || reason != tc.reason {
			t.Errorf("%s: classify(%v) = %s (%v); want %s (%v)", tc.name, tc.err, reason, code, tc.reason, tc.code)
		}
	}
}

// panicky panics in a unary and a streaming handler.
type panicky struct {
	toolpb.UnimplementedOrchestratorServiceServer
}

func (panicky) ListTools(context.Context, *toolpb.ListToolsRequest) (*toolpb.ListToolsResponse, error) {
	panic("boom")
}

func (panicky) Run(*toolpb.RunRequest, toolpb.OrchestratorService_RunServer) error {
	panic(tool.Result{})
}

// WatchRun says whether its stream's context is marked as one of a server that sends
// encoded events as they are (PortOptions).
func (panicky) WatchRun(_ *toolpb.WatchRunRequest, stream grpc.ServerStreamingServer[toolpb.RunResponse]) error {
	marked, _ := stream.Context().Value(codecMarked{}).(bool)
	return status.Errorf(codes.FailedPrecondition, "marked=%v", marked)
}

// TestRecoveryInterceptors: a panicking handler answers INTERNAL and the server lives on,
// under RecoveryInterceptors and under PortOptions, whose one stream interceptor also
// marks the streams' codec.
func TestRecoveryInterceptors(t *testing.T) {
	t.Run("RecoveryInterceptors", func(t *testing.T) { testRecovery(t, RecoveryInterceptors(discard()), false) })
	t.Run("PortOptions", func(t *testing.T) { testRecovery(t, PortOptions(config.Default(), discard()), true) })
}

func testRecovery(t *testing.T, opts []grpc.ServerOption, marks bool) {
	ctx := testContext(t)
	lis := bufconn.Listen(1 << 16)
	g := grpc.NewServer(opts...)
	toolpb.RegisterOrchestratorServiceServer(g, panicky{})
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	defer func() { g.Stop(); <-served }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	c := toolpb.NewOrchestratorServiceClient(conn)

	_, err = c.ListTools(ctx, &toolpb.ListToolsRequest{})
	if codeOf(err) != codes.Internal || !strings.Contains(err.Error(), "ListTools") || reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_INTERNAL {
		t.Errorf("panicking unary handler: %v, want Internal naming the method, reason INTERNAL", err)
	}
	stream, err := c.Run(ctx, &toolpb.RunRequest{Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if codeOf(err) != codes.Internal || !strings.Contains(err.Error(), "Run") {
		t.Errorf("panicking stream handler: %v, want Internal naming the method", err)
	}
	// The server survived both.
	_, err = c.ListTools(ctx, &toolpb.ListToolsRequest{})
	if codeOf(err) != codes.Internal {
		t.Errorf("after the panics: %v", err)
	}
	watch, err := c.WatchRun(ctx, &toolpb.WatchRunRequest{RunId: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = watch.Recv(); !strings.Contains(fmt.Sprint(err), fmt.Sprintf("marked=%v", marks)) {
		t.Errorf("a stream's context: %v, want marked=%v", err, marks)
	}
}

// TestEveryKindHasItsReason: the run service's error kinds and the API's reasons are one
// to one, each kind named as its reason is, so that a run's error.type on spans and the
// reason a client reads agree.
func TestEveryKindHasItsReason(t *testing.T) {
	seen := map[toolpb.ErrorReason]run.ErrorKind{}
	for _, k := range run.Kinds() {
		r, ok := reasons[k]
		if !ok {
			t.Errorf("kind %s has no reason", k)
			continue
		}
		if wire.ReasonName(r) != k.String() {
			t.Errorf("kind %s maps to reason %s", k, wire.ReasonName(r))
		}
		if other, dup := seen[r]; dup {
			t.Errorf("kinds %s and %s map to one reason", other, k)
		}
		seen[r] = k
	}
	if len(reasons) != len(run.Kinds()) {
		t.Errorf("%d reasons for %d kinds", len(reasons), len(run.Kinds()))
	}
}
