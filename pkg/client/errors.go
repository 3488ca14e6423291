package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
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
	// ErrRequiredToolsMissing: a required tool group lacks tools the run requires.
	ErrRequiredToolsMissing = errors.New("a required tool group lacks required tools")
	// ErrJournalUnavailable: the orchestrator's run journal cannot be reached; retry.
	ErrJournalUnavailable = errors.New("the run journal is unavailable")
	// ErrRunElsewhere: another orchestrator replica drives the run.
	ErrRunElsewhere = errors.New("the run is driven by another orchestrator")
	// ErrApprovalNotPending: the run waits for no approval of that call.
	ErrApprovalNotPending = errors.New("no approval of that call is pending")
	// ErrUnauthenticated: the call came without a verified identity where one is
	// required (mutual TLS on, no client certificate).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the caller's identity may not do this.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrTenantQuota: the request is larger than the caller's tenant may send; make it
	// smaller (retrying it as it is does not help).
	ErrTenantQuota = errors.New("over the tenant's quota")
	// ErrDefinitionQuarantined: a worker's tool definition waits for an operator's
	// approval.
	ErrDefinitionQuarantined = errors.New("definition quarantined")
	// ErrJournalDamaged: the run's journal holds a record that cannot be read back; the
	// run is held for an operator (RUN_STATE_HELD).
	ErrJournalDamaged = errors.New("the run's journal holds a damaged record")
)

// Sentinels of the reasons a worker's or a registration's errors carry; a client rarely
// sees them, but every reason has one.
var (
	ErrWorkerDraining       = errors.New("the worker is draining")
	ErrWorkerIDInUse        = errors.New("the worker id is held by an open registration")
	ErrRegistrationInvalid  = errors.New("invalid registration")
	ErrRegistrationConflict = errors.New("the registration conflicts with the routing table")
	ErrWorkerUnreachable    = errors.New("the orchestrator cannot reach the worker's address")
	ErrWorkerWrongService   = errors.New("the worker's address does not serve ToolWorkerService")
	ErrLeaseExpired         = errors.New("the registration stream's lease expired")
	ErrRegistryFull         = errors.New("the routing table is full")
	ErrRequestTimeout       = errors.New("the request message did not arrive in time")
	ErrInternal             = errors.New("internal error in the orchestrator")
)

// sentinels maps every error reason of the contract (toolmesh.v1.ErrorReason) to its
// sentinel; a test checks that none is missing.
var sentinels = map[toolpb.ErrorReason]error{
	toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST:        ErrInvalidRequest,
	toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP:     ErrUnknownGroup,
	toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL:           ErrUnknownTool,
	toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS:         ErrMaxIterations,
	toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND:         ErrToolNotFound,
	toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR:            ErrModel,
	toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE:         ErrEmptyResponse,
	toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL:            ErrToolSignal,
	toolpb.ErrorReason_ERROR_REASON_CANCELLED:              ErrCancelled,
	toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT:            ErrRunTimeout,
	toolpb.ErrorReason_ERROR_REASON_RUN_EXISTS:             ErrRunExists,
	toolpb.ErrorReason_ERROR_REASON_RUN_NOT_FOUND:          ErrRunNotFound,
	toolpb.ErrorReason_ERROR_REASON_OVERLOADED:             ErrOverloaded,
	toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN:          ErrShuttingDown,
	toolpb.ErrorReason_ERROR_REASON_INTERNAL:               ErrInternal,
	toolpb.ErrorReason_ERROR_REASON_OUTPUT_SCHEMA:          ErrOutputSchema,
	toolpb.ErrorReason_ERROR_REASON_MODEL_AUTH:             ErrModelAuth,
	toolpb.ErrorReason_ERROR_REASON_MODEL_NOT_FOUND:        ErrModelNotFound,
	toolpb.ErrorReason_ERROR_REASON_CONTEXT_TOO_LONG:       ErrContextTooLong,
	toolpb.ErrorReason_ERROR_REASON_MODEL_RATE_LIMITED:     ErrModelRate,
	toolpb.ErrorReason_ERROR_REASON_MODEL_BAD_REQUEST:      ErrModelRefused,
	toolpb.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED:        ErrBudget,
	toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING:        ErrWorkerDraining,
	toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE:       ErrWorkerIDInUse,
	toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID:   ErrRegistrationInvalid,
	toolpb.ErrorReason_ERROR_REASON_REGISTRATION_CONFLICT:  ErrRegistrationConflict,
	toolpb.ErrorReason_ERROR_REASON_WORKER_UNREACHABLE:     ErrWorkerUnreachable,
	toolpb.ErrorReason_ERROR_REASON_WORKER_WRONG_SERVICE:   ErrWorkerWrongService,
	toolpb.ErrorReason_ERROR_REASON_LEASE_EXPIRED:          ErrLeaseExpired,
	toolpb.ErrorReason_ERROR_REASON_REGISTRY_FULL:          ErrRegistryFull,
	toolpb.ErrorReason_ERROR_REASON_REQUEST_TIMEOUT:        ErrRequestTimeout,
	toolpb.ErrorReason_ERROR_REASON_REQUIRED_TOOLS_MISSING: ErrRequiredToolsMissing,
	toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE:    ErrJournalUnavailable,
	toolpb.ErrorReason_ERROR_REASON_RUN_ELSEWHERE:          ErrRunElsewhere,
	toolpb.ErrorReason_ERROR_REASON_APPROVAL_NOT_PENDING:   ErrApprovalNotPending,
	toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED:        ErrUnauthenticated,
	toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED:      ErrPermissionDenied,
	toolpb.ErrorReason_ERROR_REASON_TENANT_QUOTA:           ErrTenantQuota,
	toolpb.ErrorReason_ERROR_REASON_DEFINITION_QUARANTINED: ErrDefinitionQuarantined,
	toolpb.ErrorReason_ERROR_REASON_JOURNAL_DAMAGED:        ErrJournalDamaged,
}

// Error is an error the orchestrator reported.
type Error struct {
	Code    codes.Code
	Reason  toolpb.ErrorReason
	Message string
	// Field is the request field at fault, for invalid requests and unknown names.
	Field string
	// RunID is the run that failed, when there was one.
	RunID string
	// RetryAfter is how long to wait before retrying, for an error worth retrying; zero
	// otherwise.
	RetryAfter time.Duration

	st *status.Status // as the orchestrator sent it, details included
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches the sentinel of the error's reason.
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Reason]
	return ok && s == target
}

// Retryable reports whether the orchestrator said the call is worth retrying (after
// RetryAfter).
func (e *Error) Retryable() bool { return e.RetryAfter > 0 }

// GRPCStatus lets status.Code and status.Convert see the original status, with its
// details (BadRequest, QuotaFailure, RetryInfo).
func (e *Error) GRPCStatus() *status.Status {
	if e.st != nil {
		return e.st
	}
	return status.New(e.Code, e.Message)
}

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
	if st, ok := status.FromError(err); ok && !hasReason(st) {
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

func hasReason(st *status.Status) bool {
	_, _, _, ok := wire.StatusReason(st)
	return ok
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
	e := &Error{Code: st.Code(), Message: st.Message(), st: st}
	reason, meta, retry, _ := wire.StatusReason(st)
	e.Reason, e.Field, e.RunID, e.RetryAfter = reason, meta["field"], meta["run_id"], retry
	for _, d := range st.Details() {
		if x, ok := d.(*errdetails.BadRequest); ok && len(x.GetFieldViolations()) > 0 && e.Field == "" {
			e.Field = x.GetFieldViolations()[0].GetField()
		}
	}
	return e
}
