package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// relay is where the notifications of a call through the endpoint go: to the MCP client
// that made it. progress is nil when the client sent no progress token, log when it set
// no log level.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
type relay struct {
	progress func(*sdk.ProgressNotificationParams)
	log      func(*sdk.LoggingMessageParams)
	// sample asks the client for a completion (sampling/createMessage); nil when the
	// client declared no sampling.
	sample func(context.Context, *sdk.CreateMessageParams) (*sdk.CreateMessageResult, error)
	// ended is set once the call has its result: a late log message then goes to the
	// client's session, no longer on the call's response stream.
	ended atomic.Bool
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
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
func withRelay(ctx context.Context, req *sdk.CallToolRequest, wantsLogs bool) context.Context {
	ss := req.Session
	if ss == nil {
		return ctx
	}
	reqCtx := ctx
	r := &relay{}
	if p := ss.InitializeParams(); p != nil && p.Capabilities != nil && p.Capabilities.Sampling != nil {
		r.sample = func(ctx context.Context, q *sdk.CreateMessageParams) (*sdk.CreateMessageResult, error) {
			return ss.CreateMessage(ctx, q) //nolint:staticcheck // sampling is deprecated in 2026-07-28, not gone
		}
	}
	if wantsLogs {
		r.log = func(p *sdk.LoggingMessageParams) {
			q := *p
			if b, err := jsonSize(q.Data); err != nil || b > MaxLogBytes {
				q.Data = fmt.Sprintf("[a log message of %d bytes, over the %d bytes passed on]", b, MaxLogBytes)
			}
			ctx := context.WithoutCancel(reqCtx)
			if r.ended.Load() {
				ctx = context.Background() // not related to the call, whose stream may be closed
			}
			_ = ss.Log(ctx, &q) //nolint:staticcheck // logging is deprecated in 2026-07-28, not gone
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
			ctx := reqCtx
			if r.ended.Load() {
				ctx = context.Background() // not related to the call, whose stream may be closed
			}
			_ = ss.NotifyProgress(ctx, q)
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
	if d := slowLogs.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if req.Params == nil {
		return
	}
	var callCtx context.Context
	if c := g.inflight.only(req.Session); c != nil {
		callCtx = c.ctx
	} else if v, ok := g.recent.Load(req.Session); ok && g.inflight.count(req.Session) == 0 && time.Since(v.(recentCall).at) < logGrace {
		// The client handles notifications after the response that followed them may
		// have ended the call: a message that comes within logGrace of the session's
		// last call, with no other call begun, is that call's.
		callCtx = v.(recentCall).ctx
	}
	if callCtx == nil {
		return
	}
	if r := relayFrom(callCtx); r != nil && r.log != nil {
		r.log(req.Params)
	}
}

// slowLogs delays the handling of each log message (a time.Duration), in tests of what
// comes of one handled late.
var slowLogs atomic.Int64

// logGrace is how long after a call ends a log message from its session is still its.
const logGrace = time.Second

// recentCall is the last call that ended on a session, and when.
type recentCall struct {
	ctx context.Context
	at  time.Time
}

// finished records the end of the call in ctx on cs, for its late log messages; calls
// whose client hears no log messages are not recorded.
func (g *Group) finished(cs *sdk.ClientSession, ctx context.Context) {
	r := relayFrom(ctx)
	if r == nil {
		return
	}
	r.ended.Store(true)
	if r.log == nil {
		return
	}
	g.recent.Store(cs, recentCall{ctx: ctx, at: time.Now()})
	g.recent.Range(func(k, v any) bool { // bounded by the sessions alive in the last logGrace
		if time.Since(v.(recentCall).at) > logGrace {
			g.recent.Delete(k)
		}
		return true
	})
}

// count is the number of calls in flight on cs.
func (f *inflight) count(cs *sdk.ClientSession) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[cs])
}

// wantLogs asks the server of cs for the log messages of the call params, when the call
// in ctx has a client to pass them to (the endpoint's client set a log level) and the
// server has logging: in the request's _meta on a 2026-07-28 session, else with
// logging/setLevel, once per session.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
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

// sampler is the group's handler of sampling requests: declared only to a server pinned
// to 2025-11-25, which sends them on the session while a call is open. Declared to a
// 2026-07-28 server, sampling would be asked for in input_required results, which the
// group does not answer.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
func (g *Group) sampler() func(context.Context, *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
	if g.opts.Server.ProtocolVersion != Protocol20251125 {
		return nil
	}
	return g.onSample
}

// onSample passes a server's sampling request to the endpoint client whose call it
// belongs to (the one call in flight on the session that sent it), when that client
// declared sampling; otherwise it is refused, saying why.
//
//nolint:staticcheck // logging and sampling are deprecated in 2026-07-28 (SEP-2577), not gone
func (g *Group) onSample(ctx context.Context, req *sdk.CreateMessageRequest) (*sdk.CreateMessageResult, error) {
	c := g.inflight.only(req.Session)
	if c == nil {
		return nil, errors.New("toolmesh cannot tell which call this sampling request belongs to: the session has no single call in flight")
	}
	r := relayFrom(c.ctx)
	if r == nil || r.sample == nil {
		return nil, errors.New("sampling is not available to this call: it did not come from an MCP client that declared sampling")
	}
	if n, err := jsonSize(req.Params); err != nil || n > MaxResultBytes {
		return nil, fmt.Errorf("the sampling request is over the %d bytes toolmesh passes on", MaxResultBytes)
	}
	res, err := r.sample(c.ctx, req.Params)
	if err != nil {
		return nil, err
	}
	if n, err := jsonSize(res); err != nil || n > MaxResultBytes {
		return nil, fmt.Errorf("the client's sampling answer is over the %d bytes toolmesh passes on", MaxResultBytes)
	}
	return res, nil
}
