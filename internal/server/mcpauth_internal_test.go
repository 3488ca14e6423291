package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// fakeSDK stands for the SDK's streamable HTTP handler in the tests of mcpSessions: a
// POST without a session opens s<n> (one with X-Fail opens none), a request of a session
// it does not hold gets 404, a DELETE with an unknown protocol version 400, a DELETE
// ends the session, and a request with X-Hold waits until hold is closed.
type fakeSDK struct {
	mu       sync.Mutex
	n        int
	sessions map[string]bool
	hold     chan struct{}
}

func (f *fakeSDK) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Hold") != "" {
		<-f.hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sid := r.Header.Get(mcpSessionHeader)
	switch {
	case sid == "" && r.Method == http.MethodPost && r.Header.Get("X-Fail") == "":
		f.n++
		sid = fmt.Sprintf("s%d", f.n)
		f.sessions[sid] = true
		w.Header().Set(mcpSessionHeader, sid)
	case sid == "":
	case !f.sessions[sid] || r.Header.Get("X-404") != "":
		w.WriteHeader(http.StatusNotFound)
		return
	case r.Method == http.MethodDelete && r.Header.Get("Mcp-Protocol-Version") == "1999-01-01":
		w.WriteHeader(http.StatusBadRequest)
		return
	case r.Method == http.MethodDelete:
		delete(f.sessions, sid)
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeSDK) holds(sid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[sid]
}

// sessionsUnderTest is an mcpSessions in front of a fakeSDK, on a clock the test moves.
func sessionsUnderTest() (*mcpSessions, *fakeSDK, *time.Time) {
	f := &fakeSDK{sessions: map[string]bool{}, hold: make(chan struct{})}
	now := time.Unix(1_000_000, 0)
	m := newMCPSessions(f, func(string, ...any) {})
	m.now = func() time.Time { return now }
	return m, f, &now
}

// caller is an authenticated caller: subject who of tenant, with scopes.
func caller(tenant, who, scopes string) mcpCaller {
	return mcpCaller{key: tenant + "\x00" + who + "\x00" + scopes, subject: who, tenant: tenant}
}

// request is the status and session id of a request of c in session sid ("": none),
// with headers given as name, value pairs.
func request(m *mcpSessions, method, sid string, c mcpCaller, headers ...string) (int, string) {
	r := httptest.NewRequest(method, "/", nil)
	if sid != "" {
		r.Header.Set(mcpSessionHeader, sid)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	m.serve(w, r, c)
	return w.Code, w.Header().Get(mcpSessionHeader)
}

// held and counted read m under its lock: the sessions it holds, and a bucket's count.
func held(m *mcpSessions) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID)
}

func counted(m *mcpSessions, bucket string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count[bucket]
}

// withMCPHeaders is r with the headers of a streamable HTTP client's POST, in session
// sid when it is not "".
func withMCPHeaders(r *http.Request, sid string) *http.Request {
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		r.Header.Set(mcpSessionHeader, sid)
		r.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	return r
}

// waitFor waits until ok holds (a session's close in the SDK runs on its own goroutine).
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5s", what)
		}
	}
}

// TestMCPSessionsBelongToTheirOpener: a session is its opener's alone (tenant, subject
// and scopes), for as long as it lives; one the endpoint does not hold (ended, expired,
// or never opened here) is refused, never passed on. Before, the owners of the oldest
// sessions were forgotten past 65,536 of them, and their sessions then served any
// caller, another tenant's; and a token of narrower scopes used a wider one's session.
func TestMCPSessionsBelongToTheirOpener(t *testing.T) {
	m, f, now := sessionsUnderTest()
	u1 := caller("acme", "u1", "a b")
	_, s1 := request(m, http.MethodPost, "", u1)
	for _, tc := range []struct {
		c    mcpCaller
		want int
	}{{u1, http.StatusOK}, {caller("globex", "u2", "a b"), http.StatusForbidden}, {caller("acme", "u2", "a b"), http.StatusForbidden},
		// The same subject with other scopes opens a session of its own (a client does on
		// a 404; a 403 left one whose token was refreshed with more scopes stuck).
		{caller("acme", "u1", "a"), http.StatusNotFound}} {
		if code, _ := request(m, http.MethodPost, s1, tc.c); code != tc.want {
			t.Errorf("%q in u1's session: %d, want %d", tc.c.key, code, tc.want)
		}
	}
	if code, _ := request(m, http.MethodPost, "s-never", u1); code != http.StatusNotFound {
		t.Errorf("a session never opened here: %d, want 404", code)
	}
	// An idle session expires: its id is refused from then on, and the SDK's session is
	// closed (it keeps a session until it is deleted).
	*now = now.Add(mcpSessionIdle + time.Second)
	if code, _ := request(m, http.MethodPost, s1, u1); code != http.StatusNotFound {
		t.Errorf("an expired session: %d, want 404", code)
	}
	waitFor(t, "the expired session closed in the SDK", func() bool { return !f.holds(s1) })
	// A session its caller ended is gone; one the SDK ended on its own is let go.
	_, s2 := request(m, http.MethodPost, "", u1)
	request(m, http.MethodDelete, s2, u1)
	if code, _ := request(m, http.MethodGet, s2, u1); code != http.StatusNotFound {
		t.Errorf("an ended session: %d, want 404", code)
	}
	_, s3 := request(m, http.MethodPost, "", u1)
	f.mu.Lock()
	delete(f.sessions, s3)
	f.mu.Unlock()
	request(m, http.MethodPost, s3, u1) // the SDK answers 404
	waitFor(t, "the session the SDK ended let go", func() bool { return held(m) == 0 && counted(m, "s:acme\x00u1") == 0 })
}

