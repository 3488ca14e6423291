package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// relay is where the notifications of a call through the endpoint go: to the MCP client
// that made it. progress is nil when the client sent no progress token, log when it set
// no log level.
type relay struct {
	progress func(*sdk.ProgressNotificationParams)
	log      func(*sdk.LoggingMessageParams)
}

type relayKey struct{}

func relayFrom(ctx context.Context) *relay {
	r, _ := ctx.Value(relayKey{}).(*relay)
	return r
}

// MaxProgressMessageBytes and MaxLogBytes bound what the endpoint passes on of one
// progress notification's message and of one log message's data (as JSON): past them
// the message is cut, the data replaced by a note of its size.
const (
	MaxProgressMessageBytes = 4 << 10
	MaxLogBytes             = 16 << 10
)

// withRelay is ctx of an endpoint call whose client hears its progress (when it sent a
// progress token: a worker tool's reports, counted 1, 2, 3…, and an MCP server's
// notifications as the server numbered them) and its tool's log messages (when the
// client set a log level, or the request names one: those at or above it).
func withRelay(ctx context.Context, req *sdk.CallToolRequest, wantsLogs bool) context.Context {
	ss := req.Session
	if ss == nil {
		return ctx
	}
	reqCtx := ctx
	r := &relay{}
	if wantsLogs {
		r.log = func(p *sdk.LoggingMessageParams) {
			q := *p
			if b, err := jsonSize(q.Data); err != nil || b > MaxLogBytes {
				q.Data = fmt.Sprintf("[a log message of %d bytes, over the %d bytes passed on]", b, MaxLogBytes)
			}
			_ = ss.Log(reqCtx, &q) //nolint:staticcheck // logging is deprecated in 2026-07-28, not gone
		}
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		var mu sync.Mutex
		var count float64
		r.progress = func(p *sdk.ProgressNotificationParams) {
			mu.Lock()
			defer mu.Unlock()
			q := &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: p.Progress, Total: p.Total, Message: toolinternal.Truncate(p.Message, MaxProgressMessageBytes)}
			if q.Progress <= count && count > 0 {
				q.Progress = count + 1 // progress must increase with every notification
			}
			count = q.Progress
			_ = ss.NotifyProgress(reqCtx, q)
		}
		report := r.progress
		var next float64
		ctx = toolcall.WithProgress(ctx, func(status string) {
			mu.Lock()
			next++
			n := next
			mu.Unlock()
			report(&sdk.ProgressNotificationParams{Progress: n, Message: status})
		})
	}
	return context.WithValue(ctx, relayKey{}, r)
}

// progressReport is where an MCP server's progress notifications for the call in ctx go:
// straight to the endpoint's client that made the call, else to the call's progress
// reports (tool.Progress) as text; nil when they reach no one.
func progressReport(ctx context.Context) func(*sdk.ProgressNotificationParams) {
	if r := relayFrom(ctx); r != nil && r.progress != nil {
		return r.progress
	}
	if toolcall.ReportsTo(ctx) {
		return func(p *sdk.ProgressNotificationParams) { tool.Progress(ctx, progressText(p)) }
	}
	return nil
}

// progressText is a progress notification as a status line: its message, else
// "<progress> of <total>", else the progress alone.
func progressText(p *sdk.ProgressNotificationParams) string {
	switch {
	case p.Message != "":
		return p.Message
	case p.Total > 0:
		return fmt.Sprintf("%g of %g", p.Progress, p.Total)
	default:
		return fmt.Sprintf("%g", p.Progress)
	}
}

// onLog passes a server's log message to the endpoint client whose call it belongs to:
// the one call in flight on the session that sent it (a log message names no call); with
// none, or several, it goes to no client.
func (g *Group) onLog(_ context.Context, req *sdk.LoggingMessageRequest) {
	if req.Params == nil {
		return
	}
	c := g.inflight.only(req.Session)
	if c == nil {
		return
	}
	if r := relayFrom(c.ctx); r != nil && r.log != nil {
		r.log(req.Params)
	}
}

// wantLogs asks the server of cs for the log messages of the call params, when the call
// in ctx has a client to pass them to (the endpoint's client set a log level) and the
// server has logging: in the request's _meta on a 2026-07-28 session, else with
// logging/setLevel, once per session.
func (g *Group) wantLogs(ctx context.Context, cs *sdk.ClientSession, params *sdk.CallToolParams) {
	if r := relayFrom(ctx); r == nil || r.log == nil {
		return
	}
	init := cs.InitializeResult()
	if init == nil || init.Capabilities == nil || init.Capabilities.Logging == nil {
		return
	}
	if init.ProtocolVersion >= Protocol20260728 {
		if params.Meta == nil {
			params.Meta = sdk.Meta{}
		}
		params.Meta[sdk.MetaKeyLogLevel] = "debug"
		return
	}
	if _, asked := g.logging.LoadOrStore(cs, true); asked {
		return
	}
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "debug"}); err != nil { //nolint:staticcheck // see withRelay
		g.logging.Delete(cs)
		g.log.WarnContext(ctx, "mcp server refused logging/setLevel; its log messages do not reach the endpoint's clients", "error", err.Error())
	}
}

// jsonSize is the bytes of v as JSON.
func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
