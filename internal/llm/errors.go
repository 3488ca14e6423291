package llm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrorKind says what went wrong with a model call, in terms of what the caller can do
// about it. It is a short word fit for logs and events.
type ErrorKind string

// The kinds of provider errors.
const (
	// KindAuth: the credentials were refused (401, 403) or the account cannot be used.
	KindAuth ErrorKind = "auth"
	// KindNotFound: the model (or the endpoint) does not exist (404, model_not_found).
	KindNotFound ErrorKind = "not_found"
	// KindContextTooLong: the conversation does not fit the model's context window.
	KindContextTooLong ErrorKind = "context_too_long"
	// KindRateLimited: the provider still said 429 after the retries.
	KindRateLimited ErrorKind = "rate_limited"
	// KindUnavailable: the provider failed or was overloaded (5xx, 529) after the retries.
	KindUnavailable ErrorKind = "unavailable"
	// KindBadRequest: the provider refused the request for another reason (other 4xx).
	KindBadRequest ErrorKind = "bad_request"
	// KindMalformed: the provider's answer could not be decoded.
	KindMalformed ErrorKind = "malformed"
	// KindNetwork: no complete answer arrived: a connection error, a stream cut short, or
	// the per-call timeout.
	KindNetwork ErrorKind = "network"
)

// Sentinel errors, one per kind: errors.Is(err, ErrAuth) holds for a *ProviderError of
// kind KindAuth anywhere in err's chain.
var (
	ErrAuth           = errors.New("llm: authentication failed")
	ErrNotFound       = errors.New("llm: model not found")
	ErrContextTooLong = errors.New("llm: context too long")
	ErrRateLimited    = errors.New("llm: rate limited")
	ErrUnavailable    = errors.New("llm: provider unavailable")
	ErrBadRequest     = errors.New("llm: request refused")
	ErrMalformed      = errors.New("llm: malformed answer")
	ErrNetwork        = errors.New("llm: network error")

	// ErrUnknownModel is ErrNotFound.
	ErrUnknownModel = ErrNotFound
	// ErrOverloaded is ErrUnavailable.
	ErrOverloaded = ErrUnavailable
)

// Sentinel returns the sentinel error of k, or nil for an unknown kind.
func (k ErrorKind) Sentinel() error {
	switch k {
	case KindAuth:
		return ErrAuth
	case KindNotFound:
		return ErrNotFound
	case KindContextTooLong:
		return ErrContextTooLong
	case KindRateLimited:
		return ErrRateLimited
	case KindUnavailable:
		return ErrUnavailable
	case KindBadRequest:
		return ErrBadRequest
	case KindMalformed:
		return ErrMalformed
	case KindNetwork:
		return ErrNetwork
	}
	return nil
}

// Temporary reports whether a later call may succeed without any change: rate limits,
// unavailability and network errors. Providers have already retried these.
func (k ErrorKind) Temporary() bool {
	return k == KindRateLimited || k == KindUnavailable || k == KindNetwork
}

// ProviderError is a failed model call that the caller must act on. Providers end a stream
// with one, after their own retries.
type ProviderError struct {
	// Provider is the provider's name, such as "openai".
	Provider string
	// StatusCode is the HTTP status of the last attempt; zero when there was none.
	StatusCode int
	Kind       ErrorKind
	// Message is the provider's own message, verbatim, or a description of the failure.
	Message string
	// RetryAfter is how long the provider asked the caller to wait; zero when it did not.
	RetryAfter time.Duration
	// Attempts is how many requests were sent, retries included.
	Attempts int
	// Err is the underlying error, if any.
	Err error
}

