package mcp

import (
	"context"
	"time"
)

// ElapseBackoff moves the group's last failure back by the backoff that follows it, as if
// that backoff had passed: a test of what the group does once the backoff is over need
// not wait it out on the wall clock. It has no effect when no failure is recorded.
func (g *Group) ElapseBackoff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.failedAt.IsZero() {
		g.failedAt = g.failedAt.Add(-g.backoffLocked())
	}
}

// Meta is the _meta a request of ctx to the group carries (prompts, resources).
func (g *Group) Meta(ctx context.Context) map[string]any { return g.meta(ctx) }

// SlowLogHandling delays the handling of each log message a group's server sends by d,
// as a busy process may, until the returned func is called.
func SlowLogHandling(d time.Duration) (restore func()) {
	was := slowLogs.Swap(int64(d))
	return func() { slowLogs.Store(was) }
}
