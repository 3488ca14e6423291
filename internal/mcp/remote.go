package mcp

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// MetaPrefix starts the _meta keys toolmesh itself sets on the calls it sends MCP
// servers (a reverse-DNS prefix and a slash, as MCP names the _meta keys of an
// implementation). They come from toolmesh alone: a ToolCallContext entry under it never
// travels to a server, and toolmesh's MCP endpoint drops such keys from its callers'
// _meta.
const MetaPrefix = "io.toolmesh/"

// TenantMetaKey is the _meta key of the tenant the orchestrator verified for the run (or
// the MCP session) a call belongs to; absent without one. It is what an MCP server reads
// the tenant from: a context entry such as tenant_id or tenantId is the client's word.
const TenantMetaKey = MetaPrefix + "tenant"

// remote is one tool of an MCP server, as the loop sees it.
type remote struct {
	g    *Group
	def  tool.Definition
	meta tool.Metadata
	// repeatable says the server calls the tool idempotent or read-only: a request of
	// its calls may be sent again (replay.go).
	repeatable bool
}

// Group is the role of the tool's group, for spans, metrics and artifact rules.
func (r *remote) Group() string { return r.g.opts.Role }

func newRemote(g *Group, t *sdk.Tool) (*remote, error) {
	in := schema.Empty()
	if t.InputSchema != nil {
		raw, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		if in, err = schema.FromJSON(raw); err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
	}
	timeout := g.opts.Server.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	meta := tool.Metadata{Timeout: timeout}
	repeatable := false
	if a := t.Annotations; a != nil {
		meta.Idempotent = a.IdempotentHint
		repeatable = a.IdempotentHint || a.ReadOnlyHint
	}
	return &remote{g: g, def: tool.Definition{Name: t.Name, Description: t.Description, InputSchema: in}, meta: meta, repeatable: repeatable}, nil
}

func (r *remote) Definition() tool.Definition { return r.def }
func (r *remote) Metadata() tool.Metadata     { return r.meta }

// Call calls the tool on the server. Failures to reach it are error results the model
// reads; the returned error is always nil.
// Call sends the call to the MCP server; a run's journal records it (and a resumed run
// replays its outcome instead of sending it again).
func (r *remote) Call(ctx context.Context, input string) (tool.Result, error) {
	res, _ := toolcall.Journaled(ctx, r.def.Name, r.meta.Idempotent, toolcall.Dispatcher{Worker: "mcp:" + r.g.opts.Server.Name,
		Send: func(ctx context.Context) (tool.Result, []byte) { return r.call(ctx, input), nil }})
	return res, nil
}

func (r *remote) call(ctx context.Context, input string) tool.Result {
	name := r.def.Name
	session, err := r.g.sessionFor(ctx)
	if err != nil {
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' is not available: %v", name, err))
	}
	if strings.TrimSpace(input) == "" {
		input = "{}" // no arguments
	}
	params := &sdk.CallToolParams{Name: name, Arguments: json.RawMessage(input)}
	// _meta carries what the group's converter lets through, the trace context and a
	// progress token: absent when there is none of these, an empty object when the
	// converter keeps nothing of a non-empty context. Keys
	// under MetaPrefix are toolmesh's: a context entry never supplies them.
	tenant := toolinternal.TenantFrom(ctx)
	if bag := toolcall.Carried(ctx); bag.Len() > 0 || tenant != "" || r.g.opts.Credentials != nil {
		params.Meta = sdk.Meta{}
		r.g.addMeta(ctx, params.Meta)
	}
	// The trace context travels in _meta too (the SEP-414 keys traceparent and
	// tracestate), so that the server's spans join the run's trace; baggage does not.
	if trace.SpanContextFromContext(ctx).IsValid() {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		for k, v := range carrier {
			params.Meta[k] = v
		}
	}
	// A progress token asks the server for progress notifications: only when a report
	// reaches someone, so that a call with nothing to carry sends no _meta at all.
	if report := progressReport(ctx); report != nil {
		tok, done := r.g.token(report)
		// The client may handle a notification sent just before the result after it:
		// the token is kept a little longer (notify.go).
		defer time.AfterFunc(logGrace, done)
		params.SetProgressToken(tok)
	}
	r.g.wantLogs(ctx, session, params) // for the endpoint's client that set a log level (notify.go)

	parent := ctx
	ctx, untrack := r.g.track(ctx) // the group's Close ends the call
	defer untrack()
	// The timeout stops while a person answers the tool's questions (input.go).
	ctx, timer := withPausableTimeout(ctx, r.meta.Timeout)
	defer timer.stop()
	asks := &asking{ctx: ctx, timer: timer, tool: name, server: r.g.opts.Server.Name}
	if r.repeatable {
		ctx = replayable(ctx)
	}
	res, err := r.g.callAsking(ctx, session, params, timer, asks) // a done ctx sends notifications/cancelled
	// Its last log messages may still be on their way (notify.go).
	r.g.finished(session, ctx)
	switch {
	case err == nil:
	case parent.Err() != nil: // the run's deadline or cancellation, not the tool's timer
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was cancelled: %v", name, parent.Err()))
	case timer.timedOut():
		return tool.ErrorWithCode(tool.CodeTimeout, fmt.Sprintf("tool '%s' timed out after %s on MCP server %s; its outcome is unknown", name, r.meta.Timeout, r.g.opts.Server.Name))
	case ctx.Err() != nil:
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' was cancelled: the orchestrator closed its MCP sessions", name))
	default:
		return tool.ErrorWithCode(tool.CodeUnavailable, fmt.Sprintf("tool '%s' failed on MCP server %s: %v", name, r.g.opts.Server.Name, err))
	}
	out := resultOf(name, res)
	out.Content = asks.withNotes(out.Content) // what became of questions nobody answered
	return out
}

// MaxResultBytes bounds what one MCP call answers (its text, the bytes of its images,
// audio and resources, its structured content), as
// gRPC bounds a worker's answer: a larger result becomes an error the model reads.
const MaxResultBytes = 4 << 20

func tooLarge(name string, n int) tool.Result {
	return tool.ErrorWithCode(tool.CodeFailed, fmt.Sprintf("tool '%s' ran, but its result is %d bytes, over the %d bytes a result may have, and was dropped. Call it again in a way that returns less.", name, n, MaxResultBytes))
}

// headerClient is an HTTP client that adds headers to every request, over TLS
// configured by tc when set.
func headerClient(h map[string]string, tc *tls.Config) *http.Client {
	next := http.DefaultTransport
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		next = t
	}
	if len(h) == 0 && tc == nil {
		return nil
	}
	return &http.Client{Transport: headerTransport{h: h, next: next}}
}

type headerTransport struct {
	h    map[string]string
	next http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.next.RoundTrip(r)
}
