package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/protoadapt"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// runErrorTable maps the errors a run can end with to a reason; the reason's status code
// comes from wire.Reasons. The first entry that matches wins; errors.As/Is look through
// wrapping.
var runErrorTable = []struct {
	match  func(error) bool
	reason toolpb.ErrorReason
}{
	{func(err error) bool { return errors.Is(err, run.ErrDamaged) }, toolpb.ErrorReason_ERROR_REASON_JOURNAL_DAMAGED},
	{func(err error) bool { var e *loop.MaxIterationsError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS},
	{func(err error) bool { var e *loop.ToolNotFoundError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND},
	{func(err error) bool { var e *loop.SignalError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL},
	{func(err error) bool { var e *loop.OutputSchemaError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_OUTPUT_SCHEMA},
	{func(err error) bool { var e *loop.BudgetExceededError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED},
	{func(err error) bool { return errors.Is(err, loop.ErrEmptyResponse) }, toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE},
	{func(err error) bool { return errors.Is(err, run.ErrCancelled) }, toolpb.ErrorReason_ERROR_REASON_CANCELLED},
	{func(err error) bool { return errors.Is(err, run.ErrShutdown) }, toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN},
	// The loop reports the end of the run's own context unwrapped, so a model error that
	// wraps a context error (a provider's request timeout) is the provider's failure,
	// not the run's: it must be matched before the context errors.
	// Provider failures the caller must act on, then the rest.
	{func(err error) bool { return errors.Is(err, llm.ErrAuth) }, toolpb.ErrorReason_ERROR_REASON_MODEL_AUTH},
	{func(err error) bool { return errors.Is(err, llm.ErrNotFound) }, toolpb.ErrorReason_ERROR_REASON_MODEL_NOT_FOUND},
	{func(err error) bool { return errors.Is(err, llm.ErrContextTooLong) }, toolpb.ErrorReason_ERROR_REASON_CONTEXT_TOO_LONG},
	{func(err error) bool { return errors.Is(err, llm.ErrRateLimited) }, toolpb.ErrorReason_ERROR_REASON_MODEL_RATE_LIMITED},
	{func(err error) bool { return errors.Is(err, llm.ErrBadRequest) }, toolpb.ErrorReason_ERROR_REASON_MODEL_BAD_REQUEST},
	{func(err error) bool { var e *loop.ModelError; return errors.As(err, &e) }, toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR},
	{func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT},
	{func(err error) bool { return errors.Is(err, context.Canceled) }, toolpb.ErrorReason_ERROR_REASON_CANCELLED},
	{func(err error) bool { return errors.Is(err, run.ErrInvalid) }, toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST},
	{func(err error) bool { return errors.Is(err, run.ErrPermission) }, toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED},
	{func(err error) bool { return errors.Is(err, run.ErrTenantQuota) }, toolpb.ErrorReason_ERROR_REASON_TENANT_QUOTA},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownGroup) }, toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownTool) }, toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL},
	{func(err error) bool { return errors.Is(err, run.ErrRequiredMissing) }, toolpb.ErrorReason_ERROR_REASON_REQUIRED_TOOLS_MISSING},
}

// classify returns the reason for an error a run ended with.
func classify(err error) toolpb.ErrorReason {
	for _, row := range runErrorTable {
		if row.match(err) {
			return row.reason
		}
	}
	return toolpb.ErrorReason_ERROR_REASON_INTERNAL
}

// statusError builds the status of an error with a reason.
func statusError(reason toolpb.ErrorReason, msg string, meta map[string]string) error {
	return wire.Error{Reason: reason, Message: msg, Metadata: meta}.Err()
}

// fieldError is an error about one field of a request: INVALID_ARGUMENT (with a
// BadRequest) for a malformed field, or the code of its reason (NOT_FOUND for an unknown
// group, say).
type fieldError struct {
	reason toolpb.ErrorReason
	field  string
	desc   string
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %s", e.field, e.desc) }

func (e *fieldError) status() error {
	we := wire.Error{Reason: e.reason, Message: e.Error(), Metadata: map[string]string{"field": e.field}}
	switch wire.Reasons[e.reason].Code {
	case codes.InvalidArgument:
		we.Details = []protoadapt.MessageV1{&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.field, Description: e.desc}}}}
	case codes.ResourceExhausted:
		we.Details = []protoadapt.MessageV1{&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: e.field, Description: e.desc}}}}
	}
	return we.Err()
}

func invalid(field, format string, args ...any) *fieldError {
	return &fieldError{reason: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST, field: field, desc: fmt.Sprintf(format, args...)}
}
