package llm_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/llmtest"
)

// fakeStream is an EventStream of text events, which ends with err after the events;
// with wait set it blocks instead, until ctx ends.
type fakeStream struct {
	ctx    context.Context
	events []string
	i      int
	err    error
	wait   bool
	closed bool
}

func (s *fakeStream) Next() bool {
	if s.i < len(s.events) {
		s.i++
		return true
	}
	if s.wait {
		<-s.ctx.Done()
		s.err = s.ctx.Err()
	}
	return false
}

func (s *fakeStream) Current() string { return s.events[s.i-1] }
func (s *fakeStream) Err() error      { return s.err }
func (s *fakeStream) Close() error    { s.closed = true; return nil }

// fakeAnswer makes each event a text delta; the answer is complete once "." arrived.
type fakeAnswer struct {
	llm.Draft
	complete bool
}

func (a *fakeAnswer) Add(e string) []llm.Chunk {
	switch e {
	case "":
		return nil
	case ".":
		a.complete = true
		a.FinishReason = "stop"
		return nil
	}
	a.Text.WriteString(e)
	return []llm.Chunk{{TextDelta: e}}
}

func (a *fakeAnswer) Finish() (*llm.Response, error) {
	if !a.complete {
		return nil, errors.New("no full stop")
	}
	return a.Response("fake"), nil
}

// attempt is how the fake SDK answers an attempt: the events of the stream and its
// error, the status and body of the response the SDK saw (no response when status is
// zero), and whether reading the body failed.
type attempt struct {
	events     []string
	err        error
	status     int
	body       string
	readFailed bool
}

// fakeCaller is a Caller on a fake SDK that plays script; it counts the attempts and
// the streams left open.
type fakeCaller struct {
	*llm.Caller[string, string]
	attempts int
	streams  []*fakeStream
}

// errAPI is what the fake SDK reports for an error it decoded itself.
var errAPI = errors.New("api error")

func newFakeCaller(o llm.CallOptions, a attempt) *fakeCaller {
	fc := &fakeCaller{}
	fc.Caller = llm.NewCaller("fake", o, llm.SDK[string, string]{
		Prepare: func(_ context.Context, req *llm.Request) (string, string, error) {
			model, err := llm.RequestModel("fake", req, "")
			return "params:" + model, model, err
		},
		Open: func(ctx context.Context, params *string, _ int, x *llm.Exchange) (llm.EventStream[string], llm.Answer[string]) {
			fc.attempts++
			s := &fakeStream{ctx: ctx, events: a.events, err: a.err, wait: *params == "params:wait"}
			fc.streams = append(fc.streams, s)
			if a.status != 0 {
				x.Response = &http.Response{StatusCode: a.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(a.body))}
			}
			if a.readFailed {
				x.ReadErr = io.ErrUnexpectedEOF
			}
			return s, &fakeAnswer{Draft: llm.Draft{Model: strings.TrimPrefix(*params, "params:")}}
		},
		APIFailure: func(err error) *llm.Failure {
			if !errors.Is(err, errAPI) {
				return nil
			}
			return llm.EventFailure("fake", llm.KindRateLimited, "slow down", err)
		},
		StatusFailure: func(status int, h http.Header, body []byte, err error) *llm.Failure {
			return llm.StatusFailure("fake", status, h, llm.KindForStatus(status), string(body), false, err)
		},
	})
	return fc
}

func (fc *fakeCaller) run(t *testing.T, ctx context.Context, model string) ([]llm.Chunk, *llm.Response, error) {
	t.Helper()
	deltas, resp, err := llmtest.Collect(fc.Stream(ctx, &llm.Request{Model: model}))
	for i, s := range fc.streams {
		if !s.closed {
			t.Errorf("stream of attempt %d left open", i+1)
		}
	}
	return deltas, resp, err
}

var fast = llm.CallOptions{MaxRetries: 2, RetryDelay: time.Millisecond}

func TestCallerAnswers(t *testing.T) {
	fc := newFakeCaller(fast, attempt{events: []string{"Hel", "lo", "."}, status: 200})
	deltas, resp, err := fc.run(t, t.Context(), "m1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]llm.Chunk{{TextDelta: "Hel"}, {TextDelta: "lo"}}, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	if want := (&llm.Response{Text: "Hello", FinishReason: "stop", Model: "fake/m1"}); !cmp.Equal(want, resp) {
		t.Errorf("response = %+v, want %+v", resp, want)
	}
	if fc.attempts != 1 {
		t.Errorf("%d attempts", fc.attempts)
	}
}

