package run

import (
	"context"
	"errors"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/router"
)

// ErrorKind says what an error a run (or a request to the run service) ended with is: the
// run service's own classification, which the API maps to its error reasons one to one.
type ErrorKind int

// The kinds of errors, each named (String) as the API's reason for it is.
const (
	KindInternal ErrorKind = iota
	KindJournalDamaged
	KindMaxIterations
	KindToolNotFound
	KindToolSignal
	KindOutputSchema
	KindBudgetExceeded
	KindEmptyResponse
	KindCancelled
	KindShuttingDown
	KindModelAuth
	KindModelNotFound
	KindContextTooLong
	KindModelRateLimited
	KindModelBadRequest
	KindModelError
	KindRunTimeout
	KindInvalidRequest
	KindPermissionDenied
	KindTenantQuota
	KindUnknownToolGroup
	KindUnknownTool
	KindRequiredToolsMissing
)

var kindNames = [...]string{
	KindInternal: "INTERNAL", KindJournalDamaged: "JOURNAL_DAMAGED", KindMaxIterations: "MAX_ITERATIONS",
	KindToolNotFound: "TOOL_NOT_FOUND", KindToolSignal: "TOOL_SIGNAL", KindOutputSchema: "OUTPUT_SCHEMA",
	KindBudgetExceeded: "BUDGET_EXCEEDED", KindEmptyResponse: "EMPTY_RESPONSE", KindCancelled: "CANCELLED",
	KindShuttingDown: "SHUTTING_DOWN", KindModelAuth: "MODEL_AUTH", KindModelNotFound: "MODEL_NOT_FOUND",
	KindContextTooLong: "CONTEXT_TOO_LONG", KindModelRateLimited: "MODEL_RATE_LIMITED", KindModelBadRequest: "MODEL_BAD_REQUEST",
	KindModelError: "MODEL_ERROR", KindRunTimeout: "RUN_TIMEOUT", KindInvalidRequest: "INVALID_REQUEST",
	KindPermissionDenied: "PERMISSION_DENIED", KindTenantQuota: "TENANT_QUOTA", KindUnknownToolGroup: "UNKNOWN_TOOL_GROUP",
	KindUnknownTool: "UNKNOWN_TOOL", KindRequiredToolsMissing: "REQUIRED_TOOLS_MISSING",
}

// Kinds are every kind, in order.
func Kinds() []ErrorKind {
	out := make([]ErrorKind, len(kindNames))
	for i := range kindNames {
		out[i] = ErrorKind(i)
	}
	return out
}

// String is the kind's name: the API's reason without its prefix.
func (k ErrorKind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return kindNames[KindInternal]
	}
	return kindNames[k]
}

// kindTable maps the errors a run can end with to their kind. The first entry that
// matches wins; errors.As and errors.Is look through wrapping.
var kindTable = []struct {
	match func(error) bool
	kind  ErrorKind
}{
	{func(err error) bool { return errors.Is(err, ErrDamaged) }, KindJournalDamaged},
	{func(err error) bool { var e *loop.MaxIterationsError; return errors.As(err, &e) }, KindMaxIterations},
	{func(err error) bool { var e *loop.ToolNotFoundError; return errors.As(err, &e) }, KindToolNotFound},
	{func(err error) bool { var e *loop.SignalError; return errors.As(err, &e) }, KindToolSignal},
	{func(err error) bool { var e *loop.OutputSchemaError; return errors.As(err, &e) }, KindOutputSchema},
	{func(err error) bool { var e *loop.BudgetExceededError; return errors.As(err, &e) }, KindBudgetExceeded},
	{func(err error) bool { return errors.Is(err, loop.ErrEmptyResponse) }, KindEmptyResponse},
	{func(err error) bool { return errors.Is(err, ErrCancelled) }, KindCancelled},
	{func(err error) bool { return errors.Is(err, ErrShutdown) }, KindShuttingDown},
	// The loop reports the end of the run's own context unwrapped, so a model error that
	// wraps a context error (a provider's request timeout) is the provider's failure,
	// not the run's: it must be matched before the context errors.
	// Provider failures the caller must act on, then the rest.
	{func(err error) bool { return errors.Is(err, llm.ErrAuth) }, KindModelAuth},
	{func(err error) bool { return errors.Is(err, llm.ErrNotFound) }, KindModelNotFound},
	{func(err error) bool { return errors.Is(err, llm.ErrContextTooLong) }, KindContextTooLong},
	{func(err error) bool { return errors.Is(err, llm.ErrRateLimited) }, KindModelRateLimited},
	{func(err error) bool { return errors.Is(err, llm.ErrBadRequest) }, KindModelBadRequest},
	{func(err error) bool { var e *loop.ModelError; return errors.As(err, &e) }, KindModelError},
	{func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, KindRunTimeout},
	{func(err error) bool { return errors.Is(err, context.Canceled) }, KindCancelled},
	{func(err error) bool { return errors.Is(err, ErrInvalid) }, KindInvalidRequest},
	{func(err error) bool { return errors.Is(err, ErrPermission) }, KindPermissionDenied},
	{func(err error) bool { return errors.Is(err, ErrTenantQuota) }, KindTenantQuota},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownGroup) }, KindUnknownToolGroup},
	{func(err error) bool { return errors.Is(err, router.ErrUnknownTool) }, KindUnknownTool},
	{func(err error) bool { return errors.Is(err, ErrRequiredMissing) }, KindRequiredToolsMissing},
}

// KindOf is the kind of an error a run ended with; KindInternal for one it does not know.
func KindOf(err error) ErrorKind {
	for _, row := range kindTable {
		if row.match(err) {
			return row.kind
		}
	}
	return KindInternal
}
