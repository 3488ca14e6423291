package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
