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
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"max iterations", fmt.Errorf("run: %w", &loop.MaxIterationsError{Max: 3}), codes.ResourceExhausted, ReasonMaxIterations},
		{"tool not found", &loop.ToolNotFoundError{}, codes.FailedPrecondition, ReasonToolNotFound},
		{"tool signal", &loop.SignalError{Tool: "t", Signal: errors.New("stop")}, codes.Aborted, ReasonToolSignal},
		{"empty response", loop.ErrEmptyResponse, codes.FailedPrecondition, ReasonEmptyResponse},
		{"cancelled by CancelRun", fmt.Errorf("%w: because", errCancelled), codes.Canceled, ReasonCancelled},
		{"run deadline", context.DeadlineExceeded, codes.DeadlineExceeded, ReasonRunTimeout},
		{"client went away", context.Canceled, codes.Canceled, ReasonCancelled},
		{"model error", &loop.ModelError{Iteration: 1, Err: errors.New("503")}, codes.Unavailable, ReasonModelError},
		// A provider's own request timeout is the provider failing, not the run timing out.
		{"model error wrapping a deadline", &loop.ModelError{Iteration: 2, Err: fmt.Errorf("http: %w", context.DeadlineExceeded)}, codes.Unavailable, ReasonModelError},
		{"unknown group", router.ErrUnknownGroup, codes.NotFound, ReasonUnknownGroup},
		{"unknown tool", router.ErrUnknownTool, codes.NotFound, ReasonUnknownTool},
		{"anything else", errors.New("boom"), codes.Internal, ReasonInternal},
	}
	for _, tc := range cases {
		code, reason := classify(tc.err)
		if code != tc.code || reason != tc.reason {
			t.Errorf("%s: classify(%v) = %v, %s; want %v, %s", tc.name, tc.err, code, reason, tc.code, tc.reason)
		}
	}
}

// Every reason the server sends maps to its sentinel in pkg/client, so that errors.Is
// works across the hop.
func TestReasonsMatchClientSentinels(t *testing.T) {
	for reason, sentinel := range map[string]error{
		ReasonInvalidRequest: client.ErrInvalidRequest,
		ReasonUnknownGroup:   client.ErrUnknownGroup,
		ReasonUnknownTool:    client.ErrUnknownTool,
		ReasonMaxIterations:  client.ErrMaxIterations,
		ReasonToolNotFound:   client.ErrToolNotFound,
		ReasonModelError:     client.ErrModel,
		ReasonEmptyResponse:  client.ErrEmptyResponse,
		ReasonToolSignal:     client.ErrToolSignal,
		ReasonCancelled:      client.ErrCancelled,
		ReasonRunTimeout:     client.ErrRunTimeout,
		ReasonRunExists:      client.ErrRunExists,
		ReasonRunNotFound:    client.ErrRunNotFound,
		ReasonOverloaded:     client.ErrOverloaded,
		ReasonShuttingDown:   client.ErrShuttingDown,
	} {
		if !errors.Is(&client.Error{Reason: reason}, sentinel) {
			t.Errorf("client.Error{Reason: %s} does not match %v", reason, sentinel)
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

func TestRecoveryInterceptors(t *testing.T) {
	ctx := testContext(t)
	lis := bufconn.Listen(1 << 16)
	g := grpc.NewServer(RecoveryInterceptors(discard())...)
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
	if codeOf(err) != codes.Internal || !strings.Contains(err.Error(), "ListTools") {
		t.Errorf("panicking unary handler: %v, want Internal naming the method", err)
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
}

func TestRunStoreRetention(t *testing.T) {
	s := newRunStore(2, 2)
	nop := func(error) {}
	a, _ := s.start("a", nop)
	b, _ := s.start("b", nop)
	if _, code := s.start("c", nop); code != startFull {
		t.Fatalf("third live run: %v, want startFull", code)
	}
	if _, code := s.start("a", nop); code != startExists {
		t.Fatalf("live id again: %v, want startExists", code)
	}
	s.finish(a)
	s.finish(b)
	c, _ := s.start("c", nop)
	s.finish(c) // retains b and c; a is forgotten
	if s.get("a") != nil || s.get("b") != b || s.get("c") != c {
		t.Fatalf("after three runs with retention 2: a=%p b=%p c=%p", s.get("a"), s.get("b"), s.get("c"))
	}

	// Reusing the id of a retained finished run replaces it, and the old run's eviction
	// later must not forget the new one.
	b2, code := s.start("b", nop)
	if code != startOK || s.get("b") != b2 {
		t.Fatalf("reusing a finished id: %v", code)
	}
	d, _ := s.start("d", nop)
	s.finish(d)
	e, _ := s.start("e", nop)
	s.finish(e) // retains d and e
	if s.get("b") != b2 {
		t.Fatal("the live run b was forgotten when older runs were evicted")
	}
	s.finish(b2)
	if s.liveCount() != 0 || s.get("b") != b2 || s.get("c") != nil {
		t.Errorf("live %d, b=%p (want %p), c=%p", s.liveCount(), s.get("b"), b2, s.get("c"))
	}

	// Retention zero: finished runs are forgotten at once.
	z := newRunStore(1, 0)
	r, _ := z.start("x", nop)
	z.finish(r)
	if z.get("x") != nil {
		t.Error("retain 0 kept a finished run")
	}
}
