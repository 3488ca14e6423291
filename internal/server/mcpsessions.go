package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/mcp"
)

// Bounds of the MCP endpoint's sessions: a session idle this long expires (the SDK
// closes it, and its id is refused from then on), an authenticated caller (a tenant's
// subject and scopes) holds at most maxMCPSessionsPerCaller at once, and the endpoint at
// most maxMCPSessions (a session holds about 30 KiB).
const (
	mcpSessionIdle          = 30 * time.Minute
	maxMCPSessionsPerCaller = 256
	maxMCPSessions          = 10_000
)

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

	mu        sync.Mutex
	byID      map[string]*mcpSession
	perCaller map[string]int
}

// mcpSession is a session as mcpSessions holds it: who opened it, when a request last
// ended (or began) on it, and its requests under way (it does not expire meanwhile).
type mcpSession struct {
	caller string
	last   time.Time
	active int
}

func newMCPSessions(next http.Handler, audit func(string, ...any)) *mcpSessions {
	return &mcpSessions{next: next, idle: mcpSessionIdle, now: time.Now, audit: audit,
		byID: map[string]*mcpSession{}, perCaller: map[string]int{}}
}

// serve passes r on for caller (its tenant, who it is and its scopes; "" without
// authentication): within its own session, or opening one. who describes the caller in
// the audit log.
func (m *mcpSessions) serve(w http.ResponseWriter, r *http.Request, caller string, who ...any) {
	sid := r.Header.Get(mcpSessionHeader)
	if sid != "" {
		code, msg := m.enter(sid, caller)
		if code == http.StatusForbidden {
			m.audit("MCP request refused: the session belongs to another caller", who...)
		}
		if code != 0 {
			http.Error(w, msg, code)
			return
		}
		defer m.leave(sid)
		m.next.ServeHTTP(w, r)
		if r.Method == http.MethodDelete {
			m.forget(sid)
		}
		return
	}
	if opens(r) {
		if code, msg := m.admit(caller); code != 0 {
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", strconv.Itoa(60))
			}
			http.Error(w, msg, code)
			return
		}
	}
	m.next.ServeHTTP(&sessionOpener{ResponseWriter: w, open: func(sid string) { m.bind(sid, caller) }}, r)
}

// opens reports whether r may open a session: a POST without a session, of a revision
// that has sessions (before 2026-07-28, whose requests are stateless).
func opens(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Mcp-Protocol-Version") < mcp.Protocol20260728
}

// enter takes a request of session sid in: 0, or the status and message refusing it.
func (m *mcpSessions) enter(sid, caller string) (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.byID[sid]
	if ok && s.active == 0 && m.now().Sub(s.last) > m.idle {
		m.dropLocked(sid, s)
		ok = false
	}
	switch {
	case !ok:
		return http.StatusNotFound, "no such MCP session (it ended or expired): initialize a new one"
	case s.caller != caller:
		return http.StatusForbidden, "this MCP session was opened by another caller"
	}
	s.active++
	s.last = m.now()
	return 0, ""
}

// leave ends a request enter took in.
func (m *mcpSessions) leave(sid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.byID[sid]; ok {
		s.active--
		s.last = m.now()
	}
}

// admit reports whether caller may open a session: 0, or the status and message
// refusing it. Expired sessions are dropped first.
func (m *mcpSessions) admit(caller string) (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Without authentication every caller is the same one (""): the endpoint's bound
	// alone holds then.
	perCaller := caller != "" && m.perCaller[caller] >= maxMCPSessionsPerCaller
	if len(m.byID) >= maxMCPSessions || perCaller {
		m.sweepLocked()
		perCaller = caller != "" && m.perCaller[caller] >= maxMCPSessionsPerCaller
	}
	switch {
	case perCaller:
		return http.StatusTooManyRequests, "too many MCP sessions open for this caller (" + strconv.Itoa(maxMCPSessionsPerCaller) +
			"): end some (DELETE) before opening another"
	case len(m.byID) >= maxMCPSessions:
		return http.StatusServiceUnavailable, "too many MCP sessions open on this endpoint: try again later"
	}
	return 0, ""
}

// bind records that caller opened session sid.
func (m *mcpSessions) bind(sid, caller string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[sid]; ok {
		return
	}
	m.byID[sid] = &mcpSession{caller: caller, last: m.now()}
	m.perCaller[caller]++
}

// forget drops a session its caller ended.
func (m *mcpSessions) forget(sid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.byID[sid]; ok {
		m.dropLocked(sid, s)
	}
}

// sweepLocked drops the sessions idle past m.idle. m.mu is held.
func (m *mcpSessions) sweepLocked() {
	now := m.now()
	for sid, s := range m.byID {
		if s.active == 0 && now.Sub(s.last) > m.idle {
			m.dropLocked(sid, s)
		}
	}
}

// dropLocked removes session sid. m.mu is held.
func (m *mcpSessions) dropLocked(sid string, s *mcpSession) {
	delete(m.byID, sid)
	if m.perCaller[s.caller]--; m.perCaller[s.caller] <= 0 {
		delete(m.perCaller, s.caller)
	}
}