// TestMCPSessionsAreBounded: a subject holds at most maxMCPPerSubject sessions whatever
// its tokens' scopes (429), the endpoint at most maxMCPSessions (503); a DELETE the SDK
// refused frees nothing; a request that opened no session frees its reservation; an
// anonymous caller is held to the endpoint's bound alone. Before, sessions were never
// bounded: one caller held 1.76 GB of them; then a DELETE with a bad header freed the
// count of a session the SDK kept, and a subject asking each time for other scopes had
// 256 more.
func TestMCPSessionsAreBounded(t *testing.T) {
	m, _, now := sessionsUnderTest()
	for i := range maxMCPPerSubject {
		if code, _ := request(m, http.MethodPost, "", caller("acme", "u1", fmt.Sprint("scope", i))); code != http.StatusOK {
			t.Fatalf("opening: %d", code)
		}
	}
	if code, _ := request(m, http.MethodPost, "", caller("acme", "u1", "other")); code != http.StatusTooManyRequests {
		t.Errorf("one more of the same subject, other scopes: %d, want 429", code)
	}
	for sid := range m.byID {
		if code, _ := request(m, http.MethodDelete, sid, m.byID[sid].caller, "Mcp-Protocol-Version", "1999-01-01"); code != http.StatusBadRequest {
			t.Fatalf("a DELETE the SDK refuses: %d", code)
		}
		break
	}
	if code, _ := request(m, http.MethodPost, "", caller("acme", "u1", "x")); code != http.StatusTooManyRequests {
		t.Errorf("after a DELETE the SDK refused: %d, want 429 still", code)
	}
	if code, _ := request(m, http.MethodPost, "", caller("acme", "u2", "x"), "X-Fail", "1"); code != http.StatusOK || m.count["s:acme\x00u2"] != 0 {
		t.Errorf("a POST that opened nothing: %d, counted %d", code, m.count["s:acme\x00u2"])
	}
	for i := 0; held(m) < maxMCPSessions; i++ {
		request(m, http.MethodPost, "", mcpCaller{}) // anonymous: only the endpoint's bound
	}
	if code, _ := request(m, http.MethodPost, "", caller("globex", "u3", "")); code != http.StatusServiceUnavailable {
		t.Errorf("past the endpoint's bound: %d, want 503", code)
	}
	*now = now.Add(mcpSessionIdle + time.Second)
	// The expired sessions are closed in the SDK, and counted until they are.
	request(m, http.MethodPost, "", caller("acme", "u1", "x"))
	waitFor(t, "the expired sessions closed", func() bool { return counted(m, "") <= 1 })
	*now = now.Add(2 * mcpSweepEvery)
	if code, _ := request(m, http.MethodPost, "", caller("acme", "u1", "y")); code != http.StatusOK {
		t.Errorf("once the sessions expired: %d, want 200", code)
	}
	if n := held(m); n > 2 {
		t.Errorf("%d sessions held, want the new ones", n)
	}
}

