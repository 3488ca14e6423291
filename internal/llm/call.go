package llm

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultRetryDelay is the first backoff of an HTTP provider whose Options.RetryDelay is
// zero.
const DefaultRetryDelay = 500 * time.Millisecond

// EventStream is an SDK's stream of the server-sent events of one answer.
type EventStream[E any] interface {
	Next() bool
	Current() E
	Err() error
	Close() error
}

// Answer assembles the events of one attempt into the chunks to yield and the answer.
type Answer[E any] interface {
	// Add takes one event and returns the chunks to yield for it.
	Add(E) []Chunk
	// Finish returns the assembled answer once the events are over, or, when they ended
	// before the answer was complete, an error that says so.
	Finish() (*Response, error)
}

// Draft is an answer as the events of a stream assemble it; a provider's Answer embeds
// it.
type Draft struct {
	Text  strings.Builder
	Calls []*ToolCall
	Usage Usage
	// FinishReason is the provider's reason, such as "stop".
	FinishReason string
	// Model is the model that answered, as the server names it, else as requested.
	Model string
}

// Response returns the draft as provider's answer.
func (d *Draft) Response(provider string) *Response {
	resp := &Response{
		Text:         d.Text.String(),
		Usage:        d.Usage,
		FinishReason: d.FinishReason,
		Model:        provider + "/" + d.Model,
	}
	for _, c := range d.Calls {
		resp.ToolCalls = append(resp.ToolCalls, *c)
	}
	return resp
}

// Exchange is what an attempt saw of its HTTP exchange.
type Exchange struct {
	// Response is the attempt's response, once one arrived.
	Response *http.Response
	// ReadErr is the error of a failed read of the response body, if any: it tells a
	// stream cut short apart from one that ends on an undecodable event.
	ReadErr error
}

// Middleware is middleware for an SDK's requests (the SDKs' option.Middleware) that has a
// failed read of each response body recorded in ReadErr.
func (x *Exchange) Middleware(r *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(r)
	if resp != nil && resp.Body != nil {
		resp.Body = &WatchedBody{ReadCloser: resp.Body, Err: &x.ReadErr}
	}
	return resp, err
}

// SDK is a provider's side of its Caller: how its SDK builds, sends and reads a request
// of type P, whose answer is a stream of events of type E.
type SDK[P, E any] struct {
	// Prepare builds the SDK's request for req and names the model it asks for.
	Prepare func(ctx context.Context, req *Request) (params P, model string, err error)
	// Open sends params, the attempt-th time (from 1), on ctx, and returns the stream of
	// the answer's events and what assembles them. It records the response in
	// x.Response and sends the request through x.Middleware.
	Open func(ctx context.Context, params *P, attempt int, x *Exchange) (EventStream[E], Answer[E])
	// APIFailure is the failure of an error the SDK reports for an error status or for
	// an error event of the stream, or nil when err is no such error.
	APIFailure func(err error) *Failure
	// StatusFailure is the failure of an error status whose body the SDK did not decode.
	StatusFailure func(status int, h http.Header, body []byte, err error) *Failure
}

// CallOptions are the options of an HTTP provider that its Caller applies, as the
// provider's Options give them.
type CallOptions struct {
	// MaxRetries is mapped by Retries; a RetryDelay that is not positive means
	// DefaultRetryDelay; Timeout bounds each attempt, zero meaning no bound but the
	// context's.
	MaxRetries          int
	RetryDelay, Timeout time.Duration
	// Logger receives the retries and the failures; nil discards. It is given the
	// provider's name (see ProviderLogger).
	Logger *slog.Logger
}

// Caller makes the streamed calls of a provider on an HTTP SDK. It refuses a nil
// request, builds the request and sends it with the provider's SDK, retries it as
// StreamWithRetries does, bounds each attempt by the timeout, and turns what goes wrong
// into a *ProviderError. It is safe for concurrent use.
type Caller[P, E any] struct {
	provider   string
	maxRetries int
	retryDelay time.Duration
	timeout    time.Duration
	log        *slog.Logger
	sdk        SDK[P, E]
}

// NewCaller returns the Caller of the named provider.
func NewCaller[P, E any](provider string, o CallOptions, sdk SDK[P, E]) *Caller[P, E] {
	return &Caller[P, E]{
		provider:   provider,
		maxRetries: Retries(o.MaxRetries),
		retryDelay: RetryDelay(o.RetryDelay),
		timeout:    o.Timeout,
		log:        ProviderLogger(o.Logger, provider),
		sdk:        sdk,
	}
}