// TestCallerFailures: how the Caller classifies the ways an attempt ends without an
// answer, and which it retries.
func TestCallerFailures(t *testing.T) {
	undecodable := errors.New("bad event")
	for _, tc := range []struct {
		name     string
		attempt  attempt
		want     error
		msg      string
		status   int
		attempts int
	}{
		{"no events", attempt{status: 200},
			llm.ErrMalformed, "the answer held no stream events", 0, 1},
		{"cut short", attempt{events: []string{""}, status: 200},
			llm.ErrNetwork, "no full stop", 0, 3},
		{"the SDK's error first", attempt{err: errAPI, status: 500, body: "body"},
			llm.ErrRateLimited, "slow down", 0, 3},
		{"error status", attempt{err: undecodable, status: 404, body: "no such model"}, llm.ErrNotFound, "no such model", 404, 1},
		{"body cut", attempt{err: undecodable, status: 200, readFailed: true},
			llm.ErrNetwork, "", 0, 3},
		{"no response", attempt{err: undecodable},
			llm.ErrNetwork, "", 0, 3},
		{"undecodable", attempt{err: undecodable, status: 200},
			llm.ErrMalformed, "undecodable answer: bad event", 200, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := newFakeCaller(fast, tc.attempt)
			_, _, err := fc.run(t, t.Context(), "m")
			if !errors.Is(err, tc.want) {
				t.Fatalf("error = %v, want %v", err, tc.want)
			}
			pe := llmtest.ProviderError(t, err, "fake")
			if pe.Message != tc.msg || pe.StatusCode != tc.status || pe.Attempts != tc.attempts || fc.attempts != tc.attempts {
				t.Errorf("error = %#v after %d attempts; want message %q, status %d, %d attempts", pe, fc.attempts, tc.msg, tc.status, tc.attempts)
			}
		})
	}
}

func TestCallerTimeout(t *testing.T) {
	fc := newFakeCaller(llm.CallOptions{MaxRetries: 1, RetryDelay: time.Millisecond, Timeout: 20 * time.Millisecond},
		attempt{events: []string{"partial"}, status: 200})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	deltas, _, err := fc.run(t, ctx, "wait")
	if !errors.Is(err, llm.ErrNetwork) || !errors.Is(err, context.DeadlineExceeded) || len(deltas) != 1 {
		t.Fatalf("error = %v after %d deltas, want a network error for the timeout after 1", err, len(deltas))
	}
	// A chunk was yielded: the attempt is not retried.
	if pe := llmtest.ProviderError(t, err, "fake"); pe.Message != "no complete answer within the timeout of 20ms" || fc.attempts != 1 {
		t.Errorf("error = %#v after %d attempts", pe, fc.attempts)
	}
}

func TestCallerRefuses(t *testing.T) {
	fc := newFakeCaller(fast, attempt{events: []string{"."}, status: 200})
	for name, req := range map[string]*llm.Request{"nil": nil, "no model": {}} {
		_, err := llm.Collect(fc.Stream(t.Context(), req))
		if pe := llmtest.ProviderError(t, err, "fake"); !errors.Is(err, llm.ErrBadRequest) || pe.Message == "" {
			t.Errorf("%s: error = %v, want a bad request", name, err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := llm.Collect(fc.Stream(ctx, &llm.Request{Model: "m"})); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: error = %v", err)
	}
	if fc.attempts != 0 {
		t.Errorf("%d attempts", fc.attempts)
	}
}

// TestCallerLogLines: the lines of a retried call name the provider once, from the
// logger, and log their durations as text.
func TestCallerLogLines(t *testing.T) {
	var buf bytes.Buffer
	o := fast
	o.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fc := newFakeCaller(o, attempt{err: errAPI})
	if _, _, err := fc.run(t, t.Context(), "m"); !errors.Is(err, llm.ErrRateLimited) {
		t.Fatalf("error = %v", err)
	}
	lines := llmtest.CheckProviderLog(t, buf.Bytes(), "fake")
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l["msg"].(string))
	}
	want := []string{"model call failed, retrying", "model call failed, retrying", "model call failed"}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
	if lines[0]["wait"] == nil || lines[2]["duration"] == nil || lines[0]["model"] != "m" {
		t.Errorf("log lines lack the wait, the duration or the model: %s", buf.Bytes())
	}
}

func TestDraftResponse(t *testing.T) {
	d := llm.Draft{Calls: []*llm.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}, Usage: llm.Usage{InputTokens: 3}, FinishReason: "tool_calls", Model: "m"}
	d.Text.WriteString("hi")
	want := &llm.Response{Text: "hi", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}, Usage: llm.Usage{InputTokens: 3}, FinishReason: "tool_calls", Model: "p/m"}
	if diff := cmp.Diff(want, d.Response("p")); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestParseBaseURL(t *testing.T) {
	for raw, want := range map[string]string{"": "https://def/v1", "  http://localhost:11434/v1 ": "http://localhost:11434/v1"} {
		base, u, err := llm.ParseBaseURL("p", raw, "https://def/v1")
		if err != nil || base != want || u.String() != want {
			t.Errorf("ParseBaseURL(%q) = %q, %v, %v; want %q", raw, base, u, err, want)
		}
	}
	for _, raw := range []string{"localhost:11434", "ftp://x", "::", "http://"} {
		if _, _, err := llm.ParseBaseURL("p", raw, "https://def"); err == nil || !strings.HasPrefix(err.Error(), "p: ") {
			t.Errorf("ParseBaseURL(%q) error = %v", raw, err)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{0: llm.DefaultRetryDelay, -time.Second: llm.DefaultRetryDelay, time.Millisecond: time.Millisecond} {
		if got := llm.RetryDelay(in); got != want {
			t.Errorf("RetryDelay(%v) = %v, want %v", in, got, want)
		}
	}
}
