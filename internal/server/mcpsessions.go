package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/mcp"
)

// Bounds of the MCP endpoint's sessions and streams. A session with no request under
// way and none for mcpSessionIdle is closed (its id refused from then on). An
// authenticated subject (whatever its token's scopes) holds at most maxMCPPerSubject
// sessions at once, and as many requests under way, in its sessions or stateless (each
// holds a stream: a 2026-07-28 client's subscriptions/listen lasts as long as its
// connection); a tenant at most maxMCPPerTenant of each; the endpoint at most
// maxMCPSessions of each (a session or a stream holds 25 to 95 KiB). A session closed
// in the SDK counts until the close returns (it waits for the session's calls).
const (
	mcpSessionIdle     = 30 * time.Minute
	mcpUnconfirmedIdle = time.Minute
	mcpSweepEvery      = time.Second // at most this often when a bound is reached
	maxMCPPerSubject   = 256
	maxMCPPerTenant    = 2_500
	maxMCPSessions     = 10_000
)

// mcpCaller is who a request of the MCP endpoint comes from, as its authentication
// verified it.
type mcpCaller struct {
	// key is what a session is bound to: the tenant, the subject and the token's scopes
	// (a token of other scopes does not use a session, which keeps its opener's grants).
	key string
	// subject and tenant are what the bounds count by; "" for an anonymous caller (an
	// endpoint without authentication, or one that lets requests without a token in),
	// whom only the endpoint's bound holds.
	subject, tenant string
}

// mcpSessions binds each session of the MCP endpoint to the caller that opened it and
// bounds them. A request naming a session it does not hold (never opened here, ended,
// or expired) is answered 404, as streamable HTTP asks, the client then opening a new
// one: never passed on, which would let any caller use a session another opened.
type mcpSessions struct {
	next http.Handler
	idle time.Duration
	now  func() time.Time
	// audit logs a refused use of another caller's session.
	audit func(msg string, kv ...any)

	mu    sync.Mutex
	byID  map[string]*mcpSession
	count map[string]int // sessions (and reservations) by "s:"+subject and "t:"+tenant; "" the endpoint's
	flows map[string]int // requests under way (in sessions or stateless), counted the same way
	sweep *time.Timer    // the next sweep of idle sessions, while there are sessions
	swept time.Time      // the last sweep a reached bound asked for
}

// mcpSession is a session as mcpSessions holds it: who opened it, when a request last
// ended (or began) on it, and its requests under way (it does not expire meanwhile).
type mcpSession struct {
	caller mcpCaller
	last   time.Time
	active int
	// confirmed: a request after the one that opened it was served (the SDK writes a
	// session's id before its initialization runs, and ends it at once when that fails:
	// until confirmed, a session expires after mcpUnconfirmedIdle).
	confirmed bool
}

func newMCPSessions(next http.Handler, audit func(string, ...any)) *mcpSessions {
	return &mcpSessions{next: next, idle: mcpSessionIdle, now: time.Now, audit: audit,
		byID: map[string]*mcpSession{}, count: map[string]int{}, flows: map[string]int{}}
}

// serve passes r on for c: within its own session, opening one, or stateless. who
// describes the caller in the audit log.
func (m *mcpSessions) serve(w http.ResponseWriter, r *http.Request, c mcpCaller, who ...any) {
	stateless := r.Header.Get("Mcp-Protocol-Version") >= mcp.Protocol20260728
	if sid := r.Header.Get(mcpSessionHeader); sid != "" {
		if stateless {
			// A revision without sessions: its requests name none (one naming a session
			// would be served outside the session's bounds).
			http.Error(w, "a request of MCP "+mcp.Protocol20260728+" or later belongs to no session: send it without "+mcpSessionHeader, http.StatusBadRequest)
			return
		}
		m.serveSession(w, r, sid, c, who)
		return
	}
	opening := r.Method == http.MethodPost && !stateless
	if code, msg := m.reserve(opening, c); code != 0 {
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(60))
		}
		http.Error(w, msg, code)
		return
	}
	if !opening {
		defer m.release(m.flows, c)
		m.next.ServeHTTP(w, r)
		return
	}
	bound := false
	defer func() {
		if !bound {
			m.release(m.count, c) // the request opened no session
		}
	}()
	m.next.ServeHTTP(&sessionOpener{ResponseWriter: w, open: func(sid string) { bound = m.bind(sid, c) }}, r)
}

