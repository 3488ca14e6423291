package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/wire"
)

// ErrorDomain is the domain of every ErrorInfo toolmesh sends.
const ErrorDomain = wire.ErrorDomain

// Reasons carried in ErrorInfo; pkg/client maps them back to its sentinel errors.
const (
	ReasonInvalidRequest = "INVALID_REQUEST"
	ReasonUnknownGroup   = "UNKNOWN_TOOL_GROUP"
	ReasonUnknownTool    = "UNKNOWN_TOOL"
	ReasonMaxIterations  = "MAX_ITERATIONS"
	ReasonToolNotFound   = "TOOL_NOT_FOUND"
	ReasonModelError     = "MODEL_ERROR"
	ReasonEmptyResponse  = "EMPTY_RESPONSE"
	ReasonToolSignal     = "TOOL_SIGNAL"
	ReasonCancelled      = "CANCELLED"
	ReasonRunTimeout     = "RUN_TIMEOUT"
	ReasonRunExists      = "RUN_EXISTS"
	ReasonRunNotFound    = "RUN_NOT_FOUND"
	ReasonOverloaded     = "OVERLOADED"
	ReasonShuttingDown   = "SHUTTING_DOWN"
	ReasonInternal       = "INTERNAL"
	ReasonOutputSchema   = "OUTPUT_SCHEMA"
	ReasonModelAuth      = "MODEL_AUTH"
	ReasonModelNotFound  = "MODEL_NOT_FOUND"
	ReasonContextTooLong = "CONTEXT_TOO_LONG"
	ReasonModelRate      = "MODEL_RATE_LIMITED"
	ReasonModelRefused   = "MODEL_BAD_REQUEST"
	ReasonBudget         = "BUDGET_EXCEEDED"
)

// errCancelled is the cause of a run cancelled through CancelRun.
var errCancelled = errors.New("run cancelled")

// runErrorTable maps the errors a run can end with to a gRPC code and a reason. The
// first entry that matches wins; errors.As/Is look through wrapping.
var runErrorTable = []struct {
	match  func(error) bool
	code   codes.Code
	reason string
}{
	{func(err error) bool { var e *loop.MaxIterationsError; return errors.As(err, &e) }, codes.ResourceExhausted, ReasonMaxIterations},
	{func(err error) bool { var e *loop.ToolNotFoundError; return errors.As(err, &e) }, codes.FailedPrecondition, ReasonToolNotFound},
	{func(err error) bool { var e *loop.SignalError; return errors.As(err, &e) }, codes.Aborted, ReasonToolSignal},
	{func(err error) bool { var e *loop.OutputSchemaError; return errors.As(err, &e) }, codes.FailedPrecondition, ReasonOutputSchema},
	{func(err error) bool { var e *loop.BudgetExceededError; return errors.As(err, &e) }, codes.ResourceExhausted, ReasonBudget},
	{func(err error) bool { return errors.Is(err, loop.ErrEmptyResponse) }, codes.FailedPrecondition, ReasonEmptyResponse},
	{func(err error) bool { return errors.Is(err, errCancelled) }, codes.Canceled, ReasonCancelled},
	{func(err error) bool { return errors.Is(err, errShutdown) }, codes.Unavailable, ReasonShuttingDown},
	// The loop reports the end of the run's own context unwrapped, so a model error that
	// wraps a context error (a provider's request timeout) is the provider's failure,
	// not the run's: it must be matched before the context errors.
	// Provider failures the caller must act on, then the rest.
	{func(err error) bool { return errors.Is(err, llm.ErrAuth) }, codes.FailedPrecondition, ReasonModelAuth},
	{func(err error) bool { return errors.Is(err, llm.ErrNotFound) }, codes.NotFound, ReasonModelNotFound},
	{func(err error) bool { return errors.Is(err, llm.ErrContextTooLong) }, codes.FailedPrecondition, ReasonContextTooLong},
	{func(err error) bool { return errors.Is(err, llm.ErrRateLimited) }, codes.ResourceExhausted, ReasonModelRate},
	{func(err error) bool { return errors.Is(err, llm.ErrBadRequest) }, codes.FailedPrecondition, ReasonModelRefused},
	{func(err error) bool { var e *loop.ModelError; return errors.As(err, &e) }, codes.Unavailable, ReasonModelError},
	{func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, codes.DeadlineExceeded, ReasonRunTimeout},
	{func(err error) bool { return errors.Is(err, context.Canceled) }, codes.Canceled, ReasonCancelled},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownGroup) }, codes.NotFound, ReasonUnknownGroup},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownTool) }, codes.NotFound, ReasonUnknownTool},
}

// classify returns the code and reason for an error a run ended with.
func classify(err error) (codes.Code, string) {
	for _, row := range runErrorTable {
		if row.match(err) {
			return row.code, row.reason
		}
	}
	return codes.Internal, ReasonInternal
}

// statusError builds a status with an ErrorInfo detail.
func statusError(code codes.Code, reason, msg string, meta map[string]string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); err == nil {
		st = d
	}
	return st.Err()
}

// fieldError is an InvalidArgument (or NotFound) status naming the request field.
type fieldError struct {
	code   codes.Code
	reason string
	field  string
	desc   string
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %s", e.field, e.desc) }

func (e *fieldError) status() error {
	st := status.New(e.code, e.Error())
	info := &errdetails.ErrorInfo{Reason: e.reason, Domain: ErrorDomain, Metadata: map[string]string{"field": e.field}}
	var withD *status.Status
	var err error
	if e.code == codes.InvalidArgument {
		withD, err = st.WithDetails(info, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.field, Description: e.desc}}})
	} else {
		withD, err = st.WithDetails(info)
	}
	if err == nil {
		st = withD
	}
	return st.Err()
}

func invalid(field, format string, args ...any) *fieldError {
	return &fieldError{code: codes.InvalidArgument, reason: ReasonInvalidRequest, field: field, desc: fmt.Sprintf(format, args...)}
}
