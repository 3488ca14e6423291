package mcp

import (
	"context"
	"net/http"
	"sync/atomic"
)

// A request to an MCP server over HTTP is a POST, and net/http does not send a POST
// again on its own when the connection it went out on dies without an answer: a pooled
// connection the server was closing (idle connections dropped, a restart behind a load
// balancer), over HTTP/1.1 or HTTP/2 alike, fails the request with EOF. The group marks
// the requests that are safe to repeat — a session's initialization, listing tools,
// prompts and resources, reading a prompt or a resource, completions, and calls of a
// tool the server calls read-only or idempotent (its annotations) — and replayTransport
// sends such a request once more when it got no answer at all. The server may have
// handled the first (the answer, not the request, may be what was lost): that is why
// only these are sent again. A call of any other tool is never sent twice: it fails, and
// the model reads why.

// replayableKey marks a context whose requests may be sent twice, while its flag holds.
type replayableKey struct{}

// always is the flag of replayable: set for good.
var always = func() *atomic.Bool { b := &atomic.Bool{}; b.Store(true); return b }()

// replayable is ctx with its MCP requests marked safe to send again.
func replayable(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayableKey{}, always)
}

// replayableUntil is replayable until done is called: for a context the SDK keeps beyond
// the request it was given for (Connect's, which its session's requests inherit; only
// the initialization is safe to repeat).
func replayableUntil(ctx context.Context) (_ context.Context, done func()) {
	on := &atomic.Bool{}
	on.Store(true)
	return context.WithValue(ctx, replayableKey{}, on), func() { on.Store(false) }
}

func isReplayable(ctx context.Context) bool {
	on, _ := ctx.Value(replayableKey{}).(*atomic.Bool)
	return on != nil && on.Load()
}

// replayTransport sends a POST of a replayable context once more when the first got no
// answer (a transport error, its context still alive), with its body read again.
type replayTransport struct {
	next http.RoundTripper
}

func (t replayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	replay := r.Method == http.MethodPost && r.GetBody != nil && isReplayable(ctx)
	res, err := t.next.RoundTrip(r)
	if err == nil || !replay || ctx.Err() != nil {
		return res, err
	}
	body, berr := r.GetBody()
	if berr != nil {
		return res, err
	}
	again := r.Clone(ctx)
	again.Body = body
	return t.next.RoundTrip(again)
}
