package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels for the errors the orchestrator reports, matched with errors.Is.
var (
	ErrInvalidRequest = errors.New("invalid request")
	ErrUnknownGroup   = errors.New("unknown tool group")
	ErrUnknownTool    = errors.New("unknown tool")
	ErrMaxIterations  = errors.New("tool loop exceeded its maximum iterations")
	ErrToolNotFound   = errors.New("the model kept calling tools that do not exist")
	ErrModel          = errors.New("model provider failed")
	ErrEmptyResponse  = errors.New("the model returned an empty response")
	ErrToolSignal     = errors.New("a tool ended the run")
	ErrCancelled      = errors.New("run cancelled")
	ErrRunTimeout     = errors.New("run timed out")
	ErrRunExists      = errors.New("a run with that id already exists")
	ErrRunNotFound    = errors.New("no such run")
	ErrOverloaded     = errors.New("orchestrator overloaded")
	ErrShuttingDown   = errors.New("orchestrator shutting down")
	ErrOutputSchema   = errors.New("the final answer does not satisfy the output schema")
	ErrBudget         = errors.New("run budget exceeded")
	ErrModelAuth      = errors.New("the model provider refused the orchestrator's credentials")
	ErrModelNotFound  = errors.New("the model provider does not know the model")
	ErrContextTooLong = errors.New("the conversation is too long for the model")
	ErrModelRate      = errors.New("the model provider's rate limit was exceeded")
	ErrModelRefused   = errors.New("the model provider refused the request")
)

// reasons maps the orchestrator's ErrorInfo reasons to the sentinels.
var reasons = map[string]error{
	"INVALID_REQUEST":    ErrInvalidRequest,
	"UNKNOWN_TOOL_GROUP": ErrUnknownGroup,
	"UNKNOWN_TOOL":       ErrUnknownTool,
	"MAX_ITERATIONS":     ErrMaxIterations,
	"TOOL_NOT_FOUND":     ErrToolNotFound,
	"MODEL_ERROR":        ErrModel,
	"EMPTY_RESPONSE":     ErrEmptyResponse,
	"TOOL_SIGNAL":        ErrToolSignal,
	"CANCELLED":          ErrCancelled,
	"RUN_TIMEOUT":        ErrRunTimeout,
	"RUN_EXISTS":         ErrRunExists,
	"RUN_NOT_FOUND":      ErrRunNotFound,
	"OVERLOADED":         ErrOverloaded,
	"SHUTTING_DOWN":      ErrShuttingDown,
	"OUTPUT_SCHEMA":      ErrOutputSchema,
	"BUDGET_EXCEEDED":    ErrBudget,
	"MODEL_AUTH":         ErrModelAuth,
	"MODEL_NOT_FOUND":    ErrModelNotFound,
	"CONTEXT_TOO_LONG":   ErrContextTooLong,
	"MODEL_RATE_LIMITED": ErrModelRate,
	"MODEL_BAD_REQUEST":  ErrModelRefused,
}

// Error is an error the orchestrator reported.
type Error struct {
	Code    codes.Code
	Reason  string
	Message string
	// Field is the request field at fault, for invalid requests and unknown names.
	Field string
	// RunID is the run that failed, when there was one.
	RunID string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches the sentinel of the error's reason.
func (e *Error) Is(target error) bool {
	s, ok := reasons[e.Reason]
	return ok && s == target
}

// GRPCStatus lets status.Code and status.Convert see the original status.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// convertCtx is convert for a call made with ctx. gRPC reports the end of the caller's
// own context as a Canceled or DeadlineExceeded status, which errors.Is does not match
// with context.Canceled or context.DeadlineExceeded, so such a status without a reason
// from the orchestrator becomes the context's error: Canceled when ctx has ended, and
// DeadlineExceeded when ctx has a deadline (the server, which enforces the propagated
// deadline too, may report it a moment before ctx itself ends).
func convertCtx(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && reasonOf(st) == "" {
		_, hasDeadline := ctx.Deadline()
		switch {
		case st.Code() == codes.Canceled && ctx.Err() != nil:
			return ctx.Err()
		case st.Code() == codes.DeadlineExceeded && ctx.Err() != nil:
			return ctx.Err()
		case st.Code() == codes.DeadlineExceeded && hasDeadline:
			return context.DeadlineExceeded
		}
	}
	return convert(err)
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// convert turns a gRPC error into an *Error when the orchestrator sent a status, and
// passes context errors through.
func convert(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			e.Reason = x.GetReason()
			e.Field = x.GetMetadata()["field"]
			e.RunID = x.GetMetadata()["run_id"]
		case *errdetails.BadRequest:
			if len(x.GetFieldViolations()) > 0 && e.Field == "" {
				e.Field = x.GetFieldViolations()[0].GetField()
			}
		}
	}
	return e
}
