package mcp

import (
	"context"
	"crypto/rand"
	"net/http"
)

// A request to an MCP server over HTTP is a POST, and net/http never sends a POST again
// on its own: one that went out on a pooled connection the server was closing (an idle
// connection it dropped, a restart) fails with EOF, though the server never read it. A
// request with an Idempotency-Key header it does send again, on a new connection, when
// the old one gave no answer. The group marks the contexts of the requests that are safe
// to repeat — a session's initialization, listing tools, prompts and resources, reading
// a prompt or a resource, completions, and a call of a tool the server says is
// idempotent or read-only — and replayTransport gives their POSTs the header. A call of
// any other tool fails as before: sent again, it could take effect twice.

// replayableKey marks a context whose requests may be sent twice (replayable).
type replayableKey struct{}

// replayable is ctx with its MCP requests marked safe to send again.
func replayable(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayableKey{}, true)
}

// replayTransport gives the POSTs of a replayable context an Idempotency-Key (a random
// one per request: the server is not asked to deduplicate, net/http to send again).
type replayTransport struct {
	next http.RoundTripper
}

func (t replayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && r.GetBody != nil && r.Context().Value(replayableKey{}) != nil &&
		r.Header.Get("Idempotency-Key") == "" && r.Header.Get("X-Idempotency-Key") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Idempotency-Key", rand.Text())
	}
	return t.next.RoundTrip(r)
}
