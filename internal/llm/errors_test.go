package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func TestProviderErrorIs(t *testing.T) {
	kinds := map[llm.ErrorKind]error{
		llm.KindAuth:           llm.ErrAuth,
		llm.KindNotFound:       llm.ErrNotFound,
		llm.KindContextTooLong: llm.ErrContextTooLong,
		llm.KindRateLimited:    llm.ErrRateLimited,
		llm.KindUnavailable:    llm.ErrUnavailable,
		llm.KindBadRequest:     llm.ErrBadRequest,
		llm.KindMalformed:      llm.ErrMalformed,
		llm.KindNetwork:        llm.ErrNetwork,
	}
	for kind, sentinel := range kinds {
		err := fmt.Errorf("model call: %w", &llm.ProviderError{Provider: "p", Kind: kind, Err: context.DeadlineExceeded})
		for other, s := range kinds {
			if got := errors.Is(err, s); got != (other == kind) {
				t.Errorf("errors.Is(%s error, sentinel of %s) = %v", kind, other, got)
			}
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s error does not wrap its Err", kind)
		}
		if kind.Sentinel() != sentinel {
			t.Errorf("%s.Sentinel() = %v", kind, kind.Sentinel())
		}
		var pe *llm.ProviderError
		if !errors.As(err, &pe) || pe.Kind != kind {
			t.Errorf("errors.As = %v", pe)
		}
	}
	if llm.ErrUnknownModel != llm.ErrNotFound || llm.ErrOverloaded != llm.ErrUnavailable {
		t.Error("aliases differ")
	}
	if llm.ErrorKind("other").Sentinel() != nil {
		t.Error("unknown kind has a sentinel")
	}
	for kind, want := range map[llm.ErrorKind]bool{llm.KindRateLimited: true, llm.KindUnavailable: true, llm.KindNetwork: true, llm.KindAuth: false, llm.KindBadRequest: false, llm.KindMalformed: false} {
		if kind.Temporary() != want {
			t.Errorf("%s.Temporary() = %v", kind, !want)
		}
	}
}

