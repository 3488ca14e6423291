package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// ReasonDraining is the ErrorInfo reason of the UNAVAILABLE status a draining worker
// answers new calls with. The call never ran, so the orchestrator sends it elsewhere.
const ReasonDraining = wire.ReasonDraining

// invoker serves ToolWorkerService.
type invoker struct {
	toolpb.UnimplementedToolWorkerServiceServer
	w *Worker
}

// Invoke runs one tool call. Tool failures, unknown tools and bad arguments are answered
// as error outcomes (the worker did its job: the model should hear about them); gRPC
// errors are reserved for calls the worker did not run.
func (s *invoker) Invoke(ctx context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	w := s.w
	if !w.beginCall() {
		return nil, drainingStatus()
	}
	defer w.endCall()
	if w.slots != nil {
		select {
		case w.slots <- struct{}{}:
			defer func() { <-w.slots }()
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-w.drainCh:
			return nil, drainingStatus()
		}
	}
	w.active.Add(1)
	defer w.active.Add(-1)

	t, ok := w.tools[req.GetTool()]
	if !ok {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeUnknownTool, fmt.Sprintf("tool '%s' is not served by worker %s", req.GetTool(), w.opts.ID)))
	}
	args, err := t.Definition().InputSchema.Validate(req.GetArgumentsJson())
	if err != nil {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeInvalidArguments, fmt.Sprintf("invalid arguments for tool '%s': %s", req.GetTool(), strings.TrimPrefix(err.Error(), tool.ErrInvalidArguments.Error()+": "))))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	bag, err := w.codec.Decode(md)
	if err != nil {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeInvalidArguments, fmt.Sprintf("the call's context cannot be read: %v", err)))
	}
	// The tool sees the entries its group may see plus the loop id, never anything else.
	ctx = toolctx.NewContext(ctx, bag.WithLoopID(req.GetLoopId()))
	ctx = tool.WithCallInfo(ctx, tool.CallInfo{RunID: req.GetRunId(), LoopID: req.GetLoopId(), CallID: req.GetCallId()})
	ctx = telemetry.WithLoopID(telemetry.WithRunID(ctx, req.GetRunId()), req.GetLoopId())
	group := w.group[req.GetTool()]
	ctx, span := w.tel.StartTool(ctx, telemetry.ToolAttrs{Name: req.GetTool(), CallID: req.GetCallId(), Group: group})
	w.tel.AddInFlight(ctx, w.opts.ID, group, 1)
	res := s.call(ctx, t, args)
	w.tel.AddInFlight(ctx, w.opts.ID, group, -1)
	end := telemetry.ToolResult{WorkerID: w.opts.ID, Arguments: args, Result: res.Content}
	if res.IsError() {
		end.ErrorType = string(res.Code)
	}
	w.tel.EndTool(span, end)
	resp, err := wire.ResultToProto(res)
	if err != nil {
		return wire.ResultToProto(tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' returned a result that cannot be sent: %v", req.GetTool(), err)))
	}
	return resp, nil
}

// call runs the tool, turning a panic or a returned error into an error result.
func (s *invoker) call(ctx context.Context, t tool.Tool, args string) (res tool.Result) {
	defer func() {
		if p := recover(); p != nil {
			s.w.log.Error("tool panicked", "tool", t.Definition().Name, "panic", p, "stack", string(debug.Stack()))
			res = tool.ErrorWithCode(tool.CodePanic, fmt.Sprintf("tool '%s' panicked: %v", t.Definition().Name, p))
		}
	}()
	r, err := t.Call(ctx, args)
	if err != nil {
		// Control-flow signals cannot cross the wire yet; the model hears about them.
		return tool.ErrorFrom(err)
	}
	return r
}

func drainingStatus() error {
	st := status.New(codes.Unavailable, "worker is draining")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonDraining, Domain: wire.ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}
