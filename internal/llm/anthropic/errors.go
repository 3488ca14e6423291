package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// apiFailure is the failure of the SDK's error for an error status or for an error event
// of the stream, or nil when err is neither.
func apiFailure(err error) *llm.Failure {
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return nil
	}
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
}

// bodyFailure is the failure of an error status whose body is not the API's error object.
func bodyFailure(status int, h http.Header, body []byte, err error) *llm.Failure {
	return statusFailure(status, h, "", bodyText(body), err)
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
		if llm.ContextTooLong(msg) {
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
		if kind == llm.KindBadRequest && llm.ContextTooLong(msg) {
			kind = llm.KindContextTooLong
		}
	}
	return llm.StatusFailure(Name, status, h, kind, msg, kind.Temporary(), err)
}

// eventFailure is the failure of an error event in a stream that began with 200 OK, such
// as overloaded_error.
func eventFailure(typ, msg string, err error) *llm.Failure {
	kind := kindOfType(typ, msg)
	if kind == "" {
		kind = llm.KindUnavailable
	}
	return llm.EventFailure(Name, kind, msg, err)
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