// serveSession passes on r, a request of session sid.
func (m *mcpSessions) serveSession(w http.ResponseWriter, r *http.Request, sid string, c mcpCaller, who []any) {
	// Its requests under way are bounded as stateless ones are (each holds a stream).
	if code, msg := m.reserve(false, c); code != 0 {
		http.Error(w, msg, code)
		return
	}
	defer m.release(m.flows, c)
	code, msg := m.enter(sid, c)
	if code == http.StatusForbidden {
		m.audit("MCP request refused: the session belongs to another caller", who...)
	}
	if code != 0 {
		http.Error(w, msg, code)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		// The session is gone when its caller ended it, or when the SDK answers it does
		// not hold it (it ended it on its own: a failed initialization); it is closed in
		// the SDK all the same (should the 404 have meant something else), and its bounds
		// are freed. A DELETE the SDK refused ended nothing.
		gone := sw.code == http.StatusNotFound || (r.Method == http.MethodDelete && sw.code >= 200 && sw.code < 300)
		m.leave(sid, gone)
	}()
	m.next.ServeHTTP(sw, r)
}

// enter takes a request of session sid in: 0, or the status and message refusing it.
func (m *mcpSessions) enter(sid string, c mcpCaller) (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[sid]
	if ok && m.expiredLocked(s) {
		m.dropLocked(sid, s, true)
		ok = false
	}
	switch {
	case !ok:
		return http.StatusNotFound, "no such MCP session (it ended or expired): initialize a new one"
	case s.caller.key != c.key && s.caller.subject == c.subject && s.caller.subject != "" && s.caller.tenant == c.tenant:
		// The same subject with a token of other scopes (refreshed with more): a session
		// keeps its opener's grants, so the client opens a new one (it does on a 404).
		return http.StatusNotFound, "this MCP session was opened with other scopes: initialize a new one"
	case s.caller.key != c.key:
		return http.StatusForbidden, "this MCP session was opened by another caller"
	}
	s.active++
	s.last = m.now()
	return 0, ""
}

// owned reports whether session sid is one the endpoint holds for c.
func (m *mcpSessions) owned(sid string, c mcpCaller) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[sid]
	return ok && s.caller.key == c.key && !m.expiredLocked(s)
}

// leave ends a request enter took in: the session is gone (dropped, and closed in the
// SDK), or confirmed.
func (m *mcpSessions) leave(sid string, gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[sid]
	switch {
	case !ok:
	case gone:
		m.dropLocked(sid, s, true)
	default:
		s.active--
		s.last = m.now()
		s.confirmed = true
	}
}

// buckets are the counts c is held to: its subject's, its tenant's, the endpoint's.
func buckets(c mcpCaller) []string {
	out := []string{""}
	if c.subject != "" {
		out = append(out, "s:"+c.tenant+"\x00"+c.subject)
	}
	if c.tenant != "" {
		out = append(out, "t:"+c.tenant)
	}
	return out
}

// bucketBound is the bound of a bucket of buckets.
func bucketBound(b string) int {
	switch {
	case b == "":
		return maxMCPSessions
	case b[0] == 's':
		return maxMCPPerSubject
	default:
		return maxMCPPerTenant
	}
}

