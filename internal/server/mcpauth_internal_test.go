package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// sessionsUnderTest is an mcpSessions in front of a stand-in for the SDK's handler,
// which opens a session s<n> for every POST without one, on a clock the test moves.
func sessionsUnderTest() (*mcpSessions, *time.Time) {
	n := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcpSessionHeader) == "" && r.Method == http.MethodPost {
			n++
			w.Header().Set(mcpSessionHeader, fmt.Sprintf("s%d", n))
		}
		w.WriteHeader(http.StatusOK)
	})
	now := time.Unix(1_000_000, 0)
	m := newMCPSessions(next, func(string, ...any) {})
	m.now = func() time.Time { return now }
	return m, &now
}

// request is the status of a request of caller, in session sid ("": none).
func request(m *mcpSessions, method, sid, caller string) (int, string) {
	r := httptest.NewRequest(method, "/", nil)
	if sid != "" {
		r.Header.Set(mcpSessionHeader, sid)
	}
	w := httptest.NewRecorder()
	m.serve(w, r, caller)
	return w.Code, w.Header().Get(mcpSessionHeader)
}

// TestMCPSessionsBelongToTheirOpener: a session is its opener's alone, for as long as
// it lives; one the endpoint does not hold (ended, expired, or never opened here) is
// refused, never passed on. Before, the owners of the oldest sessions were forgotten
// past 65,536 of them, and their sessions then served any caller, another tenant's.
func TestMCPSessionsBelongToTheirOpener(t *testing.T) {
	m, now := sessionsUnderTest()
	_, s1 := request(m, http.MethodPost, "", "acme\x00u1")
	if code, _ := request(m, http.MethodPost, s1, "acme\x00u1"); code != http.StatusOK {
		t.Errorf("its opener: %d", code)
	}
	if code, _ := request(m, http.MethodPost, s1, "globex\x00u2"); code != http.StatusForbidden {
		t.Errorf("another caller: %d, want 403", code)
	}
	if code, _ := request(m, http.MethodPost, "s-never", "acme\x00u1"); code != http.StatusNotFound {
		t.Errorf("a session never opened here: %d, want 404", code)
	}
	// Sessions opened by the thousand do not free an older one for others.
	for range maxMCPSessionsPerCaller - 1 {
		request(m, http.MethodPost, "", "acme\x00u1")
	}
	for i := range maxMCPSessions {
		request(m, http.MethodPost, "", fmt.Sprintf("globex\x00u%d", i%100))
	}
	if code, _ := request(m, http.MethodPost, s1, "globex\x00u2"); code != http.StatusForbidden {
		t.Errorf("another caller, after many sessions: %d, want 403", code)
	}
	// An idle session expires; its id is refused from then on.
	*now = now.Add(mcpSessionIdle + time.Second)
	if code, _ := request(m, http.MethodPost, s1, "acme\x00u1"); code != http.StatusNotFound {
		t.Errorf("an expired session: %d, want 404", code)
	}
	// A session its caller ended is gone.
	_, s2 := request(m, http.MethodPost, "", "acme\x00u1")
	request(m, http.MethodDelete, s2, "acme\x00u1")
	if code, _ := request(m, http.MethodGet, s2, "acme\x00u1"); code != http.StatusNotFound {
		t.Errorf("an ended session: %d, want 404", code)
	}
}

// TestMCPSessionsAreBounded: a caller opens at most maxMCPSessionsPerCaller sessions at
// once (429), the endpoint at most maxMCPSessions (503), idle ones making room. Before,
// sessions never expired and any caller could open them until the process ran out of
// memory.
func TestMCPSessionsAreBounded(t *testing.T) {
	m, now := sessionsUnderTest()
	for range maxMCPSessionsPerCaller {
		if code, _ := request(m, http.MethodPost, "", "acme\x00u1"); code != http.StatusOK {
			t.Fatalf("opening: %d", code)
		}
	}
	if code, _ := request(m, http.MethodPost, "", "acme\x00u1"); code != http.StatusTooManyRequests {
		t.Errorf("one more of the same caller: %d, want 429", code)
	}
	if code, _ := request(m, http.MethodPost, "", "acme\x00u2"); code != http.StatusOK {
		t.Errorf("another caller: %d, want 200", code)
	}
	// Without authentication every caller is "": only the endpoint's bound holds.
	for range maxMCPSessionsPerCaller + 1 {
		if code, _ := request(m, http.MethodPost, "", ""); code != http.StatusOK {
			t.Fatalf("an endpoint without authentication: %d, want 200", code)
		}
	}
	for i := 0; len(m.byID) < maxMCPSessions; i++ {
		request(m, http.MethodPost, "", fmt.Sprintf("t%d\x00u", i))
	}
	if code, _ := request(m, http.MethodPost, "", "acme\x00u3"); code != http.StatusServiceUnavailable {
		t.Errorf("past the endpoint's bound: %d, want 503", code)
	}
	// A stateless request opens nothing, and is not refused.
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	w := httptest.NewRecorder()
	m.serve(w, r, "acme\x00u3")
	if w.Code != http.StatusOK {
		t.Errorf("a stateless request: %d, want 200", w.Code)
	}
	*now = now.Add(mcpSessionIdle + time.Second)
	if code, _ := request(m, http.MethodPost, "", "acme\x00u1"); code != http.StatusOK {
		t.Errorf("once the sessions expired: %d, want 200", code)
	}
	if len(m.byID) != 1 || len(m.perCaller) != 1 {
		t.Errorf("%d sessions of %d callers held, want the new one", len(m.byID), len(m.perCaller))
	}
}
