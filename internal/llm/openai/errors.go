package openai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"html"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// maxMessage bounds how much of a server's own text an error carries.
const maxMessage = 1 << 10

// apiFailure is the failure of the SDK's error for an error status or for an error event
// of the stream, of an answer that was not what the request asked for, or nil when err
// is none of these.
func apiFailure(err error) *llm.Failure {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	var notStream *notStreamError
	var noChoice *noChoicesError
	switch {
	case errors.As(err, &notStream):
		return notStream.failure(err)
	case errors.As(err, &noChoice):
		return noChoice.failure(err)
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

// statusFailure is the failure of an error status. A 4xx other than 408, 409 and 429
// says the same of the same request every time (llm.Deterministic), and so does an error
// that shows the server cannot stream: neither is retried, whatever the server's
// X-Should-Retry says.
func statusFailure(status int, h http.Header, msg, code, typ string, err error) *llm.Failure {
	msg = clip(msg)
	kind := statusKind(status, msg, code, typ)
	advised := adviseStream(msg, err)
	f := llm.StatusFailure(Name, status, h, kind, advised, kind.Temporary() && code != "insufficient_quota", err)
	if advised != msg {
		f.Retry = false
	}
	return f
}

// statusKind is the kind of an error status whose body says msg, code and typ.
func statusKind(status int, msg, code, typ string) llm.ErrorKind {
	kind := llm.KindForStatus(status)
	switch {
	case code == "context_length_exceeded" || typ == "exceed_context_size_error" ||
		(status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity) && llm.ContextTooLong(msg):
		kind = llm.KindContextTooLong
	case code == "model_not_found" || kind == llm.KindBadRequest && modelNotFound(strings.ToLower(msg)):
		kind = llm.KindNotFound
	}
	return kind
}

// eventFailure is the failure of an error event in a stream that began with 200 OK.
func eventFailure(data []byte, err error) *llm.Failure {
	kind, msg := errorObject(data)
	return llm.EventFailure(Name, kind, adviseStream(msg, err), err)
}

// errorObject is the kind and the message of an error object that came in an answer
// that began with 200 OK: by the HTTP status its code names (vLLM and llama.cpp give
// one), else by its code and type; unavailable when neither says more.
func errorObject(data []byte) (llm.ErrorKind, string) {
	msg, code, typ := bodyMessage(data)
	if status, err := strconv.Atoi(code); err == nil && status >= 400 && status < 600 {
		return statusKind(status, msg, code, typ), msg
	}
	kind := llm.KindUnavailable
	switch {
	case code == "context_length_exceeded" || llm.ContextTooLong(msg):
		kind = llm.KindContextTooLong
	case code == "rate_limit_exceeded" || typ == "rate_limit_error" || typ == "rate_limit_exceeded":
		kind = llm.KindRateLimited
	case typ == "invalid_request_error":
		kind = llm.KindBadRequest
	}
	return kind, msg
}

// bodyMessage finds the message of an error body in the shapes OpenAI and compatible
// servers use: {"error": {"message", "code", "type"}}, {"error": "..."},
// {"message", "code", "type"} and {"detail": "..."}; else it is the body's text (that of
// an HTML page without its markup). A body {"error": "TypeError", "message": "..."}
// names the error and says what happened: the message is both. The message is clipped
// to maxMessage bytes of valid UTF-8.
func bodyMessage(body []byte) (msg, code, typ string) {
	body = bytes.TrimSpace(body)
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Code    json.RawMessage `json:"code"`
		Type    string          `json:"type"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) != nil {
		return clip(bodyText(body)), "", ""
	}
	message, detail := jsonString(v.Message), jsonString(v.Detail)
	if len(v.Error) > 0 {
		var obj struct {
			Message json.RawMessage `json:"message"`
			Code    json.RawMessage `json:"code"`
			Type    string          `json:"type"`
		}
		if json.Unmarshal(v.Error, &obj) == nil {
			if m := jsonString(obj.Message); m != "" {
				return clip(m), rawString(obj.Code), obj.Type
			}
		}
		if name := rawText(v.Error); name != "" {
			for _, more := range []string{message, detail} {
				if more != "" && !strings.Contains(more, name) {
					return clip(name + ": " + more), rawString(v.Code), v.Type
				}
			}
			return clip(cmp.Or(message, detail, name)), rawString(v.Code), v.Type
		}
	}
	if m := cmp.Or(message, detail); m != "" {
		return clip(m), rawString(v.Code), v.Type
	}
	return clip(string(body)), "", ""
}

// jsonString is the value of a JSON string, the JSON text of another value but null
// (a message may be an object), or "".
func jsonString(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if raw[0] == '{' || raw[0] == '[' {
		return string(raw)
	}
	return ""
}

// rawText is the value of a JSON string, or "".
func rawText(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
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

// clip is s without surrounding space, as valid UTF-8, cut to at most maxMessage bytes
// on a character boundary; a cut is marked with "…".
func clip(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// bodyText is the text of a body that is not JSON: an HTML page (the error page of a
// proxy) without its markup, scripts and styles, its spaces collapsed; any other body as
// it is.
func bodyText(body []byte) string {
	s := strings.TrimSpace(string(body))
	if !strings.HasPrefix(s, "<") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		lt := strings.IndexByte(s, '<')
		if lt < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:lt])
		b.WriteByte(' ')
		s = s[lt:]
		gt := strings.IndexByte(s, '>')
		if gt < 0 {
			break
		}
		tag := strings.ToLower(s[1:gt])
		s = s[gt+1:]
		for _, skip := range []string{"script", "style"} {
			if tag == skip || strings.HasPrefix(tag, skip+" ") {
				end := strings.Index(strings.ToLower(s), "</"+skip)
				if end < 0 {
					end = len(s)
				}
				s = s[end:]
			}
		}
	}
	text := strings.Join(strings.Fields(html.UnescapeString(b.String())), " ")
	if text == "" {
		return strings.TrimSpace(string(body))
	}
	return text
}

// modelNotFound reports whether a lower-cased error message says the model does not exist.
func modelNotFound(msg string) bool {
	return strings.Contains(msg, "model") &&
		(strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "not exist"))
}

// streamedError is the error of a streamed request for model: it lets a failure advise
// against streaming when the server says it cannot stream.
type streamedError struct {
	err   error
	model string
}

func (e *streamedError) Error() string { return e.err.Error() }
func (e *streamedError) Unwrap() error { return e.err }

// streamAdvice is what to do when the server may not stream answers of model.
func streamAdvice(model string) string {
	return "the server may not support streaming; set `stream: false` for this provider, or `stream_models: {" +
		strconv.Quote(model) + ": false}` for this model"
}

// adviseStream is msg, followed by streamAdvice when err is the error of a streamed
// request and msg speaks of streaming ("stream", "streaming", "stream_options", but not
// "upstream").
func adviseStream(msg string, err error) string {
	var s *streamedError
	if !errors.As(err, &s) || !speaksOfStreaming(msg) {
		return msg
	}
	return msg + "; " + streamAdvice(s.model)
}

func speaksOfStreaming(msg string) bool {
	msg = strings.ToLower(msg)
	for i := 0; ; {
		j := strings.Index(msg[i:], "stream")
		if j < 0 {
			return false
		}
		i += j
		if i == 0 || !isLetter(msg[i-1]) {
			return true
		}
		i += len("stream")
	}
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' }

// notStreamError ends a streamed request whose answer held no event: the server sent
// something else than an event stream, such as a whole answer.
type notStreamError struct {
	status      int
	contentType string
	body        []byte // the start of the body
	model       string
}

func (e *notStreamError) Error() string {
	return "the server answered a streamed request with " + e.contentType + " instead of an event stream"
}

// failure is the error that says what the server sent and that it may not stream. An
// error object in the body is classified as the error event it stands for, but is not
// retried when it speaks of streaming.
func (e *notStreamError) failure(err error) *llm.Failure {
	var v struct {
		Choices json.RawMessage `json:"choices"`
		Error   json.RawMessage `json:"error"`
	}
	isJSON := json.Unmarshal(bytes.TrimSpace(e.body), &v) == nil
	advice := streamAdvice(e.model)
	var msg string
	switch {
	case isJSON && len(v.Choices) > 0:
		msg = "the server answered a streamed request with a whole answer (" + e.contentType + ") instead of an event stream; " + advice
	case isJSON && len(v.Error) > 0:
		kind, m := errorObject(e.body)
		f := llm.EventFailure(Name, kind, m+" ("+e.Error()+"); "+advice, err)
		f.Err.StatusCode = e.status
		f.Retry = f.Retry && !speaksOfStreaming(m)
		return f
	case len(bytes.TrimSpace(e.body)) > 0:
		msg = e.Error() + ": " + clip(bodyText(e.body)) + "; " + advice
	default:
		msg = e.Error() + "; " + advice
	}
	return llm.MalformedFailure(Name, e.status, msg, err)
}

// noChoicesError ends a whole answer that held no choice.
type noChoicesError struct {
	status int
	body   string
}

func (e *noChoicesError) Error() string { return "the answer held no choice" }

// failure is the error of the error object the answer is, or else says that the answer
// held nothing.
func (e *noChoicesError) failure(err error) *llm.Failure {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal([]byte(e.body), &v) == nil && len(v.Error) > 0 {
		kind, msg := errorObject([]byte(e.body))
		f := llm.EventFailure(Name, kind, msg, err)
		f.Err.StatusCode = e.status
		return f
	}
	return llm.MalformedFailure(Name, e.status, e.Error()+": "+clip(e.body), err)
}

// mediaType is the media type of a Content-Type header, "no Content-Type" when there is
// none; bounded, for error messages.
func mediaType(contentType string) string {
	if contentType == "" {
		return "no Content-Type"
	}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		contentType = mt
	}
	if len(contentType) > 100 {
		contentType = contentType[:100] + "…"
	}
	return strings.ToValidUTF8(contentType, "\uFFFD")
}