func (e *ProviderError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	b.WriteString(": ")
	b.WriteString(strings.ReplaceAll(string(e.Kind), "_", " "))
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
	}
	switch {
	case e.Message != "":
		b.WriteString(": ")
		b.WriteString(e.Message)
	case e.Err != nil:
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap returns the sentinel of the error's kind and Err.
func (e *ProviderError) Unwrap() []error {
	var errs []error
	if s := e.Kind.Sentinel(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// KindForStatus is the kind of an HTTP error status, before looking at the body: 401 and
// 403 are KindAuth, 404 KindNotFound, 429 KindRateLimited, 408, 409 and 5xx (529
// included) KindUnavailable, other 4xx KindBadRequest, and anything else KindMalformed.
func KindForStatus(status int) ErrorKind {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusNotFound:
		return KindNotFound
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return KindUnavailable
	case status >= 400:
		return KindBadRequest
	}
	return KindMalformed
}

// ParseRetryAfter reads how long a response asks to wait before the next request: the
// retry-after-ms header (milliseconds), else retry-after (seconds, or an HTTP date,
// measured from now). A negative wait counts as zero.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(ms) {
			return max(0, durationOf(ms, time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(s) {
		return max(0, durationOf(s, time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// durationOf converts n units to a duration, saturating instead of overflowing.
func durationOf(n float64, unit time.Duration) time.Duration {
	const limit = float64(1<<63 - 1)
	d := n * float64(unit)
	switch {
	case d >= limit:
		return time.Duration(1<<63 - 1)
	case d <= 0:
		return 0
	}
	return time.Duration(d)
}

// BadRequest is the error of a request the provider refuses before sending it.
func BadRequest(provider, format string, args ...any) error {
	return &ProviderError{Provider: provider, Kind: KindBadRequest, Message: fmt.Sprintf(format, args...)}
}

// RequestModel is the model req asks for: its own, else the provider's default def; a
// request with neither is refused.
func RequestModel(provider string, req *Request, def string) (string, error) {
	switch {
	case req.Model != "":
		return req.Model, nil
	case def != "":
		return def, nil
	}
	return "", BadRequest(provider, "no model: the request names none and the provider has no default")
}

// StatusFailure is the failure of an error status, of the given kind: msg is the
// provider's message (the status text when empty), the wait the response asks for (see
// ParseRetryAfter) is kept in RetryAfter, and an X-Should-Retry header of "true" or
// "false" overrides retry, except that a deterministic status (Deterministic) is never
// retried: the same request gets the same answer.
func StatusFailure(provider string, status int, h http.Header, kind ErrorKind, msg string, retry bool, err error) *Failure {
	if msg == "" {
		msg = http.StatusText(status)
	}
	pe := &ProviderError{Provider: provider, StatusCode: status, Kind: kind, Message: msg, Err: err}
	if d, ok := ParseRetryAfter(h, time.Now()); ok {
		pe.RetryAfter = d
	}
	switch h.Get("X-Should-Retry") {
	case "true":
		retry = true
	case "false":
		retry = false
	}
	return &Failure{Err: pe, Retry: retry && !Deterministic(status)}
}

// Deterministic reports whether an HTTP status says the same of the same request every
// time: a 4xx other than 408 (timeout), 409 (conflict) and 429 (rate limit).
func Deterministic(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusConflict && status != http.StatusTooManyRequests
}

// EventFailure is the failure of an error event in a stream that began with 200 OK: it is
// retried when its kind is temporary.
func EventFailure(provider string, kind ErrorKind, msg string, err error) *Failure {
	return &Failure{Err: &ProviderError{Provider: provider, Kind: kind, Message: msg, Err: err}, Retry: kind.Temporary()}
}

// maxErrorBody bounds how much of an error response's body is read.
const maxErrorBody = 64 << 10

// ErrorBody reads (up to 64 KiB of) the body of an error response; an SDK that decoded
// the body put it back.
func ErrorBody(res *http.Response) []byte {
	if res == nil || res.Body == nil {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	return body
}

// contextTooLongPhrases are how providers and the common compatible servers say that
// the prompt does not fit the context window.
var contextTooLongPhrases = []string{
	"context length", "context_length", "context window", "context size", "context limit",
	"maximum context", "prompt is too long", "input is too long", "too many tokens",
}

// ContextTooLong reports whether an error message says the prompt does not fit the
// model's context window, in the words of OpenAI, Anthropic and the common compatible
// servers; case does not matter.
func ContextTooLong(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range contextTooLongPhrases {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
