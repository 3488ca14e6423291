package server

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/protoadapt"

	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// reasons are the API's reasons of the run service's error kinds.
var reasons = map[run.ErrorKind]toolpb.ErrorReason{
	run.KindInternal: toolpb.ErrorReason_ERROR_REASON_INTERNAL, run.KindJournalDamaged: toolpb.ErrorReason_ERROR_REASON_JOURNAL_DAMAGED,
	run.KindMaxIterations: toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS, run.KindToolNotFound: toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND,
	run.KindToolSignal: toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL, run.KindOutputSchema: toolpb.ErrorReason_ERROR_REASON_OUTPUT_SCHEMA,
	run.KindBudgetExceeded: toolpb.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED, run.KindEmptyResponse: toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE,
	run.KindCancelled: toolpb.ErrorReason_ERROR_REASON_CANCELLED, run.KindShuttingDown: toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN,
	run.KindModelAuth: toolpb.ErrorReason_ERROR_REASON_MODEL_AUTH, run.KindModelNotFound: toolpb.ErrorReason_ERROR_REASON_MODEL_NOT_FOUND,
	run.KindContextTooLong: toolpb.ErrorReason_ERROR_REASON_CONTEXT_TOO_LONG, run.KindModelRateLimited: toolpb.ErrorReason_ERROR_REASON_MODEL_RATE_LIMITED,
	run.KindModelBadRequest: toolpb.ErrorReason_ERROR_REASON_MODEL_BAD_REQUEST, run.KindModelError: toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR,
	run.KindRunTimeout: toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT, run.KindInvalidRequest: toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST,
	run.KindPermissionDenied: toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED, run.KindTenantQuota: toolpb.ErrorReason_ERROR_REASON_TENANT_QUOTA,
	run.KindUnknownToolGroup: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP, run.KindUnknownTool: toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL,
	run.KindRequiredToolsMissing: toolpb.ErrorReason_ERROR_REASON_REQUIRED_TOOLS_MISSING,
}

// classify returns the reason for an error a run ended with: the reason of its kind.
func classify(err error) toolpb.ErrorReason { return reasons[run.KindOf(err)] }

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
