package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func networkFailure(err error) *llm.Failure { return llm.NetworkFailure(Name, err) }

func malformedFailure(status int, msg string, err error) *llm.Failure {
	return llm.MalformedFailure(Name, status, msg, err)
}

// classify turns the error of a stream into a failure. res is the attempt's response, if
// one arrived; readErr is the error of a failed read of its body, if any.
func classify(err error, res *http.Response, readErr error) *llm.Failure {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		msg, code, typ := apiErr.Message, apiErr.Code, apiErr.Type
		if msg == "" {
			// Not OpenAI's error object: find the message in the body.
			msg, code, typ = bodyMessage(readBack(apiErr.Response))
		}
		return statusFailure(apiErr.StatusCode, h, msg, code, typ, err)
	case res != nil && res.StatusCode >= 400:
		msg, code, typ := bodyMessage(readBack(res))
		return statusFailure(res.StatusCode, res.Header, msg, code, typ, err)
	case errors.As(err, &streamErr):
		return eventFailure(streamErr.Event.Data, err)
	case readErr != nil || res == nil:
		return networkFailure(err)
	}
	return malformedFailure(res.StatusCode, "undecodable answer: "+err.Error(), err)
}

// readBack reads the body of an error response, which the SDK read and put back.
func readBack(res *http.Response) []byte {
	if res == nil || res.Body == nil {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return body
}

// statusFailure is the failure of an error status.
func statusFailure(status int, h http.Header, msg, code, typ string, err error) *llm.Failure {
	kind := llm.KindForStatus(status)
	lower := strings.ToLower(msg)
	switch {
	case code == "context_length_exceeded" || typ == "exceed_context_size_error" ||
		(status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity) && contextTooLong(lower):
		kind = llm.KindContextTooLong
	case code == "model_not_found" || kind == llm.KindBadRequest && modelNotFound(lower):
		kind = llm.KindNotFound
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	pe := &llm.ProviderError{Provider: Name, StatusCode: status, Kind: kind, Message: msg, Err: err}
	if d, ok := llm.ParseRetryAfter(h, time.Now()); ok {
		pe.RetryAfter = d
	}
	retry := kind.Temporary() && code != "insufficient_quota"
	switch h.Get("X-Should-Retry") {
	case "true":
		retry = true
	case "false":
		retry = false
	}
	return &llm.Failure{Err: pe, Retry: retry}
}

// eventFailure is the failure of an error event in a stream that began with 200 OK.
func eventFailure(data []byte, err error) *llm.Failure {
	msg, code, typ := bodyMessage(data)
	kind := llm.KindUnavailable
	switch {
	case code == "context_length_exceeded" || contextTooLong(strings.ToLower(msg)):
		kind = llm.KindContextTooLong
	case code == "rate_limit_exceeded" || typ == "rate_limit_error" || typ == "rate_limit_exceeded":
		kind = llm.KindRateLimited
	case typ == "invalid_request_error":
		kind = llm.KindBadRequest
	}
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	return &llm.Failure{Err: &llm.ProviderError{Provider: Name, Kind: kind, Message: msg, Err: err}, Retry: kind.Temporary()}
}

// bodyMessage finds the message of an error body in the shapes OpenAI and compatible
// servers use: {"error": {"message", "code", "type"}}, {"error": "..."},
// {"message", "code", "type"} and {"detail": "..."}; else it is the body's text.
func bodyMessage(body []byte) (msg, code, typ string) {
	body = bytes.TrimSpace(body)
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return truncate(string(body)), "", ""
	}
	if len(v.Error) > 0 {
		var obj struct {
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Type    string          `json:"type"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			return obj.Message, rawString(obj.Code), obj.Type
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s, "", ""
		}
	}
	if v.Message != "" {
		return v.Message, rawString(v.Code), v.Type
	}
	var detail string
	if json.Unmarshal(v.Detail, &detail) == nil && detail != "" {
		return detail, "", ""
	}
	return truncate(string(body)), "", ""
}

// rawString is a JSON string's value, or the JSON text of another value ("404").
func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

func truncate(s string) string {
	const limit = 2000
	s = strings.TrimSpace(s)
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}

// contextTooLong reports whether a lower-cased error message says the prompt does not
// fit the context window, in the words of OpenAI and of the common compatible servers.
func contextTooLong(msg string) bool {
	for _, s := range []string{"context length", "context_length", "context window", "context size", "prompt is too long", "maximum context", "too many tokens", "input is too long"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// modelNotFound reports whether a lower-cased error message says the model does not exist.
func modelNotFound(msg string) bool {
	return strings.Contains(msg, "model") &&
		(strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist"))
}
