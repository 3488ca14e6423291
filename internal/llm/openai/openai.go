// Package openai is an llm.Provider on the OpenAI Chat Completions API, through the
// official openai-go SDK. With a base URL it serves any server that speaks that API:
// OpenAI, Ollama (http://localhost:11434/v1), vLLM, the llama.cpp server, LM Studio and
// others.
//
// Mapping of the llm contract onto Chat Completions:
//   - Request.System is the first message, of role "system"; system messages inside the
//     conversation stay where they are.
//   - Tools are "function" tools whose parameters are the tool's JSON Schema; the model may
//     call several in one answer (parallel tool calls).
//   - A tool result is a "tool" message. Chat Completions has no error flag: an error
//     result is its text as the loop renders it ("Error: <message>"), with no prefix of
//     the provider's own, so that every provider shows the model the same text.
//   - Request.OutputSchema becomes response_format {type: json_schema}, strict only when
//     the schema meets the strict-mode rules (see [StrictCompatible]), else non-strict.
//   - MaxOutputTokens (else Options.MaxTokens) is max_completion_tokens on OpenAI's own
//     endpoint and max_tokens on any other base URL (the field compatible servers read).
//   - The answer is streamed with stream_options.include_usage, so that the last chunk
//     carries the token usage; tool-call deltas are reassembled by index. For a model that
//     Options.Buffered names, the answer is asked for whole (no stream) and yielded as one
//     piece, for servers that cannot stream tool calls.
//
// Failures end the stream with an *llm.ProviderError; see [Provider.Stream] for retries.
// This package must not import gRPC, generated protos or the loop.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// Name is the provider's name.
const Name = "openai"

// DefaultBaseURL is OpenAI's own endpoint, used when Options.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// Options configure a Provider; see llm.HTTPOptions. Retries are bounded by
// llm.DefaultMaxRetries, llm.MaxMaxRetries, llm.DefaultRetryDelay and llm.MaxRetryAfter.
type Options = llm.HTTPOptions

// Provider is an llm.Provider on the Chat Completions API. It is safe for concurrent use.
type Provider struct {
	completions  openai.ChatCompletionService
	defaultModel string
	maxTokens    int  // for requests that set none; zero: none
	official     bool // the base URL is OpenAI's own
	buffered     func(model string) bool
	call         *llm.Caller[openai.ChatCompletionNewParams, openai.ChatCompletionChunk]
}

var (
	_ llm.Provider       = (*Provider)(nil)
	_ llm.DefaultModeler = (*Provider)(nil)
)

