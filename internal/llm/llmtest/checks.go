package llmtest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// CheckCancelMidStream checks that a stream cancelled after its first chunk ends at once
// with context.Canceled, and that the server sees its request end. begin writes (and
// flushes) the start of an answer with one chunk; provider makes the provider under test
// on the server. It returns the one request the server received.
func CheckCancelMidStream(t *testing.T, begin func(w http.ResponseWriter), provider func(s *Server) llm.Provider) Request {
	t.Helper()
	serverDone := make(chan struct{})
	s := NewServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		begin(w)
		select {
		case <-r.Context().Done():
			close(serverDone)
		case <-time.After(10 * time.Second):
		}
	})
	p := provider(s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		deltas   []llm.Chunk
		err      error
		canceled time.Time
	)
	for c, e := range p.Stream(ctx, &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}) {
		if e != nil {
			err = e
			break
		}
		deltas = append(deltas, c)
		cancel()
		canceled = time.Now()
	}
	if !errors.Is(err, context.Canceled) || len(deltas) != 1 {
		t.Fatalf("stream ended with %v after %d chunks, want context.Canceled after 1", err, len(deltas))
	}
	if d := time.Since(canceled); d > 500*time.Millisecond {
		t.Errorf("stream ended %v after the cancellation", d)
	}
	select {
	case <-serverDone:
	case <-time.After(2 * time.Second):
		t.Error("the server never saw the request end")
	}
	return s.Only(t)
}

// CheckRefused checks that p refuses each of reqs with llm.ErrBadRequest, and that none
// of them reached the server s.
func CheckRefused(t *testing.T, p llm.Provider, s *Server, reqs map[string]*llm.Request) {
	t.Helper()
	for name, req := range reqs {
		_, err := llm.Collect(p.Stream(t.Context(), req))
		if !errors.Is(err, llm.ErrBadRequest) {
			t.Errorf("%s: error = %v, want ErrBadRequest", name, err)
		}
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("server received %d requests", n)
	}
}

// StatusCase is an error status a server answers with, and the error a provider must
// end the stream with: Want in its chain, and a *llm.ProviderError of Kind, Status and
// Msg.
type StatusCase struct {
	Name   string
	Status int
	Body   string
	Want   error
	Kind   llm.ErrorKind
	Msg    string
}

// CheckStatuses runs a subtest per case: a server answers with writeError, and the
// provider made on it by newProvider (named provider) must end the stream with the
// case's error after one request, not retried, which check checks.
func CheckStatuses(t *testing.T, provider string, cases []StatusCase, writeError func(w http.ResponseWriter, status int, body string),
	newProvider func(t *testing.T, s *Server) llm.Provider, check func(t *testing.T, r Request)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			s := NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { writeError(w, tc.Status, tc.Body) })
			p := newProvider(t, s)
			_, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}))
			if !errors.Is(err, tc.Want) {
				t.Fatalf("error = %v, want %v", err, tc.Want)
			}
			pe := ProviderError(t, err, provider)
			if pe.Kind != tc.Kind || pe.StatusCode != tc.Status || pe.Message != tc.Msg || pe.Attempts != 1 {
				t.Errorf("error = %#v", pe)
			}
			check(t, s.Only(t))
		})
	}
}

// RetryLog makes a provider with newProvider on a server that answers every request
// with fail, logging JSON lines at debug level, and sends it req under a deadline. It
// returns the lines logged, which must pass CheckProviderLog, and the call's error.
func RetryLog(t *testing.T, provider string, fail func(w http.ResponseWriter), newProvider func(s *Server, log *slog.Logger) llm.Provider,
	req *llm.Request) ([]map[string]any, error) {
	t.Helper()
	s := NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ int) { fail(w) })
	var buf bytes.Buffer
	p := newProvider(s, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := llm.Collect(p.Stream(ctx, req))
	return CheckProviderLog(t, buf.Bytes(), provider), err
}
