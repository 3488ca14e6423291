package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func networkFailure(err error) *llm.Failure { return llm.NetworkFailure(Name, err) }

func malformedFailure(status int, msg string, err error) *llm.Failure {
	return llm.MalformedFailure(Name, status, msg, err)
}

// classify turns the error of a stream into a failure. res is the attempt's response, if
// one arrived; readErr is the error of a failed read of its body, if any.
func classify(err error, res *http.Response, readErr error) *llm.Failure {
	var apiErr *anthropic.Error
	switch {
	case errors.As(err, &apiErr):
		msg := apiErr.Message
		if msg == "" {
			msg = bodyText([]byte(apiErr.RawJSON()))
		}
		if apiErr.StatusCode < 400 {
			// An error event in a stream that began with 200 OK.
			return eventFailure(string(apiErr.Type()), msg, err)
		}
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return statusFailure(apiErr.StatusCode, h, string(apiErr.Type()), msg, err)
	case res != nil && res.StatusCode >= 400:
		var body []byte
		if res.Body != nil {
			body, _ = io.ReadAll(io.LimitReader(res.Body, 64<<10))
		}
		return statusFailure(res.StatusCode, res.Header, "", bodyText(body), err)
	case readErr != nil || res == nil:
		return networkFailure(err)
	}
	return malformedFailure(res.StatusCode, "undecodable answer: "+err.Error(), err)
}

// kindOfType is the kind of an error type of the API, or "" for an unknown type.
func kindOfType(typ, msg string) llm.ErrorKind {
	switch typ {
	case "authentication_error", "permission_error", "billing_error":
		return llm.KindAuth
	case "not_found_error":
		return llm.KindNotFound
	case "rate_limit_error":
		return llm.KindRateLimited
	case "overloaded_error", "api_error", "timeout_error":
		return llm.KindUnavailable
	case "invalid_request_error", "request_too_large":
		if contextTooLong(strings.ToLower(msg)) {
			return llm.KindContextTooLong
		}
		return llm.KindBadRequest
	}
	return ""
}

// statusFailure is the failure of an error status.
func statusFailure(status int, h http.Header, typ, msg string, err error) *llm.Failure {
	kind := kindOfType(typ, msg)
	if kind == "" {
		kind = llm.KindForStatus(status)
		if kind == llm.KindBadRequest && contextTooLong(strings.ToLower(msg)) {
			kind = llm.KindContextTooLong
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	pe := &llm.ProviderError{Provider: Name, StatusCode: status, Kind: kind, Message: msg, Err: err}
	if d, ok := llm.ParseRetryAfter(h, time.Now()); ok {
		pe.RetryAfter = d
	}
	retry := kind.Temporary()
	switch h.Get("X-Should-Retry") {
	case "true":
		retry = true
	case "false":
		retry = false
	}
	return &llm.Failure{Err: pe, Retry: retry}
}

// eventFailure is the failure of an error event in a stream that began with 200 OK, such
// as overloaded_error.
func eventFailure(typ, msg string, err error) *llm.Failure {
	kind := kindOfType(typ, msg)
	if kind == "" {
		kind = llm.KindUnavailable
	}
	return &llm.Failure{Err: &llm.ProviderError{Provider: Name, Kind: kind, Message: msg, Err: err}, Retry: kind.Temporary()}
}

// bodyText is the message of an error body that is not the API's error object: its
// "message" or "error" string if it is JSON with one, else its text.
func bodyText(body []byte) string {
	body = bytes.TrimSpace(body)
	var v struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil {
		var s string
		switch {
		case v.Message != "":
			return v.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		}
	}
	const limit = 2000
	if len(body) > limit {
		return string(body[:limit]) + "…"
	}
	return string(body)
}

// contextTooLong reports whether a lower-cased error message says the prompt does not
// fit the context window.
func contextTooLong(msg string) bool {
	for _, s := range []string{"prompt is too long", "context limit", "context window", "context length", "too many tokens", "input is too long"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