// New returns a provider with o.
func New(o Options) (*Provider, error) {
	base, u, err := llm.ParseBaseURL(Name, o.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	if o.Timeout < 0 || o.MaxTokens < 0 {
		return nil, errors.New("openai: negative timeout or max tokens")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = llm.DefaultHTTPClient()
	}
	p := &Provider{
		defaultModel: o.DefaultModel,
		maxTokens:    o.MaxTokens,
		official:     strings.EqualFold(u.Hostname(), "api.openai.com"),
		buffered:     o.Buffered,
	}
	// The service is built without openai.NewClient, which would read OPENAI_* variables
	// of the environment: the options alone configure the provider. The SDK's own retries
	// are off; Stream retries, so that it can also retry a stream that fails before its
	// first chunk.
	p.completions = openai.NewChatCompletionService(
		option.WithHTTPClient(hc),
		option.WithBaseURL(base),
		option.WithAPIKey(o.APIKey),
		option.WithMaxRetries(0),
	)
	p.call = llm.NewCaller(Name, llm.CallOptions{MaxRetries: o.MaxRetries, RetryDelay: o.RetryDelay, Timeout: o.Timeout, Logger: o.Logger},
		llm.SDK[openai.ChatCompletionNewParams, openai.ChatCompletionChunk]{Prepare: p.prepare, Open: p.open, APIFailure: apiFailure, StatusFailure: bodyFailure})
	return p, nil
}

// Name returns "openai".
func (p *Provider) Name() string { return Name }

// DefaultModel returns the model of requests that name none.
func (p *Provider) DefaultModel() string { return p.defaultModel }

// Stream sends req to the Chat Completions API and yields the answer as it arrives: text
// deltas, tool-call deltas (ID and name first, then the arguments in pieces), and a final
// chunk with the assembled answer, the usage and the finish reason. Response.Model is
// "openai/" and the model the server says answered.
//
// A call that fails with 429, 408, 409, 5xx, a network error or a timeout is retried, up
// to MaxRetries times, with exponential backoff or after the server's retry-after-ms or
// Retry-After, and only while nothing has been yielded; any other 4xx is sent once,
// whatever the server's X-Should-Retry says. A stream then ends with an
// *llm.ProviderError, or with ctx's error once ctx is done: cancellation aborts the HTTP
// request at once. The error carries the HTTP status and the server's own message (at
// most 1 KiB of it, an HTML page without its markup). When a streamed request fails in a
// way that shows the server cannot stream (an answer that is not an event stream, or an
// error that speaks of streaming), the error says so and names the fix: `stream: false`.
func (p *Provider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return p.call.Stream(ctx, req)
}

func (p *Provider) prepare(_ context.Context, req *llm.Request) (openai.ChatCompletionNewParams, string, error) {
	params, err := p.params(req)
	return params, string(params.Model), err
}

// open sends the attempt-th request of a call.
func (p *Provider) open(ctx context.Context, params *openai.ChatCompletionNewParams, attempt int, x *llm.Exchange) (llm.EventStream[openai.ChatCompletionChunk], llm.Answer[openai.ChatCompletionChunk]) {
	opts := []option.RequestOption{option.WithResponseInto(&x.Response), option.WithMiddleware(x.Middleware),
		option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(attempt-1))}
	model := string(params.Model)
	if p.buffered != nil && p.buffered(model) {
		whole := *params
		whole.StreamOptions = openai.ChatCompletionStreamOptionsParam{} // not streamed
		return &bufferedStream{fetch: func() (*openai.ChatCompletion, error) { return p.completions.New(ctx, whole, opts...) }, x: x},
			newAccumulator(model)
	}
	s := &eventStream{x: x, model: model}
	s.Stream = p.completions.NewStreaming(ctx, *params, append(opts, option.WithMiddleware(s.keepStart))...)
	return s, newAccumulator(model)
}

// maxBodyStart bounds how much of the start of a streamed answer is kept, to tell what
// the server sent when it was not an event stream.
const maxBodyStart = 64 << 10

// eventStream is the SDK's stream of a streamed answer. Its errors say that the request
// was streamed. A 2xx answer without any event ends it with a *notStreamError (the server
// may not stream) when the body was not empty or the Content-Type not text/event-stream.
type eventStream struct {
	*ssestream.Stream[openai.ChatCompletionChunk]
	x      *llm.Exchange
	model  string
	start  *bodyStart // of a 2xx answer, until its first event
	events bool
	err    error
}

// keepStart is middleware that has the start of a 2xx answer's body kept.
func (s *eventStream) keepStart(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(r)
	if resp != nil && resp.Body != nil && resp.StatusCode < 300 {
		s.start = &bodyStart{ReadCloser: resp.Body}
		resp.Body = s.start
	}
	return resp, err
}

func (s *eventStream) Next() bool {
	if s.Stream.Next() {
		if !s.events && s.start != nil {
			s.start.stop()
		}
		s.events = true
		return true
	}
	if !s.events && s.Stream.Err() == nil {
		s.err = s.notStream()
	}
	return false
}

func (s *eventStream) Err() error {
	if s.err != nil {
		return s.err
	}
	if err := s.Stream.Err(); err != nil {
		return &streamedError{err: err, model: s.model}
	}
	return nil
}

