// Package anthropic is an llm.Provider on Anthropic's Messages API, through the official
// anthropic-sdk-go SDK (v2, API version 2026-10-21).
//
// Mapping of the llm contract onto the Messages API:
//   - Request.System is the top-level system prompt; system messages inside the
//     conversation are appended to it, as further text blocks.
//   - Tools are custom tools whose input_schema is the tool's JSON Schema. The model's
//     calls are tool_use blocks; results go back as tool_result blocks, with is_error for
//     failed calls. Consecutive tool results, and any other consecutive messages of one
//     role, are grouped into one message, tool results first.
//   - Request.OutputSchema uses the API's native structured outputs:
//     output_config.format {type: json_schema, schema}. A schema outside what the API
//     supports is first adapted by the SDK's own transformation (objects closed with
//     additionalProperties: false, unsupported constraints moved into descriptions).
//   - max_tokens is required: MaxOutputTokens, else Options.MaxTokens, else 4096.
//   - Request.Temperature is not sent: API version 2026-10-21 removed the sampling
//     parameters and refuses them.
//   - The SDK's OpenTelemetry spans are off, so that the caller's tracing is not doubled.
//
// Usage: InputTokens counts all the prompt's tokens, cached ones included
// (input_tokens + cache_creation_input_tokens + cache_read_input_tokens).
//
// Failures end the stream with an *llm.ProviderError; see [Provider.Stream] for retries.
// This package must not import gRPC, generated protos or the loop.
package anthropic

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

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// Name is the provider's name.
const Name = "anthropic"

// DefaultBaseURL is Anthropic's endpoint, used when Options.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is max_tokens when neither the request nor Options.MaxTokens set it.
const DefaultMaxTokens = 4096

// Retry bounds.
const (
	// DefaultMaxRetries is the number of retries when Options.MaxRetries is zero.
	DefaultMaxRetries = llm.DefaultMaxRetries
	// MaxMaxRetries caps Options.MaxRetries.
	MaxMaxRetries = llm.MaxMaxRetries
	// DefaultRetryDelay is the first backoff when Options.RetryDelay is zero.
	DefaultRetryDelay = 500 * time.Millisecond
	// MaxRetryAfter is the longest retry-after the provider waits for; a longer one ends
	// the call at once with the error, its RetryAfter set.
	MaxRetryAfter = llm.MaxRetryAfter
)

// Options configure a Provider.
type Options struct {
	// APIKey is the API key; empty sends none.
	APIKey string
	// BaseURL is the API root, without /v1; empty means DefaultBaseURL.
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
	// MaxTokens is max_tokens for requests without MaxOutputTokens; zero means
	// DefaultMaxTokens.
	MaxTokens int
	// Logger receives retries (warn) and calls (debug); nil discards.
	Logger *slog.Logger
}

// Provider is an llm.Provider on the Messages API. It is safe for concurrent use.
type Provider struct {
	messages     anthropic.MessageService
	defaultModel string
	maxTokens    int
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
		return nil, errors.New("anthropic: base URL must be an absolute http(s) URL: " + base)
	}
	if o.Timeout < 0 || o.MaxTokens < 0 {
		return nil, errors.New("anthropic: negative timeout or max tokens")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = llm.DefaultHTTPClient()
	}
	p := &Provider{
		defaultModel: o.DefaultModel,
		maxTokens:    o.MaxTokens,
		maxRetries:   llm.Retries(o.MaxRetries),
		retryDelay:   o.RetryDelay,
		timeout:      o.Timeout,
		log:          o.Logger,
	}
	if p.maxTokens == 0 {
		p.maxTokens = DefaultMaxTokens
	}
	if p.retryDelay <= 0 {
		p.retryDelay = DefaultRetryDelay
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	// The options alone configure the client: no ANTHROPIC_* variables, profiles or
	// credential files. The SDK's retries are off (Stream retries, also when a stream
	// fails before its first chunk) and so are its OpenTelemetry spans.
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithoutOpenTelemetry(),
	}
	if o.APIKey != "" {
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	client := anthropic.NewClient(opts...)
	p.messages = client.Messages
	return p, nil
}

// Name returns "anthropic".
func (p *Provider) Name() string { return Name }

// DefaultModel returns the model of requests that name none.
func (p *Provider) DefaultModel() string { return p.defaultModel }

// Stream sends req to the Messages API and yields the answer as it arrives: text deltas,
// tool-call deltas (ID and name first, then the input JSON in pieces), and a final chunk
// with the assembled answer, the usage and the stop reason (such as "end_turn" or
// "tool_use"). Response.Model is "anthropic/" and the model the API says answered.
//
// A call that fails with 429, 408, 409, 5xx, 529 (overloaded), an error event before the
// first chunk, a network error or a timeout is retried, up to MaxRetries times, with
// exponential backoff or after the server's retry-after-ms or retry-after, and only while
// nothing has been yielded. A stream then ends with an *llm.ProviderError, or with ctx's
// error once ctx is done: cancellation aborts the HTTP request at once.
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
		if req.Temperature != nil {
			p.log.DebugContext(ctx, "temperature not sent: the Messages API no longer takes it", "provider", Name)
		}
		llm.StreamWithRetries(ctx, llm.RetryOptions{Provider: Name, Model: string(params.Model), MaxRetries: p.maxRetries, Delay: p.retryDelay, Logger: p.log},
			func(n int) (bool, bool, *llm.Failure) { return p.attempt(ctx, &params, n, yield) }, yield)
	}
}

// errAttemptTimeout is the cause of an attempt's context when Options.Timeout ends it.
var errAttemptTimeout = errors.New("anthropic: attempt timed out")

// attempt sends one request and streams its answer. done reports that the stream is over:
// the answer was yielded whole, or the consumer stopped. Otherwise f is the failure and
// yielded reports whether a chunk was yielded before it.
func (p *Provider) attempt(ctx context.Context, params *anthropic.MessageNewParams, attempt int, yield func(llm.Chunk, error) bool) (yielded, done bool, f *llm.Failure) {
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
	stream := p.messages.NewStreaming(actx, *params, option.WithResponseInto(&res), watch,
		option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(attempt-1)))
	defer func() { _ = stream.Close() }()

	acc := newAccumulator(string(params.Model))
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