func TestProviderErrorMessage(t *testing.T) {
	for _, tc := range []struct {
		err  *llm.ProviderError
		want string
	}{
		{&llm.ProviderError{Provider: "openai", StatusCode: 401, Kind: llm.KindAuth, Message: "Incorrect API key provided", Attempts: 1},
			"openai: auth (HTTP 401): Incorrect API key provided"},
		{&llm.ProviderError{Provider: "anthropic", StatusCode: 429, Kind: llm.KindRateLimited, Message: "slow down", Attempts: 3, RetryAfter: 2 * time.Second},
			"anthropic: rate limited (HTTP 429): slow down (after 3 attempts) (retry after 2s)"},
		{&llm.ProviderError{Provider: "openai", Kind: llm.KindNetwork, Err: errors.New("connection refused")},
			"openai: network: connection refused"},
		{&llm.ProviderError{Provider: "x", Kind: llm.KindContextTooLong}, "x: context too long"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestKindForStatus(t *testing.T) {
	for status, want := range map[int]llm.ErrorKind{
		401: llm.KindAuth, 403: llm.KindAuth, 404: llm.KindNotFound, 429: llm.KindRateLimited,
		408: llm.KindUnavailable, 409: llm.KindUnavailable, 500: llm.KindUnavailable, 503: llm.KindUnavailable, 529: llm.KindUnavailable,
		400: llm.KindBadRequest, 413: llm.KindBadRequest, 422: llm.KindBadRequest, 200: llm.KindMalformed,
	} {
		if got := llm.KindForStatus(status); got != want {
			t.Errorf("KindForStatus(%d) = %s, want %s", status, got, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		headers map[string]string
		want    time.Duration
		ok      bool
	}{
		{nil, 0, false},
		{map[string]string{"Retry-After": "1"}, time.Second, true},
		{map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond, true},
		{map[string]string{"retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond, true},
		{map[string]string{"Retry-After-Ms": "soon", "Retry-After": "9"}, 9 * time.Second, true},
		{map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second, true},
		{map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0, true},
		{map[string]string{"Retry-After": "-3"}, 0, true},
		{map[string]string{"Retry-After": "1e300"}, time.Duration(1<<63 - 1), true},
		{map[string]string{"Retry-After": "NaN"}, 0, false},
		{map[string]string{"Retry-After": "later"}, 0, false},
	} {
		h := http.Header{}
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		if tc.headers == nil {
			h = nil
		}
		got, ok := llm.ParseRetryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%v) = %v, %v; want %v, %v", tc.headers, got, ok, tc.want, tc.ok)
		}
	}
}

// TestContextTooLong: the phrasings of OpenAI, Anthropic and compatible servers, in any
// case, and messages that only look alike.
func TestContextTooLong(t *testing.T) {
	for msg, want := range map[string]bool{
		"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens.": true, // OpenAI, vLLM
		"prompt is too long: 215463 tokens > 200000 maximum":                                                      true, // Anthropic
		"input length and max_tokens exceed context limit: 197000 + 8192 > 200000":                                true, // Anthropic
		"the request exceeds the available context size, try increasing it":                                       true, // llama.cpp
		"Input is too long for requested model.":                                                                  true,
		"Too many tokens in the conversation":                                                                     true,
		"exceeds the context window of this model":                                                                true,
		"context_length_exceeded":                                                                                 true,
		"Request exceeds the maximum allowed number of bytes.":                                                    false,
		"Invalid value for 'temperature'.":                                                                        false,
		"The model `gpt-test` does not exist":                                                                     false,
		"":                                                                                                        false,
	} {
		if got := llm.ContextTooLong(msg); got != want {
			t.Errorf("ContextTooLong(%q) = %v, want %v", msg, got, want)
		}
	}
}

func TestStatusFailure(t *testing.T) {
	boom := errors.New("boom")
	h := http.Header{}
	h.Set("Retry-After", "2")
	f := llm.StatusFailure("p", 503, h, llm.KindUnavailable, "", true, boom)
	want := &llm.ProviderError{Provider: "p", StatusCode: 503, Kind: llm.KindUnavailable, Message: "Service Unavailable", RetryAfter: 2 * time.Second, Err: boom}
	if !f.Retry || *f.Err != *want {
		t.Errorf("StatusFailure = %#v, retry %v; want %#v, retry true", f.Err, f.Retry, want)
	}
	for header, want := range map[string]bool{"true": true, "false": false, "": true, "maybe": true} {
		h := http.Header{}
		h.Set("X-Should-Retry", header)
		if f := llm.StatusFailure("p", 500, h, llm.KindUnavailable, "m", true, nil); f.Retry != want || f.Err.Message != "m" {
			t.Errorf("X-Should-Retry %q: retry %v, message %q", header, f.Retry, f.Err.Message)
		}
	}
	h = http.Header{}
	h.Set("X-Should-Retry", "true")
	if f := llm.StatusFailure("p", 409, h, llm.KindBadRequest, "m", false, nil); !f.Retry {
		t.Error("X-Should-Retry: true does not override a final kind")
	}
	for _, status := range []int{400, 401, 403, 404, 422} {
		if f := llm.StatusFailure("p", status, h, llm.KindBadRequest, "m", true, nil); f.Retry {
			t.Errorf("HTTP %d with X-Should-Retry: true is retried; the same request gets the same answer", status)
		}
	}
	if f := llm.StatusFailure("p", 400, nil, llm.KindBadRequest, "m", false, nil); f.Retry || f.Err.RetryAfter != 0 {
		t.Errorf("no headers: %#v, retry %v", f.Err, f.Retry)
	}
}

func TestEventFailure(t *testing.T) {
	for kind, retry := range map[llm.ErrorKind]bool{llm.KindUnavailable: true, llm.KindRateLimited: true, llm.KindBadRequest: false, llm.KindContextTooLong: false} {
		f := llm.EventFailure("p", kind, "m", nil)
		if f.Retry != retry || f.Err.Kind != kind || f.Err.Provider != "p" || f.Err.Message != "m" || f.Err.StatusCode != 0 {
			t.Errorf("EventFailure(%s) = %#v, retry %v", kind, f.Err, f.Retry)
		}
	}
}

func TestRequestModel(t *testing.T) {
	for _, tc := range []struct{ model, def, want string }{{"m", "d", "m"}, {"", "d", "d"}, {"m", "", "m"}} {
		if got, err := llm.RequestModel("p", &llm.Request{Model: tc.model}, tc.def); got != tc.want || err != nil {
			t.Errorf("RequestModel(%q, default %q) = %q, %v", tc.model, tc.def, got, err)
		}
	}
	_, err := llm.RequestModel("p", &llm.Request{}, "")
	var pe *llm.ProviderError
	if !errors.Is(err, llm.ErrBadRequest) || !errors.As(err, &pe) || pe.Provider != "p" || pe.Message == "" {
		t.Errorf("no model: error = %v", err)
	}
	if err := llm.BadRequest("p", "bad %s", "thing"); err.Error() != "p: bad request: bad thing" {
		t.Errorf("BadRequest = %q", err)
	}
}

func TestErrorBody(t *testing.T) {
	if llm.ErrorBody(nil) != nil || llm.ErrorBody(&http.Response{}) != nil {
		t.Error("ErrorBody of no body is not nil")
	}
	big := strings.Repeat("x", 100<<10)
	if got := llm.ErrorBody(&http.Response{Body: io.NopCloser(strings.NewReader(big))}); len(got) != 64<<10 {
		t.Errorf("ErrorBody read %d bytes, want 64 KiB", len(got))
	}
}