// notStream is the error of an answer that ended without an event, or nil when it was an
// empty event stream.
func (s *eventStream) notStream() error {
	res := s.x.Response
	if res == nil || s.start == nil {
		return nil
	}
	body := bytes.TrimSpace(s.start.buf)
	ct := res.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); mt == "text/event-stream" && len(body) == 0 {
		return nil
	}
	return &notStreamError{status: res.StatusCode, contentType: mediaType(ct), body: body, model: s.model}
}

// bodyStart keeps the first maxBodyStart bytes read from a body, until stopped.
type bodyStart struct {
	io.ReadCloser
	buf     []byte
	stopped bool
}

func (b *bodyStart) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if !b.stopped {
		b.buf = append(b.buf, p[:min(n, maxBodyStart-len(b.buf))]...)
	}
	return n, err
}

func (b *bodyStart) stop() { b.stopped, b.buf = true, nil }

// bufferedStream is the answer to a request that was not streamed, as a stream of one
// chunk: the whole answer, its finish reason and its usage.
type bufferedStream struct {
	fetch func() (*openai.ChatCompletion, error)
	x     *llm.Exchange
	done  bool
	cur   openai.ChatCompletionChunk
	err   error
}

func (b *bufferedStream) Next() bool {
	if b.done {
		return false
	}
	b.done = true
	c, err := b.fetch()
	if err != nil {
		b.err = err
		return false
	}
	if len(c.Choices) == 0 {
		// An error object, or an answer with nothing in it.
		status := 0
		if b.x.Response != nil {
			status = b.x.Response.StatusCode
		}
		b.err = &noChoicesError{status: status, body: c.RawJSON()}
		return false
	}
	b.cur, b.err = wholeChunk(c)
	return b.err == nil
}

func (b *bufferedStream) Current() openai.ChatCompletionChunk { return b.cur }
func (b *bufferedStream) Err() error                          { return b.err }
func (b *bufferedStream) Close() error                        { return nil }

// wholeChunk is a completion as the one chunk of a stream that carries all of it. It goes
// through JSON so that the chunk records which fields were present, as a streamed one does.
func wholeChunk(c *openai.ChatCompletion) (openai.ChatCompletionChunk, error) {
	type call struct {
		Index    int    `json:"index"`
		ID       string `json:"id,omitempty"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type choice struct {
		Index int `json:"index"`
		Delta struct {
			Role      string `json:"role"`
			Content   string `json:"content,omitempty"`
			Refusal   string `json:"refusal,omitempty"`
			ToolCalls []call `json:"tool_calls,omitempty"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	}
	out := struct {
		ID      string          `json:"id"`
		Object  string          `json:"object"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Choices []choice        `json:"choices"`
		Usage   json.RawMessage `json:"usage,omitempty"`
	}{ID: c.ID, Object: "chat.completion.chunk", Created: c.Created, Model: c.Model}
	for _, ch := range c.Choices {
		var x choice
		x.Index = int(ch.Index)
		x.FinishReason = ch.FinishReason
		x.Delta.Role = "assistant"
		x.Delta.Content, x.Delta.Refusal = ch.Message.Content, ch.Message.Refusal
		for i, tc := range ch.Message.ToolCalls {
			y := call{Index: i, ID: tc.ID, Type: "function"}
			y.Function.Name, y.Function.Arguments = tc.Function.Name, tc.Function.Arguments
			x.Delta.ToolCalls = append(x.Delta.ToolCalls, y)
		}
		out.Choices = append(out.Choices, x)
	}
	if c.JSON.Usage.Valid() {
		out.Usage = json.RawMessage(c.Usage.RawJSON())
	}
	b, err := json.Marshal(out)
	if err != nil {
		return openai.ChatCompletionChunk{}, err
	}
	var chunk openai.ChatCompletionChunk
	if err := json.Unmarshal(b, &chunk); err != nil {
		return openai.ChatCompletionChunk{}, err
	}
	return chunk, nil
}
