package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// apiFailure is the failure of the SDK's error for an error status or for an error event
// of the stream, or nil when err is neither.
func apiFailure(err error) *llm.Failure {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		if apiErr.Message == "" {
			// Not OpenAI's error object: find the message in the body.
			return bodyFailure(apiErr.StatusCode, h, llm.ErrorBody(apiErr.Response), err)
		}
		return statusFailure(apiErr.StatusCode, h, apiErr.Message, apiErr.Code, apiErr.Type, err)
	case errors.As(err, &streamErr):
		return eventFailure(streamErr.Event.Data, err)
	}
	return nil
}

// bodyFailure is the failure of an error status with the error body body.
func bodyFailure(status int, h http.Header, body []byte, err error) *llm.Failure {
	msg, code, typ := bodyMessage(body)
	return statusFailure(status, h, msg, code, typ, err)
}

// statusFailure is the failure of an error status.
func statusFailure(status int, h http.Header, msg, code, typ string, err error) *llm.Failure {
	kind := llm.KindForStatus(status)
	switch {
	case code == "context_length_exceeded" || typ == "exceed_context_size_error" ||
		(status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity) && llm.ContextTooLong(msg):
		kind = llm.KindContextTooLong
	case code == "model_not_found" || kind == llm.KindBadRequest && modelNotFound(strings.ToLower(msg)):
		kind = llm.KindNotFound
	}
	return llm.StatusFailure(Name, status, h, kind, msg, kind.Temporary() && code != "insufficient_quota", err)
}

// eventFailure is the failure of an error event in a stream that began with 200 OK.
func eventFailure(data []byte, err error) *llm.Failure {
	msg, code, typ := bodyMessage(data)
	kind := llm.KindUnavailable
	switch {
	case code == "context_length_exceeded" || llm.ContextTooLong(msg):
		kind = llm.KindContextTooLong
	case code == "rate_limit_exceeded" || typ == "rate_limit_error" || typ == "rate_limit_exceeded":
		kind = llm.KindRateLimited
	case typ == "invalid_request_error":
		kind = llm.KindBadRequest
	}
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	return llm.EventFailure(Name, kind, msg, err)
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

// modelNotFound reports whether a lower-cased error message says the model does not exist.
func modelNotFound(msg string) bool {
	return strings.Contains(msg, "model") &&
		(strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist"))
}
