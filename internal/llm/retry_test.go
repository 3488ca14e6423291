package llm_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
)

func TestBackoff(t *testing.T) {
	base := 100 * time.Millisecond
	for attempt, want := range map[int]time.Duration{1: base, 2: 2 * base, 3: 4 * base, 20: llm.MaxBackoff} {
		for range 20 {
			if d := llm.Backoff(base, attempt); d > want || d < want*3/4 {
				t.Errorf("Backoff(%v, %d) = %v, want within [%v, %v]", base, attempt, d, want*3/4, want)
			}
		}
	}
}

func TestRetryWait(t *testing.T) {
	cases := []struct {
		retryable  bool
		retryAfter time.Duration
		attempt    int
		wantWait   time.Duration
		wantRetry  bool
	}{
		{false, 0, 1, 0, false},
		{true, 0, 3, 0, false}, // retries used up (max 2)
		{true, 2 * time.Second, 1, 2 * time.Second, true},
		{true, 2 * time.Minute, 1, 0, false}, // longer than MaxRetryAfter: the caller schedules it
	}
	for _, c := range cases {
		d, ok := llm.RetryWait(c.retryable, c.retryAfter, c.attempt, 2, time.Millisecond)
		if d != c.wantWait || ok != c.wantRetry {
			t.Errorf("RetryWait(%v, %v, %d) = %v, %v; want %v, %v", c.retryable, c.retryAfter, c.attempt, d, ok, c.wantWait, c.wantRetry)
		}
	}
	if d, ok := llm.RetryWait(true, 0, 1, 2, 40*time.Millisecond); !ok || d > 40*time.Millisecond || d < 30*time.Millisecond {
		t.Errorf("backoff wait = %v, %v", d, ok)
	}
}

func TestSleepAndWatchedBody(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := llm.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context = %v", err)
	}
	var readErr error
	boom := errors.New("connection reset")
	b := &llm.WatchedBody{ReadCloser: io.NopCloser(io.MultiReader(strings.NewReader("ab"), errReader{boom})), Err: &readErr}
	if _, err := io.ReadAll(b); !errors.Is(err, boom) || !errors.Is(readErr, boom) {
		t.Errorf("ReadAll = %v, recorded %v", err, readErr)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestStreamWithRetries: a failure is retried while nothing was yielded and the retries
// last; a failure after a chunk, or a final one, reaches the consumer with the attempts.
func TestStreamWithRetries(t *testing.T) {
	temp := &llm.Failure{Err: &llm.ProviderError{Provider: "p", Kind: llm.KindUnavailable}, Retry: true}
	cases := []struct {
		name     string
		script   func(n int) (bool, bool, *llm.Failure)
		attempts int
		wantErr  bool
	}{
		{"second attempt succeeds", func(n int) (bool, bool, *llm.Failure) {
			if n == 1 {
				return false, false, temp
			}
			return true, true, nil
		}, 2, false},
		{"retries used up", func(int) (bool, bool, *llm.Failure) { return false, false, temp }, 3, true},
		{"failure after a chunk is not retried", func(int) (bool, bool, *llm.Failure) { return true, false, temp }, 1, true},
		{"final failure", func(int) (bool, bool, *llm.Failure) {
			return false, false, &llm.Failure{Err: &llm.ProviderError{Provider: "p", Kind: llm.KindAuth}}
		}, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			var got error
			llm.StreamWithRetries(context.Background(), llm.RetryOptions{MaxRetries: 2, Delay: time.Microsecond},
				func(n int) (bool, bool, *llm.Failure) { calls++; return c.script(n) },
				func(_ llm.Chunk, err error) bool { got = err; return true })
			if calls != c.attempts || (got != nil) != c.wantErr {
				t.Fatalf("attempts %d (want %d), error %v", calls, c.attempts, got)
			}
			var pe *llm.ProviderError
			if c.wantErr && (!errors.As(got, &pe) || pe.Attempts != calls) {
				t.Errorf("error %v does not count %d attempts", got, calls)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	for in, want := range map[int]int{0: llm.DefaultMaxRetries, -1: 0, 3: 3, 1000: llm.MaxMaxRetries} {
		if got := llm.Retries(in); got != want {
			t.Errorf("Retries(%d) = %d, want %d", in, got, want)
		}
	}
}
