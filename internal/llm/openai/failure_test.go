package openai_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
	"github.com/toolmesh/toolmesh/internal/llm/openai"
)

// answer is a handler that answers every request with status, a Content-Type and body,
// and the extra headers h.
func answer(status int, contentType, body string, h ...string) func(w http.ResponseWriter, _ *http.Request, _ int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) {
		for i := 0; i+1 < len(h); i += 2 {
			w.Header().Set(h[i], h[i+1])
		}
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

var hi = &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}

// streamHint is what an error says of a server that may not stream, for the model
// "gpt-test".
const streamHint = "the server may not support streaming; set `stream: false` for this provider, or `stream_models: {\"gpt-test\": false}` for this model"

// TestErrorCarriesServerText: whatever the shape of an error body (OpenAI's error
// object, another JSON object, plain text, an HTML page), the error carries the HTTP
// status and the server's own text, at most 1 KiB of it, cut on a character boundary and
// valid UTF-8; streamed or not.
func TestErrorCarriesServerText(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		want        string
	}{
		{"openai object", 500, "application/json", `{"error":{"message":"TypeError: cannot read properties of undefined","type":"server_error","param":null,"code":null}}`,
			"TypeError: cannot read properties of undefined"},
		{"error name and message", 500, "application/json", `{"error":"TypeError","message":"cannot read properties of undefined"}`,
			"TypeError: cannot read properties of undefined"},
		{"error name and detail", 500, "application/json", `{"error":"TypeError","detail":"cannot read properties of undefined"}`,
			"TypeError: cannot read properties of undefined"},
		{"detail", 500, "application/json", `{"detail":"TypeError: cannot read properties of undefined"}`, "TypeError: cannot read properties of undefined"},
		{"message", 503, "application/json", `{"message":"TypeError: cannot read properties of undefined"}`, "TypeError: cannot read properties of undefined"},
		{"plain text", 500, "text/plain", "TypeError: cannot read properties of undefined\n", "TypeError: cannot read properties of undefined"},
		{"html", 502, "text/html", "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n</body>\r\n</html>\r\n",
			"502 Bad Gateway 502 Bad Gateway nginx/1.25.3"},
		{"html with a script", 403, "text/html; charset=UTF-8", `<!DOCTYPE html><html><head><style>body{color:red}</style><script>var a = "<b>";</script></head><body><p>Access denied &amp; logged</p></body></html>`,
			"Access denied & logged"},
		{"upstream is not stream", 503, "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
			"upstream connect error or disconnect/reset before headers. reset reason: connection failure"},
		{"long openai message", 500, "application/json", `{"error":{"message":"` + long + `","type":"server_error"}}`, long[:1024] + "…"},
		{"long text", 400, "text/plain", "x" + long, "x" + long[:1022] + "…"},
		{"not UTF-8", 400, "text/plain", "bad \xff\xfe request", "bad \ufffd request"},
		{"empty", 500, "", "", "Internal Server Error"},
	} {
		for _, buffered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s buffered=%v", tc.name, buffered), func(t *testing.T) {
				s := llmtest.NewServer(t, answer(tc.status, tc.contentType, tc.body))
				p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = -1; o.Buffered = func(string) bool { return buffered } })
				_, err := llm.Collect(p.Stream(t.Context(), hi))
				pe := llmtest.ProviderError(t, err, openai.Name)
				if pe.StatusCode != tc.status || pe.Message != tc.want {
					t.Errorf("error = HTTP %d %q\nwant    HTTP %d %q", pe.StatusCode, pe.Message, tc.status, tc.want)
				}
				if !utf8.ValidString(pe.Message) {
					t.Errorf("message is not UTF-8: %q", pe.Message)
				}
				if want := fmt.Sprintf("(HTTP %d): %s", tc.status, tc.want); !strings.Contains(err.Error(), want) {
					t.Errorf("Error() = %q, want it to hold %q", err.Error(), want)
				}
			})
		}
	}
}

