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
	"strconv"

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

// Options configure a Provider; see llm.HTTPOptions. Retries are bounded by
// llm.DefaultMaxRetries, llm.MaxMaxRetries, llm.DefaultRetryDelay and llm.MaxRetryAfter.
type Options = llm.HTTPOptions

// Provider is an llm.Provider on the Messages API. It is safe for concurrent use.
type Provider struct {
	messages     anthropic.MessageService
	defaultModel string
	maxTokens    int
	call         *llm.Caller[anthropic.MessageNewParams, anthropic.MessageStreamEventUnion]
}

var (
	_ llm.Provider       = (*Provider)(nil)
	_ llm.DefaultModeler = (*Provider)(nil)
)

// New returns a provider with o.
func New(o Options) (*Provider, error) {
	base, _, err := llm.ParseBaseURL(Name, o.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	if o.Timeout < 0 || o.MaxTokens < 0 {
		return nil, errors.New("anthropic: negative timeout or max tokens")
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = llm.DefaultHTTPClient()
	}
	p := &Provider{defaultModel: o.DefaultModel, maxTokens: o.MaxTokens}
	if p.maxTokens == 0 {
		p.maxTokens = DefaultMaxTokens
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
	p.call = llm.NewCaller(Name, llm.CallOptions{MaxRetries: o.MaxRetries, RetryDelay: o.RetryDelay, Timeout: o.Timeout, Logger: o.Logger},
		llm.SDK[anthropic.MessageNewParams, anthropic.MessageStreamEventUnion]{Prepare: p.prepare, Open: p.open, APIFailure: apiFailure, StatusFailure: bodyFailure})
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
// nothing has been yielded; any other 4xx is sent once, whatever the server's
// X-Should-Retry says. A stream then ends with an *llm.ProviderError, or with ctx's
// error once ctx is done: cancellation aborts the HTTP request at once.
func (p *Provider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return p.call.Stream(ctx, req)
}

func (p *Provider) prepare(ctx context.Context, req *llm.Request) (anthropic.MessageNewParams, string, error) {
	params, err := p.params(req)
	if err == nil && req.Temperature != nil {
		p.call.Logger().DebugContext(ctx, "temperature not sent: the Messages API no longer takes it")
	}
	return params, string(params.Model), err
}

// open sends the attempt-th request of a call.
func (p *Provider) open(ctx context.Context, params *anthropic.MessageNewParams, attempt int, x *llm.Exchange) (llm.EventStream[anthropic.MessageStreamEventUnion], llm.Answer[anthropic.MessageStreamEventUnion]) {
	stream := p.messages.NewStreaming(ctx, *params, option.WithResponseInto(&x.Response), option.WithMiddleware(x.Middleware),
		option.WithHeader("X-Stainless-Retry-Count", strconv.Itoa(attempt-1)))
	return stream, newAccumulator(string(params.Model))
}
