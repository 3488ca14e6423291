package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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

// maxInputRounds bounds the input_required rounds of one call, maxQuestions the
// questions it asks in all.
const (
	maxInputRounds = 10
	maxQuestions   = 32
)

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
	if n > maxQuestions {
		return nil, fmt.Errorf("tool '%s' asked more than %d questions in one call", c.tool, maxQuestions)
	}
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
			if err == nil {
				// The log messages the server sent before its answer reach the
				// endpoint's client before it, while the call is still in flight for onLog.
				g.awaitLogs(ctx, cs)
			}
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

// inputKind is the method an input request stands for (sampling/createMessage,
// roots/list), as the wire names it.
func inputKind(r sdk.InputRequest) string {
	var wire map[string]struct {
		Method string `json:"method"`
	}
	if b, err := json.Marshal(sdk.InputRequestMap{"r": r}); err == nil && json.Unmarshal(b, &wire) == nil && wire["r"].Method != "" {
		return wire["r"].Method
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
// elicitation: on a 2025-11-25 session it is sent elicitation/create; a 2026-07-28
// client is answered input_required (roundAsker). nil when the client declared none: the
// tool's questions are answered cancel.
func clientAsker(req *sdk.CallToolRequest) toolinternal.Asker {
	ss := req.Session
	if ss == nil {
		return nil
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return nil
	}
	if p.ProtocolVersion >= Protocol20260728 {
		return newRoundAsker(req.Params)
	}
	return sessionAsker{ss: ss}
}

// maxRequestStateBytes bounds the request state the endpoint reads back.
const maxRequestStateBytes = 64 << 10

// errAskClient ends a call through the endpoint whose tool asked a question the
// endpoint's 2026-07-28 client must answer: the call is answered input_required.
var errAskClient = errors.New("the question goes to the MCP client, which answers it when it calls again")

// roundAsker answers the questions of a call through the endpoint by a 2026-07-28
// client from the answers it gave in earlier rounds (the request state the endpoint
// gave it, which holds them) and in this one (its inputResponses, by question number).
// The first question it has no answer for ends the call: the endpoint answers
// input_required with it, and the tool is called again, from the start, when the
// client calls again with the answer.
type roundAsker struct {
	mu      sync.Mutex
	answers map[string]toolinternal.Answer
	asked   *toolinternal.Question
	askedN  int
}

func newRoundAsker(p *sdk.CallToolParamsRaw) *roundAsker {
	a := &roundAsker{answers: map[string]toolinternal.Answer{}}
	if p == nil {
		return a
	}
	if s := p.RequestState; s != "" && len(s) <= maxRequestStateBytes {
		if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
			_ = json.Unmarshal(b, &a.answers) // a state that is not ours holds no answers
		}
	}
	for id, r := range p.InputResponses {
		if er, ok := r.(*sdk.ElicitResult); ok && er != nil && len(a.answers) < maxQuestions {
			ans := toolinternal.Answer{Action: er.Action}
			if er.Action == toolinternal.AnswerAccept && er.Content != nil {
				ans.Content, _ = json.Marshal(er.Content)
			}
			a.answers[id] = ans
		}
	}
	return a
}

func (a *roundAsker) Ask(_ context.Context, n int, q toolinternal.Question) (toolinternal.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ans, ok := a.answers[strconv.Itoa(n)]; ok {
		ans.By = "mcp client"
		return ans, nil
	}
	if a.asked == nil {
		a.asked, a.askedN = &q, n
	}
	return toolinternal.Answer{}, errAskClient
}

func (*roundAsker) Waiting(context.Context) bool { return false }

// inputRequired is the endpoint's answer to a call whose tool asked a question a, the
// asker of a 2026-07-28 client, has no answer for; nil when there is none.
func inputRequired(a toolinternal.Asker) *sdk.CallToolResult {
	r, ok := a.(*roundAsker)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asked == nil {
		return nil
	}
	p := &sdk.ElicitParams{Message: r.asked.Message}
	if len(r.asked.Schema) > 0 {
		p.RequestedSchema = r.asked.Schema
	}
	state, _ := json.Marshal(r.answers)
	return &sdk.CallToolResult{InputRequests: sdk.InputRequestMap{strconv.Itoa(r.askedN): p},
		RequestState: base64.RawURLEncoding.EncodeToString(state)}
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

var (
	_ toolinternal.Asker = sessionAsker{}
	_ toolinternal.Asker = (*roundAsker)(nil)
)
