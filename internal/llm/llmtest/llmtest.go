// Package llmtest holds what the tests of the HTTP providers share: a fake API server
// that records the requests it receives, helpers to read a stream and its errors, and a
// checker of the JSON lines a provider logs.
package llmtest

import (
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// Request is one request as the fake server saw it.
type Request struct {
	Method, Path string
	Header       http.Header
	// Raw is the body as sent; Body the same decoded.
	Raw  string
	Body map[string]any
	At   time.Time
}

// Server is a fake API endpoint whose handler answers the n-th request (from 1). Every
// request body must be JSON.
type Server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// NewServer starts a Server that answers with handle; it is closed when the test ends.
func NewServer(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, n int)) *Server {
	t.Helper()
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not JSON: %v: %s", err, raw)
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: string(raw), Body: body, At: time.Now()})
		n := len(s.reqs)
		s.mu.Unlock()
		handle(w, r, n)
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Reset forgets the requests received so far: the next one is the first again.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

// Only returns the one request the server received, and fails the test when it received
// another number.
func (s *Server) Only(t testing.TB) Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server received %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// Collect drains a stream, keeping the chunks before the final one apart from the
// answer; it stops at the first error.
func Collect(seq iter.Seq2[llm.Chunk, error]) (deltas []llm.Chunk, resp *llm.Response, err error) {
	for c, e := range seq {
		if e != nil {
			return deltas, nil, e
		}
		if c.Done != nil {
			resp = c.Done
			continue
		}
		deltas = append(deltas, c)
	}
	return deltas, resp, nil
}

// JSON decodes JSON text of the test, for comparisons with decoded request bodies.
func JSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in test: %v: %s", err, s)
	}
	return v
}

// ProviderError returns the *llm.ProviderError in err's chain, failing the test when
// there is none or when it names another provider.
func ProviderError(t testing.TB, err error, provider string) *llm.ProviderError {
	t.Helper()
	var pe *llm.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *llm.ProviderError", err, err)
	}
	if pe.Provider != provider {
		t.Errorf("Provider = %q, want %q", pe.Provider, provider)
	}
	return pe
}