// TestDeterministicStatusesNotRetried: a 4xx other than 408, 409 and 429 is sent once,
// even when the server says X-Should-Retry: true; 408, 409, 429 and 5xx are retried as
// configured, by the provider alone (the SDK's own retries would multiply the count).
func TestDeterministicStatusesNotRetried(t *testing.T) {
	for _, tc := range []struct {
		status   int
		requests int
	}{
		{400, 1}, {401, 1}, {403, 1}, {404, 1}, {405, 1}, {413, 1}, {415, 1}, {422, 1}, {451, 1},
		{408, 3}, {409, 3}, {429, 3}, {500, 3}, {502, 3}, {503, 3}, {504, 3},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s := llmtest.NewServer(t, answer(tc.status, "application/json", errorBody("refused for the test", "invalid_request_error", ""), "X-Should-Retry", "true"))
			p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = 2; o.RetryDelay = time.Millisecond })
			_, err := llm.Collect(p.Stream(t.Context(), hi))
			pe := llmtest.ProviderError(t, err, openai.Name)
			if n := len(s.Requests()); n != tc.requests || pe.Attempts != tc.requests {
				t.Errorf("HTTP %d: the server received %d requests, the error says %d attempts; want %d", tc.status, n, pe.Attempts, tc.requests)
			}
			if pe.StatusCode != tc.status || pe.Message != "refused for the test" {
				t.Errorf("error = %v", err)
			}
		})
	}
}

// TestErrorAnswersNotRetried: an error that a server puts in an answer that began with
// 200 OK (an error event of a stream, or the body of a whole answer) is classified by the
// HTTP status it names, and a deterministic one is not retried.
func TestErrorAnswersNotRetried(t *testing.T) {
	vllm := `{"error":{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
	for _, tc := range []struct {
		name     string
		buffered bool
		handle   func(w http.ResponseWriter, r *http.Request, n int)
		want     error
		requests int
	}{
		{"error event with a 400 code", false, func(w http.ResponseWriter, _ *http.Request, _ int) { sse(w, vllm) }, llm.ErrBadRequest, 1},
		{"error event with a 503 code", false, func(w http.ResponseWriter, _ *http.Request, _ int) {
			sse(w, `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","code":503}}`)
		}, llm.ErrUnavailable, 3},
		{"whole answer with a 400 code", true, answer(200, "application/json", vllm), llm.ErrBadRequest, 1},
		{"whole answer that is an error object", true, answer(200, "application/json",
			`{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"invalid_request_error"}}`), llm.ErrBadRequest, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := llmtest.NewServer(t, tc.handle)
			p := newProvider(t, s, func(o *openai.Options) {
				o.MaxRetries = 2
				o.RetryDelay = time.Millisecond
				o.Buffered = func(string) bool { return tc.buffered }
			})
			_, err := llm.Collect(p.Stream(t.Context(), hi))
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			pe := llmtest.ProviderError(t, err, openai.Name)
			if n := len(s.Requests()); n != tc.requests || pe.Attempts != tc.requests {
				t.Errorf("the server received %d requests, the error says %d attempts; want %d", n, pe.Attempts, tc.requests)
			}
			if want := `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`; pe.Message != want {
				t.Errorf("message = %q, want %q", pe.Message, want)
			}
		})
	}
}