// TestMCPTenantBound: a tenant holds at most maxMCPPerTenant sessions, however many
// subjects open them, so that one tenant cannot take the whole endpoint from the others.
func TestMCPTenantBound(t *testing.T) {
	m, _, _ := sessionsUnderTest()
	for i := range maxMCPPerTenant {
		if code, _ := request(m, http.MethodPost, "", caller("acme", fmt.Sprint("u", i/100), "")); code != http.StatusOK {
			t.Fatalf("opening %d: %d", i, code)
		}
	}
	if code, _ := request(m, http.MethodPost, "", caller("acme", "fresh", "")); code != http.StatusTooManyRequests {
		t.Errorf("past the tenant's bound: %d, want 429", code)
	}
	if code, _ := request(m, http.MethodPost, "", caller("globex", "u", "")); code != http.StatusOK {
		t.Errorf("another tenant: %d, want 200", code)
	}
}

// TestMCPConcurrentOpensAndStreams: sessions opened at once stay within the subject's
// bound (the count is taken before the SDK opens one), and stateless requests under way
// (a 2026-07-28 client's listen streams) are bounded as sessions are.
func TestMCPConcurrentOpensAndStreams(t *testing.T) {
	m, f, _ := sessionsUnderTest()
	u := caller("acme", "u1", "")
	codes := make(chan int, maxMCPPerSubject+50)
	var wg sync.WaitGroup
	for range maxMCPPerSubject + 50 {
		wg.Go(func() {
			code, _ := request(m, http.MethodPost, "", u, "X-Hold", "1")
			codes <- code
		})
	}
	waitFor(t, "the opens past the bound refused", func() bool { return len(codes) == 50 })
	close(f.hold)
	wg.Wait()
	close(codes)
	if n := held(m); n != maxMCPPerSubject {
		t.Errorf("%d sessions opened at once, want at most %d", n, maxMCPPerSubject)
	}
	m2, f2, _ := sessionsUnderTest()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var held sync.WaitGroup
	for range maxMCPPerSubject {
		held.Go(func() {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
			r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
			r.Header.Set("X-Hold", "1")
			m2.serve(httptest.NewRecorder(), r, u)
		})
	}
	waitFor(t, "the streams under way", func() bool { m2.mu.Lock(); defer m2.mu.Unlock(); return m2.flows["s:acme\x00u1"] == maxMCPPerSubject })
	if code, _ := request(m2, http.MethodPost, "", u, "Mcp-Protocol-Version", "2026-07-28"); code != http.StatusTooManyRequests {
		t.Errorf("one more stream of the subject: %d, want 429", code)
	}
	close(f2.hold)
	held.Wait()
	if code, _ := request(m2, http.MethodPost, "", u, "Mcp-Protocol-Version", "2026-07-28"); code != http.StatusOK {
		t.Errorf("once the streams ended: %d, want 200", code)
	}
}

// TestMCPSessionClosedInTheRealSDK: an expired session is closed in the go-sdk's own
// handler (it keeps a session until it is deleted): the SDK answers 404 for it after.
func TestMCPSessionClosedInTheRealSDK(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	m := newMCPSessions(h, func(string, ...any) {})
	now := time.Unix(1_000_000, 0)
	m.now = func() time.Time { return now }
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(handler http.Handler, sid, body string) (int, string) {
		r := withMCPHeaders(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), sid)
		w := httptest.NewRecorder()
		if handler == nil {
			m.serve(w, r, mcpCaller{})
		} else {
			handler.ServeHTTP(w, r)
		}
		return w.Code, w.Header().Get(mcpSessionHeader)
	}
	code, sid := post(nil, "", init)
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", code, sid)
	}
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	if code, _ := post(h, sid, ping); code != http.StatusOK {
		t.Fatalf("the SDK's session: %d", code)
	}
	now = now.Add(mcpSessionIdle + time.Second)
	m.mu.Lock()
	m.sweepLocked()
	m.mu.Unlock()
	waitFor(t, "the SDK's session closed", func() bool { code, _ := post(h, sid, ping); return code == http.StatusNotFound })
}