// reserve counts one more session of c (or, not session, one more stateless request):
// 0, or the status and message refusing it, nothing counted. Idle sessions are closed
// first when a bound of sessions is reached.
func (m *mcpSessions) reserve(session bool, c mcpCaller) (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	counts := m.flows
	if session {
		counts = m.count
	}
	full := func() string {
		for _, b := range buckets(c) {
			if counts[b] >= bucketBound(b) {
				return b
			}
		}
		return "\xff"
	}
	b := full()
	if b != "\xff" && session && m.now().Sub(m.swept) >= mcpSweepEvery {
		m.swept = m.now()
		m.sweepLocked()
		b = full()
	}
	switch b {
	case "\xff":
	case "":
		return http.StatusServiceUnavailable, "too many MCP sessions or streams open on this endpoint: try again later"
	default:
		return http.StatusTooManyRequests, "too many MCP sessions or streams open for this caller (" + strconv.Itoa(bucketBound(b)) +
			"): end some (DELETE a session) before opening another"
	}
	for _, b := range buckets(c) {
		counts[b]++
	}
	return 0, ""
}

// release gives back what reserve counted.
func (m *mcpSessions) release(counts map[string]int, c mcpCaller) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range buckets(c) {
		if counts[b]--; counts[b] <= 0 {
			delete(counts, b)
		}
	}
}

// bind records that c opened session sid, on the count reserve took for it; false when
// sid is bound already (the count is not used).
func (m *mcpSessions) bind(sid string, c mcpCaller) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[sid]; ok {
		return false
	}
	m.byID[sid] = &mcpSession{caller: c, last: m.now()}
	if m.sweep == nil {
		m.sweep = time.AfterFunc(m.idle/4, m.sweepTick)
	}
	return true
}

// sweepTick closes the idle sessions, and comes again while sessions remain.
func (m *mcpSessions) sweepTick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepLocked()
	if len(m.byID) > 0 {
		m.sweep = time.AfterFunc(m.idle/4, m.sweepTick)
	} else {
		m.sweep = nil
	}
}

// sweepLocked closes the sessions idle past m.idle. m.mu is held.
func (m *mcpSessions) sweepLocked() {
	for sid, s := range m.byID {
		if m.expiredLocked(s) {
			m.dropLocked(sid, s, true)
		}
	}
}

// expiredLocked reports whether s is idle past m.idle. m.mu is held.
func (m *mcpSessions) expiredLocked(s *mcpSession) bool {
	idle := m.idle
	if !s.confirmed {
		idle = min(idle, mcpUnconfirmedIdle)
	}
	return s.active == 0 && m.now().Sub(s.last) > idle
}

// dropLocked removes session sid. Its counts are freed once the SDK no longer holds it:
// at once when its client's DELETE ended it, else once it is closed in the SDK (it keeps
// a session until it is deleted), which waits for the session's calls under way (a tool
// waiting for an answer nobody will give holds its session's counts, not others'). m.mu
// is held.
func (m *mcpSessions) dropLocked(sid string, s *mcpSession, close bool) {
	delete(m.byID, sid)
	if !close || m.next == nil {
		m.uncountLocked(s.caller)
		return
	}
	go func() {
		r, err := http.NewRequest(http.MethodDelete, "/", nil)
		if err == nil {
			r.Header.Set(mcpSessionHeader, sid)
			m.next.ServeHTTP(discardResponse{header: http.Header{}}, r)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.uncountLocked(s.caller)
	}()
}

// uncountLocked frees a session's counts. m.mu is held.
func (m *mcpSessions) uncountLocked(c mcpCaller) {
	for _, b := range buckets(c) {
		if m.count[b]--; m.count[b] <= 0 {
			delete(m.count, b)
		}
	}
}

// discardResponse is a response nobody reads.
type discardResponse struct{ header http.Header }

func (d discardResponse) Header() http.Header       { return d.header }
func (discardResponse) Write(b []byte) (int, error) { return len(b), nil }
func (discardResponse) WriteHeader(int)             {}

// statusWriter notes the status of the response it writes.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush keeps server-sent events flowing through the wrapper.
func (s *statusWriter) Flush() {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
