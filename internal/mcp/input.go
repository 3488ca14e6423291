package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// A tool of an MCP server may ask a person for input while it runs: in 2025-11-25 the
// server sends elicitation/create on the session while its tools/call is open; in
// 2026-07-28 (stateless) the call answers input_required with the questions and a
// request state, and the client calls again with the answers. Both reach the Asker in
// the call's context (a run's approvals; the endpoint's own MCP client), one question at
// a time, numbered in the order the call asked them; while a person answers, the call's
// timeout is paused.

// The MCP protocol revisions toolmesh speaks, both ways.
const (
	Protocol20251125 = "2025-11-25"
	Protocol20260728 = "2026-07-28"
)

// ProtocolMetaPrefix starts the _meta keys of the protocol itself (2026-07-28 carries the
// request's revision, client and capabilities under it): they never come from or go to a
// ToolCallContext.
const ProtocolMetaPrefix = "io.modelcontextprotocol/"

// ProtocolVersions are the revisions a pin (Server.ProtocolVersion,
// ServeOptions.ProtocolVersions) may name.
var ProtocolVersions = []string{Protocol20260728, Protocol20251125}

// maxInputRounds bounds the input_required rounds of one call.
const maxInputRounds = 10

// errToolTimeout ends a call whose time ran out (its pausable timer).
var errToolTimeout = errors.New("the tool's timeout ran out")

// pausable is a call's timeout that stops while a person answers its questions.
type pausable struct {
	mu     sync.Mutex
	t      *time.Timer
	left   time.Duration
	since  time.Time
	paused int
	fired  bool
	cancel context.CancelCauseFunc
}

func withPausableTimeout(ctx context.Context, d time.Duration) (context.Context, *pausable) {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &pausable{left: d, since: time.Now(), cancel: cancel}
	p.t = time.AfterFunc(d, func() {
		p.mu.Lock()
		p.fired = true
		p.mu.Unlock()
		cancel(errToolTimeout)
	})
	return ctx, p
}

func (p *pausable) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == 0 && p.t.Stop() {
		p.left -= time.Since(p.since)
	}
	p.paused++
}

func (p *pausable) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused--; p.paused == 0 && !p.fired {
		p.since = time.Now()
		p.t.Reset(max(p.left, 0))
	}
}

func (p *pausable) stop() {
	p.t.Stop()
	p.cancel(nil)
}

func (p *pausable) timedOut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// asking is a call in flight on a session, to which the server's questions go.
type asking struct {
	ctx    context.Context
	timer  *pausable
	tool   string
	server string

	mu    sync.Mutex
	n     int      // questions asked so far
	notes []string // what the model reads of questions not answered
}

// ask puts one question of the call to its Asker and returns the answer for the server.
func (c *asking) ask(p *sdk.ElicitParams, protocol string) (*sdk.ElicitResult, error) {
	if p.Mode == "url" || p.URL != "" {
		return nil, fmt.Errorf("tool '%s' asked the user to open a URL, which toolmesh does not offer", c.tool)
	}
	var schema json.RawMessage
	if p.RequestedSchema != nil {
		b, err := json.Marshal(p.RequestedSchema)
		if err != nil {
			return nil, fmt.Errorf("tool '%s' asked a question whose schema cannot be read: %w", c.tool, err)
		}
		schema = b
	}
	c.mu.Lock()
	c.n++
	n := c.n
	c.mu.Unlock()
	q := toolinternal.Question{Message: p.Message, Schema: schema, Tool: c.tool, Server: c.server, Protocol: protocol}
	a := toolinternal.AskerFrom(c.ctx)
	if a == nil {
		c.note(q, toolinternal.Answer{Action: toolinternal.AnswerCancel, By: "none"})
		return &sdk.ElicitResult{Action: toolinternal.AnswerCancel}, nil
	}
	c.timer.pause()
	ans, err := a.Ask(c.ctx, n, q)
	c.timer.resume()
	if err != nil {
		return nil, fmt.Errorf("tool '%s' asked the user a question, and waiting for the answer failed: %w", c.tool, err)
	}
	res := &sdk.ElicitResult{Action: ans.Action}
	if ans.Action == toolinternal.AnswerAccept && len(ans.Content) > 0 {
		if err := json.Unmarshal(ans.Content, &res.Content); err != nil {
			return nil, fmt.Errorf("the answer to tool '%s' is not a JSON object: %w", c.tool, err)
		}
	}
	c.note(q, ans)
	return res, nil
}

// note keeps what the model reads of a question that got no answer.
func (c *asking) note(q toolinternal.Question, ans toolinternal.Answer) {
	msg := q.Message
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	var text string
	switch {
	case ans.Action == toolinternal.AnswerAccept:
		return
	case ans.By == "none":
		text = fmt.Sprintf("Nobody could answer the question tool '%s' asked (%q), so the tool was told it was cancelled.", c.tool, msg)
	case ans.By == "deadline":
		text = fmt.Sprintf("Nobody answered the question tool '%s' asked (%q) in time, so the tool was told it was cancelled.", c.tool, msg)
	case ans.Action == toolinternal.AnswerDecline:
		text = fmt.Sprintf("The user declined to answer the question tool '%s' asked (%q), and the tool was told so.", c.tool, msg)
		if r := strings.TrimSpace(ans.Reason); r != "" {
			text += " Their reason: " + r
		}
	default:
		text = fmt.Sprintf("The user cancelled the question tool '%s' asked (%q), and the tool was told so.", c.tool, msg)
	}
	c.mu.Lock()
	c.notes = append(c.notes, text)
	c.mu.Unlock()
}

