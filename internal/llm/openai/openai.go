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
//   - A tool result is a "tool" message. Chat Completions has no error flag, so the content
//     of a result with IsError starts with [ToolErrorPrefix].
//   - Request.OutputSchema becomes response_format {type: json_schema}, strict only when
//     the schema meets the strict-mode rules (see [StrictCompatible]), else non-strict.
//   - MaxOutputTokens is max_completion_tokens on OpenAI's own endpoint and max_tokens on
//     any other base URL (the field compatible servers read).
//   - The answer is streamed with stream_options.include_usage, so that the last chunk
//     carries the token usage; tool-call deltas are reassembled by index.
//
// Failures end the stream with an *llm.ProviderError; see [Provider.Stream] for retries.
// This package must not import gRPC, generated protos or the loop.
package openai

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// Name is the provider's name.
const Name = "openai"

// DefaultBaseURL is OpenAI's own endpoint, used when Options.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1"

// ToolErrorPrefix starts the content of a tool message whose result is an error, since
// Chat Completions has no error flag for tool results.
const ToolErrorPrefix = "Tool error: "

// Retry bounds.
const (
	// DefaultMaxRetries is the number of retries when Options.MaxRetries is zero.
	DefaultMaxRetries = llm.DefaultMaxRetries
	// MaxMaxRetries caps Options.MaxRetries.
	MaxMaxRetries = llm.MaxMaxRetries
	// DefaultRetryDelay is the first backoff when Options.RetryDelay is zero.
	DefaultRetryDelay = 500 * time.Millisecond
	// MaxRetryAfter is the longest Retry-After the provider waits for; a longer one ends
	// the call at once with the error, its RetryAfter set.
	MaxRetryAfter = llm.MaxRetryAfter
)

// Options configure a Provider. The zero value talks to OpenAI without a key.
type Options struct {
	// APIKey is sent as a bearer token; empty sends none (local servers need none).
	APIKey string
	// BaseURL is the API root, such as "http://localhost:11434/v1"; empty means
	// DefaultBaseURL.
	BaseURL string
	// DefaultModel is used when a request names no model.
	DefaultModel string
	// HTTPClient sends the requests; nil means a client of its own on a clone of
	// http.DefaultTransport.
	HTTPClient *http.Client
	// MaxRetries bounds the retries of a call: 0 means DefaultMaxRetries, a negative
	// value none; it is capped at MaxMaxRetries.
	MaxRetries int
	// RetryDelay is the first backoff between retries when the server names no wait; it
	// doubles with each retry, up to 8s. Zero means DefaultRetryDelay.
	RetryDelay time.Duration
	// Timeout bounds each attempt of a call, from sending the request to the end of the
	// streamed answer; zero means no bound but the context's.
	Timeout time.Duration
	// Logger receives retries (warn) and calls (debug); nil discards.
	Logger *slog.Logger
}

// Provider is an llm.Provider on the Chat Completions API. It is safe for concurrent use.
type Provider struct {
	completions  openai.ChatCompletionService
	defaultModel string
	official     bool // the base URL is OpenAI's own
	maxRetries   int
	retryDelay   time.Duration
	timeout      time.Duration
	log          *slog.Logger
}

var (
	_ llm.Provider       = (*Provider)(nil)
	_ llm.DefaultModeler = (*Provider)(nil)
)

// New returns a provider with o.
func New(o Options) (*Provider, error) {
	base := strings.TrimSpace(o.BaseURL)
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("openai: base URL must be an absolute http(s) URL: " + base)
	}
	if o.Timeout < 0 {
		return nil, errors.New("openai: negative timeout")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = llm.DefaultHTTPClient()
	}
	p := &Provider{
		defaultModel: o.DefaultModel,
		official:     strings.EqualFold(u.Hostname(), "api.openai.com"),
		maxRetries:   llm.Retries(o.MaxRetries),
		retryDelay:   o.RetryDelay,
		timeout:      o.Timeout,
		log:          o.Logger,
	}
	if p.retryDelay <= 0 {
		p.retryDelay = DefaultRetryDelay
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
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
// Retry-After, and only while nothing has been yielded. A stream then ends with an
// *llm.ProviderError, or with ctx's error once ctx is done: cancellation aborts the HTTP
// request at once.
func (p *Provider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		if req == nil {
			yield(llm.Chunk{}, &llm.ProviderError{Provider: Name, Kind: llm.KindBadRequest, Message: "nil request"})
			return
		}
		if err := ctx.Err(); err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		params, err := p.params(req)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		llm.StreamWithRetries(ctx, llm.RetryOptions{Provider: Name, Model: string(params.Model), MaxRetries: p.maxRetries, Delay: p.retryDelay, Logger: p.log},
			func(n int) (bool, bool, *llm.Failure) { return p.attempt(ctx, &params, n, yield) }, yield)
	}
}

// errAttemptTimeout is the cause of an attempt's context when Options.Timeout ends it.
var errAttemptTimeout = errors.New("openai: attempt timed out")

// attempt sends one request and streams its answer. done reports that the stream is over:
// the answer was yielded whole, or the consumer stopped. Otherwise f is the failure and
// yielded reports whether a chunk was yielded before it.
func (p *Provider) attempt(ctx context.Context, params *openai.ChatCompletionNewParams, attempt int, yield func(llm.Chunk, error) bool) (yielded, done bool, f *llm.Failure) {
	actx := ctx
	if p.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(ctx, p.timeout, errAttemptTimeout)
		defer cancel()
	}
	var res *http.Response
	var readErr error
	watch := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil && resp.Body != nil {
			resp.Body = &llm.WatchedBody{ReadCloser: resp.Body, Err: &readErr}
		}
		return resp, err
	})
	stream := p.completions.NewStreaming(actx, *params, option.WithResponseInto(&res), watch,
		option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(attempt-1)))
	defer func() { _ = stream.Close() }()

	acc := newAccumulator(params.Model)
	for stream.Next() {
		for _, c := range acc.add(stream.Current()) {
			if ctx.Err() != nil {
				return yielded, false, networkFailure(ctx.Err())
			}
			yielded = true
			if !yield(c, nil) {
				return yielded, true, nil
			}
		}
	}
	if err := stream.Err(); err != nil {
		if errors.Is(context.Cause(actx), errAttemptTimeout) && ctx.Err() == nil {
			f := networkFailure(context.DeadlineExceeded)
			f.Err.Message = "no complete answer within the timeout of " + p.timeout.String()
			return yielded, false, f
		}
		return yielded, false, classify(err, res, readErr)
	}
	resp, f := acc.finish()
	if f != nil {
		return yielded, false, f
	}
	if ctx.Err() != nil {
		return yielded, false, networkFailure(ctx.Err())
	}
	yield(llm.Chunk{Done: resp}, nil)
	return true, true, nil
}
