package wire

import (
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// ErrorDomain is the domain of every ErrorInfo toolmesh sends.
const ErrorDomain = "toolmesh.dev"

// reasonPrefix starts the name of every ErrorReason value; ErrorInfo.reason leaves it out.
const reasonPrefix = "ERROR_REASON_"

// Reason is what toolmesh does with an error reason: the status code it travels with,
// and for a retryable one the delay a caller should wait before retrying.
type Reason struct {
	Code codes.Code
	// RetryAfter is the default delay of a retryable reason's RetryInfo; zero means the
	// reason is not worth retrying as is.
	RetryAfter time.Duration
}

// Reasons is the one list of error reasons and their status codes. The proto enum
// toolmesh.v1.ErrorReason names them and documents them for other languages; a test
// checks that both list the same reasons.
var Reasons = map[toolpb.ErrorReason]Reason{
	toolpb.ErrorReason_ERROR_REASON_INVALID_REQUEST:        {Code: codes.InvalidArgument},
	toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL_GROUP:     {Code: codes.NotFound},
	toolpb.ErrorReason_ERROR_REASON_UNKNOWN_TOOL:           {Code: codes.NotFound},
	toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS:         {Code: codes.ResourceExhausted},
	toolpb.ErrorReason_ERROR_REASON_TOOL_NOT_FOUND:         {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_MODEL_ERROR:            {Code: codes.Unavailable, RetryAfter: 5 * time.Second},
	toolpb.ErrorReason_ERROR_REASON_EMPTY_RESPONSE:         {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_TOOL_SIGNAL:            {Code: codes.Aborted},
	toolpb.ErrorReason_ERROR_REASON_CANCELLED:              {Code: codes.Canceled},
	toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT:            {Code: codes.DeadlineExceeded},
	toolpb.ErrorReason_ERROR_REASON_RUN_EXISTS:             {Code: codes.AlreadyExists},
	toolpb.ErrorReason_ERROR_REASON_RUN_NOT_FOUND:          {Code: codes.NotFound},
	toolpb.ErrorReason_ERROR_REASON_OVERLOADED:             {Code: codes.ResourceExhausted, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN:          {Code: codes.Unavailable, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_INTERNAL:               {Code: codes.Internal},
	toolpb.ErrorReason_ERROR_REASON_OUTPUT_SCHEMA:          {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_MODEL_AUTH:             {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_MODEL_NOT_FOUND:        {Code: codes.NotFound},
	toolpb.ErrorReason_ERROR_REASON_CONTEXT_TOO_LONG:       {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_MODEL_RATE_LIMITED:     {Code: codes.ResourceExhausted, RetryAfter: 10 * time.Second},
	toolpb.ErrorReason_ERROR_REASON_MODEL_BAD_REQUEST:      {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_BUDGET_EXCEEDED:        {Code: codes.ResourceExhausted},
	toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING:        {Code: codes.Unavailable, RetryAfter: time.Millisecond},
	toolpb.ErrorReason_ERROR_REASON_WORKER_ID_IN_USE:       {Code: codes.AlreadyExists, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_REGISTRATION_INVALID:   {Code: codes.InvalidArgument},
	toolpb.ErrorReason_ERROR_REASON_REGISTRATION_CONFLICT:  {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_WORKER_UNREACHABLE:     {Code: codes.Unavailable, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_WORKER_WRONG_SERVICE:   {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_LEASE_EXPIRED:          {Code: codes.DeadlineExceeded},
	toolpb.ErrorReason_ERROR_REASON_REGISTRY_FULL:          {Code: codes.ResourceExhausted, RetryAfter: 5 * time.Second},
	toolpb.ErrorReason_ERROR_REASON_REQUEST_TIMEOUT:        {Code: codes.DeadlineExceeded, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_REQUIRED_TOOLS_MISSING: {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE:    {Code: codes.Unavailable, RetryAfter: time.Second},
	toolpb.ErrorReason_ERROR_REASON_RUN_ELSEWHERE:          {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_APPROVAL_NOT_PENDING:   {Code: codes.FailedPrecondition},
	toolpb.ErrorReason_ERROR_REASON_UNAUTHENTICATED:        {Code: codes.Unauthenticated},
	toolpb.ErrorReason_ERROR_REASON_PERMISSION_DENIED:      {Code: codes.PermissionDenied},
	toolpb.ErrorReason_ERROR_REASON_TENANT_QUOTA:           {Code: codes.ResourceExhausted},
	toolpb.ErrorReason_ERROR_REASON_DEFINITION_QUARANTINED: {Code: codes.FailedPrecondition, RetryAfter: 5 * time.Second},
	toolpb.ErrorReason_ERROR_REASON_JOURNAL_DAMAGED:        {Code: codes.DataLoss},
}

// ReasonName is the reason as ErrorInfo carries it: the value's name without the
// ERROR_REASON_ prefix, such as "MAX_ITERATIONS".
func ReasonName(r toolpb.ErrorReason) string { return strings.TrimPrefix(r.String(), reasonPrefix) }

// ParseReason reads an ErrorInfo reason; an unknown one is ERROR_REASON_UNSPECIFIED.
func ParseReason(name string) toolpb.ErrorReason {
	return toolpb.ErrorReason(toolpb.ErrorReason_value[reasonPrefix+name])
}

// Error describes an error to send as a status.
type Error struct {
	Reason  toolpb.ErrorReason
	Message string
	// Metadata goes into the ErrorInfo: "field" names the request field at fault,
	// "run_id" the run.
	Metadata map[string]string
	// RetryAfter overrides the reason's default retry delay when the reason is retryable.
	RetryAfter time.Duration
	// Details are added after the ErrorInfo and the RetryInfo (a BadRequest, say).
	Details []protoadapt.MessageV1
}

// Status builds the status of e: the reason's code, an ErrorInfo, a RetryInfo when the
// reason is retryable, and e's other details.
func (e Error) Status() *status.Status {
	info, ok := Reasons[e.Reason]
	if !ok {
		info = Reasons[toolpb.ErrorReason_ERROR_REASON_INTERNAL]
	}
	st := status.New(info.Code, e.Message)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: ReasonName(e.Reason), Domain: ErrorDomain, Metadata: e.Metadata}}
	if info.RetryAfter > 0 {
		delay := info.RetryAfter
		if e.RetryAfter > 0 {
			delay = e.RetryAfter
		}
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	}
	details = append(details, e.Details...)
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st
}

// Err is Status as an error.
func (e Error) Err() error { return e.Status().Err() }

// StatusReason reads the ErrorInfo of a status that toolmesh sent: its reason and
// metadata, and the RetryInfo delay (zero when there is none). ok is false when the
// status has no ErrorInfo of toolmesh's domain.
func StatusReason(st *status.Status) (r toolpb.ErrorReason, meta map[string]string, retryAfter time.Duration, ok bool) {
	for _, d := range st.Details() {
		switch x := d.(type) {
		case *errdetails.ErrorInfo:
			if x.GetDomain() == ErrorDomain && !ok {
				r, meta, ok = ParseReason(x.GetReason()), x.GetMetadata(), true
			}
		case *errdetails.RetryInfo:
			retryAfter = x.GetRetryDelay().AsDuration()
		}
	}
	return r, meta, retryAfter, ok
}