// TestStreamUnsupported: when a streamed request fails in a way that shows the server
// cannot stream (a whole answer, a body that is not an event stream, an error that says
// so), the error says the server may not support streaming and names `stream: false`; it
// is not retried when it is deterministic. A server that streams under another
// Content-Type still works, and a request already sent whole gets no such advice.
func TestStreamUnsupported(t *testing.T) {
	whole := `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-test","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}]}`
	for _, tc := range []struct {
		name     string
		handle   func(w http.ResponseWriter, r *http.Request, n int)
		buffered bool
		want     error
		status   int
		msg      string // empty: a successful answer
	}{
		{name: "whole JSON answer", handle: answer(200, "application/json", whole), want: llm.ErrMalformed, status: 200,
			msg: "the server answered a streamed request with a whole answer (application/json) instead of an event stream; " + streamHint},
		{name: "whole answer as an event stream", handle: answer(200, "text/event-stream", whole), want: llm.ErrMalformed, status: 200,
			msg: "the server answered a streamed request with a whole answer (text/event-stream) instead of an event stream; " + streamHint},
		{name: "plain text", handle: answer(200, "text/plain; charset=utf-8", "Streaming is disabled on this deployment.\n"), want: llm.ErrMalformed, status: 200,
			msg: "the server answered a streamed request with text/plain instead of an event stream: Streaming is disabled on this deployment.; " + streamHint},
		{name: "empty JSON", handle: answer(200, "application/json", ""), want: llm.ErrMalformed, status: 200,
			msg: "the server answered a streamed request with application/json instead of an event stream; " + streamHint},
		{name: "error object in a 200", handle: answer(200, "application/json", `{"error":{"message":"stream mode is not supported","type":"invalid_request_error"}}`),
			want: llm.ErrBadRequest, status: 200,
			msg: "stream mode is not supported (the server answered a streamed request with application/json instead of an event stream); " + streamHint},
		{name: "400 streaming not supported", handle: answer(400, "application/json", errorBody("Streaming is not supported for this model.", "invalid_request_error", "")),
			want: llm.ErrBadRequest, status: 400, msg: "Streaming is not supported for this model.; " + streamHint},
		{name: "400 stream_options", handle: answer(400, "application/json", errorBody("Unrecognized request argument supplied: stream_options", "invalid_request_error", "")),
			want: llm.ErrBadRequest, status: 400, msg: "Unrecognized request argument supplied: stream_options; " + streamHint},
		{name: "422 stream in a detail", handle: answer(422, "application/json", `{"detail":"'stream' is not permitted"}`),
			want: llm.ErrBadRequest, status: 422, msg: "'stream' is not permitted; " + streamHint},
		{name: "500 tools with stream", handle: answer(500, "application/json", `{"error":{"code":500,"message":"Cannot use tools with stream","type":"server_error"}}`),
			want: llm.ErrUnavailable, status: 500, msg: "Cannot use tools with stream; " + streamHint},
		{name: "error event", handle: func(w http.ResponseWriter, _ *http.Request, _ int) {
			sse(w, `{"error":{"message":"streaming is not implemented for tool calls","type":"invalid_request_error"}}`)
		}, want: llm.ErrBadRequest, msg: "streaming is not implemented for tool calls; " + streamHint},
		{name: "buffered: no advice", buffered: true, handle: answer(400, "application/json", errorBody("Streaming is not supported for this model.", "invalid_request_error", "")),
			want: llm.ErrBadRequest, status: 400, msg: "Streaming is not supported for this model."},
		{name: "events under another Content-Type", handle: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunk(`{"content":"streamed"}`, ""), chunk(`{}`, "stop"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := llmtest.NewServer(t, tc.handle)
			p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = -1; o.Buffered = func(string) bool { return tc.buffered } })
			resp, err := llm.Collect(p.Stream(t.Context(), hi))
			if tc.msg == "" {
				if err != nil || resp.Text != "streamed" {
					t.Fatalf("Collect = %+v, %v; want the streamed answer", resp, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			pe := llmtest.ProviderError(t, err, openai.Name)
			if pe.StatusCode != tc.status || pe.Message != tc.msg {
				t.Errorf("error = HTTP %d %q\nwant    HTTP %d %q", pe.StatusCode, pe.Message, tc.status, tc.msg)
			}
		})
	}
}

// TestStreamUnsupportedNotRetried: an answer to a streamed request that is not an event
// stream is refused after one request, although retries are allowed, and so is an error
// object sent that way, or a 5xx, that says the server cannot stream.
func TestStreamUnsupportedNotRetried(t *testing.T) {
	for _, tc := range []struct {
		status                  int
		contentType, body, want string
	}{
		{200, "text/html", "<html><body>Welcome to nginx!</body></html>",
			"openai: malformed (HTTP 200): the server answered a streamed request with text/html instead of an event stream: Welcome to nginx!; " + streamHint},
		{200, "application/json", `{"error":{"message":"stream not supported"}}`,
			"openai: unavailable (HTTP 200): stream not supported (the server answered a streamed request with application/json instead of an event stream); " + streamHint},
		// A 5xx is retried, but not one that says the server cannot stream: it would say so again.
		{500, "application/json", `{"error":{"code":500,"message":"Cannot use tools with stream","type":"server_error"}}`,
			"openai: unavailable (HTTP 500): Cannot use tools with stream; " + streamHint},
	} {
		s := llmtest.NewServer(t, answer(tc.status, tc.contentType, tc.body))
		p := newProvider(t, s, func(o *openai.Options) { o.MaxRetries = 2; o.RetryDelay = time.Millisecond })
		_, err := llm.Collect(p.Stream(t.Context(), hi))
		if err == nil || err.Error() != tc.want {
			t.Errorf("error = %v\nwant    %s", err, tc.want)
		}
		if n := len(s.Requests()); n != 1 {
			t.Errorf("%s: the server received %d requests, want 1", tc.body, n)
		}
	}
}