// Logger returns the provider's logger, which names the provider.
func (c *Caller[P, E]) Logger() *slog.Logger { return c.log }

// Stream sends req and yields the answer as it arrives; see the type's documentation.
func (c *Caller[P, E]) Stream(ctx context.Context, req *Request) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) {
		if req == nil {
			yield(Chunk{}, BadRequest(c.provider, "nil request"))
			return
		}
		if err := ctx.Err(); err != nil {
			yield(Chunk{}, err)
			return
		}
		params, model, err := c.sdk.Prepare(ctx, req)
		if err != nil {
			yield(Chunk{}, err)
			return
		}
		o := RetryOptions{Model: model, MaxRetries: c.maxRetries, Delay: c.retryDelay, Logger: c.log}
		StreamWithRetries(ctx, o, func(n int) (bool, bool, *Failure) { return c.attempt(ctx, &params, n, yield) }, yield)
	}
}

// errAttemptTimeout is the cause of an attempt's context when the Caller's timeout ends it.
var errAttemptTimeout = errors.New("llm: attempt timed out")

// attempt sends one request and streams its answer. done reports that the stream is over:
// the answer was yielded whole, or the consumer stopped. Otherwise f is the failure and
// yielded reports whether a chunk was yielded before it.
func (c *Caller[P, E]) attempt(ctx context.Context, params *P, n int, yield func(Chunk, error) bool) (yielded, done bool, f *Failure) {
	actx := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(ctx, c.timeout, errAttemptTimeout)
		defer cancel()
	}
	var x Exchange
	stream, answer := c.sdk.Open(actx, params, n, &x)
	defer func() { _ = stream.Close() }()

	events := 0
	for stream.Next() {
		events++
		for _, chunk := range answer.Add(stream.Current()) {
			if ctx.Err() != nil {
				return yielded, false, NetworkFailure(c.provider, ctx.Err())
			}
			yielded = true
			if !yield(chunk, nil) {
				return yielded, true, nil
			}
		}
	}
	if err := stream.Err(); err != nil {
		if errors.Is(context.Cause(actx), errAttemptTimeout) && ctx.Err() == nil {
			f := NetworkFailure(c.provider, context.DeadlineExceeded)
			f.Err.Message = "no complete answer within the timeout of " + c.timeout.String()
			return yielded, false, f
		}
		return yielded, false, c.classify(err, &x)
	}
	if events == 0 {
		return yielded, false, MalformedFailure(c.provider, 0, "the answer held no stream events", nil)
	}
	resp, err := answer.Finish()
	if err != nil {
		f := NetworkFailure(c.provider, nil)
		f.Err.Message = err.Error()
		return yielded, false, f
	}
	if ctx.Err() != nil {
		return yielded, false, NetworkFailure(c.provider, ctx.Err())
	}
	yield(Chunk{Done: resp}, nil)
	return true, true, nil
}

// classify turns the error that ended a stream into a failure: the SDK's error, else an
// error status, else a network failure when the body could not be read or no response
// arrived, else an undecodable answer.
func (c *Caller[P, E]) classify(err error, x *Exchange) *Failure {
	if f := c.sdk.APIFailure(err); f != nil {
		return f
	}
	res := x.Response
	switch {
	case res != nil && res.StatusCode >= 400:
		return c.sdk.StatusFailure(res.StatusCode, res.Header, ErrorBody(res), err)
	case x.ReadErr != nil || res == nil:
		return NetworkFailure(c.provider, err)
	}
	return MalformedFailure(c.provider, res.StatusCode, "undecodable answer: "+err.Error(), err)
}

// ProviderLogger is the logger of a provider's lines: l, or a discarding logger when l is
// nil, naming the provider under "provider". It is the one place that adds the key, so a
// caller's logger should not carry it.
func ProviderLogger(l *slog.Logger, provider string) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.With("provider", provider)
}

// ParseBaseURL returns the API root of a provider's Options.BaseURL: raw without
// surrounding space, def when that is empty, and the URL it parses to, which must be an
// absolute http(s) URL.
func ParseBaseURL(provider, raw, def string) (string, *url.URL, error) {
	base := strings.TrimSpace(raw)
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, errors.New(provider + ": base URL must be an absolute http(s) URL: " + base)
	}
	return base, u, nil
}

// RetryDelay is a provider's first backoff for its Options.RetryDelay: d, or
// DefaultRetryDelay when d is not positive.
func RetryDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultRetryDelay
	}
	return d
}
