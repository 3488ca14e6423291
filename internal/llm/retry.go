package llm

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// Retry policy shared by the HTTP providers.
const (
	// MaxBackoff caps the exponential backoff between retries.
	MaxBackoff = 8 * time.Second
	// MaxRetryAfter is the longest Retry-After a provider waits for; a longer one ends the
	// call with the wait in ProviderError.RetryAfter, for the caller to schedule.
	MaxRetryAfter = time.Minute
)

// RetryWait returns how long to wait before retrying after the attempt-th attempt failed,
// and whether to retry at all: never when the failure is not retryable or the retries are
// used up; as long as the server asked (retryAfter, up to MaxRetryAfter); else Backoff.
func RetryWait(retryable bool, retryAfter time.Duration, attempt, maxRetries int, base time.Duration) (time.Duration, bool) {
	if !retryable || attempt > maxRetries {
		return 0, false
	}
	if retryAfter > 0 {
		if retryAfter > MaxRetryAfter {
			return 0, false
		}
		return retryAfter, true
	}
	return Backoff(base, attempt), true
}

// Backoff is the wait before the retry after the attempt-th attempt: base doubled with
// each attempt, at most MaxBackoff, less a random jitter of up to a quarter.
func Backoff(base time.Duration, attempt int) time.Duration {
	d := base
	for i := 1; i < attempt && d < MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxBackoff)
	if q := int64(d / 4); q > 0 {
		d -= time.Duration(rand.Int64N(q))
	}
	return d
}

// Sleep waits d, or until ctx ends (returning its error); when d is not positive it
// returns at once, ctx's error if ctx has ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WatchedBody records the error of a failed read of a response body in *Err, so that a
// stream that ends on it can be told apart from one that ends on an undecodable event.
type WatchedBody struct {
	io.ReadCloser
	Err *error
}

func (b *WatchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && *b.Err == nil {
		*b.Err = err
	}
	return n, err
}

// Failure is a failed attempt of a model call: the error to report, and whether another
// attempt may help.
type Failure struct {
	Err   *ProviderError
	Retry bool
}

// NetworkFailure is a retryable failure to reach the provider or to read its answer.
func NetworkFailure(provider string, err error) *Failure {
	return &Failure{Err: &ProviderError{Provider: provider, Kind: KindNetwork, Err: err}, Retry: true}
}

// MalformedFailure is an answer that cannot be decoded; retrying does not help.
func MalformedFailure(provider string, status int, msg string, err error) *Failure {
	return &Failure{Err: &ProviderError{Provider: provider, Kind: KindMalformed, StatusCode: status, Message: msg, Err: err}}
}

// RetryOptions bound the attempts of StreamWithRetries.
type RetryOptions struct {
	// Model is the model the call asks for, for the log lines.
	Model string
	// MaxRetries is the retries after the first attempt; Delay the first backoff.
	MaxRetries int
	Delay      time.Duration
	// Logger receives a line per failed attempt (warn when it is retried, else debug);
	// nil discards. The lines name no provider: a provider's logger does (see
	// ProviderLogger).
	Logger *slog.Logger
}

// StreamWithRetries runs attempt until one finishes the stream (done), a failure is
// final, or ctx ends, and hands the consumer the error when it gives up. A failure is
// retried only while nothing has been yielded, so the consumer never sees an answer
// twice; the wait honours the server's Retry-After (see RetryWait).
func StreamWithRetries(ctx context.Context, o RetryOptions, attempt func(n int) (yielded, done bool, f *Failure), yield func(Chunk, error) bool) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	for n := 1; ; n++ {
		start := time.Now()
		yielded, done, f := attempt(n)
		if done {
			return
		}
		if err := ctx.Err(); err != nil {
			yield(Chunk{}, err)
			return
		}
		perr := f.Err
		perr.Attempts = n
		wait, retry := RetryWait(f.Retry, perr.RetryAfter, n, o.MaxRetries, o.Delay)
		if yielded || !retry {
			o.Logger.DebugContext(ctx, "model call failed", "model", o.Model,
				"attempt", n, "duration", time.Since(start).String(), "error", perr)
			yield(Chunk{}, perr)
			return
		}
		o.Logger.WarnContext(ctx, "model call failed, retrying", "model", o.Model,
			"attempt", n, "status", perr.StatusCode, "kind", perr.Kind, "wait", wait.String(), "error", perr.Message)
		if err := Sleep(ctx, wait); err != nil {
			yield(Chunk{}, err)
			return
		}
	}
}

// Retry bounds of the HTTP providers' Options.MaxRetries.
const (
	// DefaultMaxRetries is the number of retries when MaxRetries is zero.
	DefaultMaxRetries = 2
	// MaxMaxRetries caps MaxRetries.
	MaxMaxRetries = 10
)

// Retries maps an Options.MaxRetries to the retries made: 0 means DefaultMaxRetries, a
// negative value none, and at most MaxMaxRetries.
func Retries(n int) int {
	switch {
	case n == 0:
		return DefaultMaxRetries
	case n < 0:
		return 0
	}
	return min(n, MaxMaxRetries)
}

// DefaultHTTPClient is a client of its own on a clone of http.DefaultTransport, so that a
// provider's connections are not shared with (or tuned by) the rest of the process.
func DefaultHTTPClient() *http.Client {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		return &http.Client{Transport: t.Clone()}
	}
	return &http.Client{Transport: http.DefaultTransport}
}