// TestMCPSessionsNotHeld: a session the SDK answers 404 for is let go and closed in the
// SDK all the same (a 404 that did not mean the session was gone freed its count while
// the SDK kept it: sessions without bound); a session whose opening the SDK ended at once
// (a failed initialization) expires within a minute unless a request is served on it
// (it held its opener's count for 30 minutes); a 2026-07-28 request naming a session is
// refused (it was served outside the session's bounds).
func TestMCPSessionsNotHeld(t *testing.T) {
	m, f, now := sessionsUnderTest()
	u := caller("acme", "u1", "")
	_, s1 := request(m, http.MethodPost, "", u)
	request(m, http.MethodPost, s1, u, "X-404", "1")
	m.mu.Lock()
	_, isHeld := m.byID[s1]
	m.mu.Unlock()
	if isHeld {
		t.Error("a session the SDK answered 404 for is still held")
	}
	waitFor(t, "the session closed in the SDK", func() bool { return !f.holds(s1) })

	_, unconfirmed := request(m, http.MethodPost, "", u)
	_, confirmed := request(m, http.MethodPost, "", u)
	request(m, http.MethodPost, confirmed, u) // notifications/initialized, say
	*now = now.Add(mcpUnconfirmedIdle + time.Second)
	if code, _ := request(m, http.MethodPost, unconfirmed, u); code != http.StatusNotFound {
		t.Errorf("a session never used past its opening, a minute on: %d, want 404", code)
	}
	if code, _ := request(m, http.MethodPost, confirmed, u); code != http.StatusOK {
		t.Errorf("a session in use, a minute on: %d, want 200", code)
	}
	if code, _ := request(m, http.MethodPost, confirmed, u, "Mcp-Protocol-Version", "2026-07-28"); code != http.StatusBadRequest {
		t.Errorf("a 2026-07-28 request naming a session: %d, want 400", code)
	}
}

// TestMCPSessionCloseStuckOnACall: the SDK's close of a session waits for its calls
// under way (a tool waiting for an answer its gone client will never give): such a
// session keeps its own counts until its close returns, and holds up no other session's
// close. Before, one such close blocked the one goroutine closing sessions for good:
// every session expired after it stayed open in the SDK, its count freed.
func TestMCPSessionCloseStuckOnACall(t *testing.T) {
	started, stop := make(chan struct{}, 1), make(chan struct{})
	defer close(stop)
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "block"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		started <- struct{}{}
		<-stop // waits for an answer nobody gives
		return &sdk.CallToolResult{}, nil, nil
	})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	m := newMCPSessions(h, func(string, ...any) {})
	now := time.Unix(1_000_000, 0)
	m.now = func() time.Time { return now } // now is moved under m.mu (expire)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, caller("acme", "u1", "")) }))
	defer hs.Close()
	post := func(ctx context.Context, sid, body string) (int, string) {
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(withMCPHeaders(r, sid))
		if err != nil {
			return -1, ""
		}
		defer func() { _ = resp.Body.Close() }()
		if ctx.Err() == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		return resp.StatusCode, resp.Header.Get(mcpSessionHeader)
	}
	open := func() string {
		code, sid := post(context.Background(), "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		if code != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %q", code, sid)
		}
		post(context.Background(), sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	expire := func() {
		m.mu.Lock()
		now = now.Add(mcpSessionIdle + time.Minute)
		m.sweepLocked()
		m.mu.Unlock()
	}
	stuck := open()
	ctx, cancel := context.WithCancel(context.Background())
	go post(ctx, stuck, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	<-started
	cancel() // the client goes away; the call runs on
	waitFor(t, "the call's request ended", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.byID[stuck].active == 0 })
	expire()
	var others []string
	for range 5 {
		others = append(others, open())
	}
	expire()
	sdkHolds := func(sid string) bool {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, withMCPHeaders(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)), sid))
		return w.Code == http.StatusOK
	}
	for _, sid := range others {
		waitFor(t, "an expired session closed in the SDK", func() bool { return !sdkHolds(sid) })
	}
	waitFor(t, "the closed sessions' counts freed", func() bool { return counted(m, "s:acme\x00u1") == 1 })
	if held(m) != 0 {
		t.Errorf("%d sessions held after their expiry", held(m))
	}
}

// TestMCPRequestsInASessionAreBounded: a session's requests under way are bounded as
// stateless ones are (each holds a stream); one session held any number.
func TestMCPRequestsInASessionAreBounded(t *testing.T) {
	m, f, _ := sessionsUnderTest()
	u := caller("acme", "u1", "")
	_, sid := request(m, http.MethodPost, "", u)
	var wg sync.WaitGroup
	for range maxMCPPerSubject {
		wg.Go(func() { request(m, http.MethodPost, sid, u, "X-Hold", "1") })
	}
	waitFor(t, "the requests under way", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.flows["s:acme\x00u1"] == maxMCPPerSubject })
	if code, _ := request(m, http.MethodPost, sid, u); code != http.StatusTooManyRequests {
		t.Errorf("one more request in the session: %d, want 429", code)
	}
	close(f.hold)
	wg.Wait()
	if code, _ := request(m, http.MethodPost, sid, u); code != http.StatusOK {
		t.Errorf("once they ended: %d, want 200", code)
	}
}