// withNotes puts the notes of the call's unanswered questions before what the tool
// answered.
func (c *asking) withNotes(text string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.notes) == 0 {
		return text
	}
	return strings.Join(c.notes, "\n") + "\nThe tool answered: " + text
}

// inflight are the calls in flight on each session, for a 2025-11-25 server's
// elicitation, which names no call: it goes to the one call in flight on its session.
type inflight struct {
	mu    sync.Mutex
	calls map[*sdk.ClientSession][]*asking
}

func (f *inflight) add(cs *sdk.ClientSession, c *asking) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[*sdk.ClientSession][]*asking{}
	}
	f.calls[cs] = append(f.calls[cs], c)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls[cs] = slices.DeleteFunc(f.calls[cs], func(x *asking) bool { return x == c })
		if len(f.calls[cs]) == 0 {
			delete(f.calls, cs)
		}
	}
}

// only is the one call in flight on cs, or nil when there is none or several.
func (f *inflight) only(cs *sdk.ClientSession) *asking {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cs := f.calls[cs]; len(cs) == 1 {
		return cs[0]
	}
	return nil
}

// callAsking calls the tool, answering the server's input_required results (2026-07-28)
// and its elicitations (2025-11-25) with the call's Asker.
func (g *Group) callAsking(ctx context.Context, cs *sdk.ClientSession, params *sdk.CallToolParams, timer *pausable, c *asking) (*sdk.CallToolResult, error) {
	defer g.inflight.add(cs, c)()
	protocol := negotiated(cs)
	for round := 1; ; round++ {
		res, err := cs.CallTool(ctx, params)
		if err != nil || !res.NeedsInput() {
			return res, err
		}
		if round > maxInputRounds {
			return nil, fmt.Errorf("it asked for input more than %d times in one call", maxInputRounds)
		}
		if len(res.InputRequests) == 0 {
			return nil, errors.New("it is busy (it answered input_required without a question)")
		}
		responses := sdk.InputResponseMap{}
		for _, id := range slices.Sorted(maps.Keys(res.InputRequests)) {
			p, ok := res.InputRequests[id].(*sdk.ElicitParams)
			if !ok {
				return nil, fmt.Errorf("it asked for %s, which toolmesh does not provide", inputKind(res.InputRequests[id]))
			}
			ans, err := c.ask(p, protocol)
			if err != nil {
				return nil, err
			}
			responses[id] = ans
		}
		next := *params
		next.InputResponses, next.RequestState = responses, res.RequestState
		params = &next
		if timer.timedOut() {
			return nil, context.Cause(ctx)
		}
	}
}

func inputKind(r sdk.InputRequest) string {
	switch r.(type) {
	case *sdk.CreateMessageParams, *sdk.CreateMessageWithToolsParams:
		return "sampling"
	case *sdk.ListRootsParams:
		return "roots"
	}
	return fmt.Sprintf("%T", r)
}

// negotiated is the revision a session speaks.
func negotiated(cs *sdk.ClientSession) string {
	if r := cs.InitializeResult(); r != nil {
		return r.ProtocolVersion
	}
	return ""
}

// onElicit answers a 2025-11-25 server's elicitation: the question of the one call in
// flight on its session. With none or several, it cannot say whose question it is, and
// answers cancel.
func (g *Group) onElicit(ctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
	c := g.inflight.only(req.Session)
	if c == nil {
		g.log.WarnContext(ctx, "mcp elicitation cancelled: it names no call, and the session has no single call in flight to give it to")
		return &sdk.ElicitResult{Action: toolinternal.AnswerCancel}, nil
	}
	return c.ask(req.Params, negotiated(req.Session))
}

// clientAsker is the Asker of a call through the endpoint whose MCP client declared
// form elicitation on a session that can send it requests (2025-11-25); nil otherwise,
// and the tool's questions are answered cancel.
func clientAsker(req *sdk.CallToolRequest) toolinternal.Asker {
	ss := req.Session
	if ss == nil {
		return nil
	}
	p := ss.InitializeParams()
	if p == nil || p.ProtocolVersion >= Protocol20260728 || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return nil
	}
	return sessionAsker{ss: ss}
}

// sessionAsker asks the endpoint's MCP client.
type sessionAsker struct{ ss *sdk.ServerSession }

func (a sessionAsker) Ask(ctx context.Context, _ int, q toolinternal.Question) (toolinternal.Answer, error) {
	p := &sdk.ElicitParams{Message: q.Message}
	if len(q.Schema) > 0 {
		p.RequestedSchema = q.Schema
	}
	res, err := a.ss.Elicit(ctx, p)
	if err != nil {
		return toolinternal.Answer{}, err
	}
	ans := toolinternal.Answer{Action: res.Action, By: "mcp client"}
	if res.Action == toolinternal.AnswerAccept && res.Content != nil {
		if ans.Content, err = json.Marshal(res.Content); err != nil {
			return toolinternal.Answer{}, err
		}
	}
	return ans, nil
}

func (sessionAsker) Waiting(context.Context) bool { return false }

var _ toolinternal.Asker = sessionAsker{}
