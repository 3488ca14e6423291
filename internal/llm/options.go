package llm

import (
	"log/slog"
	"net/http"
	"time"
)

// HTTPOptions configure a provider behind an HTTP API (internal/llm/openai,
// internal/llm/anthropic). The zero value talks to the provider's own endpoint without a
// key.
type HTTPOptions struct {
	// APIKey authenticates the requests; empty sends none (local servers need none).
	APIKey string
	// BaseURL is the API root; empty means the provider's DefaultBaseURL.
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
	// MaxTokens bounds the answer of a request that sets no MaxOutputTokens; zero means
	// the provider's default (none for an OpenAI-compatible server, 4096 for Anthropic,
	// which requires a bound).
	MaxTokens int
	// Buffered, when it is set and true for the model of a request, asks for the whole
	// answer at once instead of a stream, for servers that cannot stream tool calls; the
	// answer is then yielded as one piece. Only the OpenAI-compatible provider honours it.
	Buffered func(model string) bool
	// Logger receives retries (warn) and failed calls (debug); nil discards. Its lines
	// carry provider=<name>, so the logger should not carry that key itself.
	Logger *slog.Logger
}
