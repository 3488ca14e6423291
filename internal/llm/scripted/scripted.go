// Package scripted is a deterministic, file-driven model: an llm.Provider that answers from a
// script of rules instead of calling an API. Tests use it, and `make demo` uses its embedded
// demo script when no model credentials are set.
//
// It streams like a real provider (text deltas, tool-call deltas with the arguments in
// pieces, a final answer with usage) so that the loop cannot tell the difference.
// This package must not import gRPC, generated protos or the loop.
package scripted

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/deep"
	"github.com/toolmesh/toolmesh/internal/llm"
)

// ErrNoMatch is wrapped by the error of a stream for which no rule of the script matches.
var ErrNoMatch = errors.New("scripted: no rule matches")

// ErrInjected is wrapped by the error of a stream whose rule asks for a failure (Reply.Error).
var ErrInjected = errors.New("scripted: injected failure")

// maxRequests bounds the requests a Provider keeps for Requests.
const maxRequests = 1000

// Provider answers model calls from a script. It is safe for concurrent use.
type Provider struct {
	script *compiledScript

	mu sync.Mutex
	// requests is a ring of the last maxRequests requests: until it is full they are in
	// order; then next is where the oldest is, and the next one goes.
	requests []llm.Request
	next     int
	keep     int // the ring's size
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider that answers from s.
func New(s Script) (*Provider, error) {
	cs, err := compile(s)
	if err != nil {
		return nil, err
	}
	return &Provider{script: cs, keep: maxRequests}, nil
}

// Keep sets how many of the latest requests the provider keeps for Requests, and drops
// those it kept: 1000 unless set; 0 keeps none, and then a request is not even copied. A
// program that never reads Requests (an orchestrator serving the scripted model, a
// benchmark measuring the loop) keeps none or few, so that the copies do not weigh on its
// heap and its collector.
func (p *Provider) Keep(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep, p.requests, p.next = max(0, n), nil, 0
}

// Load returns a provider that answers from the YAML script in the file at path.
func Load(path string) (*Provider, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return New(s)
}

// Name returns "scripted".
func (p *Provider) Name() string { return "scripted" }

// DefaultModel is the script's name: runs are labelled "scripted/<script>".
func (p *Provider) DefaultModel() string { return p.script.name }

// Requests returns copies of the requests the provider received, oldest first; it keeps
// the last 1000.
func (p *Provider) Requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]llm.Request, len(p.requests))
	for i := range p.requests {
		out[i] = cloneRequest(&p.requests[(p.next+i)%len(p.requests)])
	}
	return out
}

// Stream answers req with the reply of the first matching rule. The request is recorded
// when the stream is iterated.
func (p *Provider) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	// The caller waits out a reply's delay under this function's frame: the work before
	// and after the wait is in functions of their own, so that the frame stays small.
	return func(yield func(llm.Chunk, error) bool) {
		a, err := p.answer(ctx, req)
		if err == nil {
			err = llm.Sleep(ctx, a.delay)
		}
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		p.reply(ctx, req, a, yield)
	}
}

// answer records req and finds its answer.
//
//go:noinline
func (p *Provider) answer(ctx context.Context, req *llm.Request) (a *answer, err error) {
	if req == nil {
		return nil, errors.New("scripted: nil request")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.script.waits {
		// A caller may wait out the reply's delay for long (an hour, to hold runs open):
		// it waits on a small stack, the matching of the rules (regular expressions,
		// templates), which grows a deep one, done off its goroutine.
		deep.Run(func() { p.record(req); a, err = p.script.answer(req) })
		return a, err
	}
	p.record(req)
	return p.script.answer(req)
}

// reply yields a's chunks, then its failure or its response to req.
//
//go:noinline
func (p *Provider) reply(ctx context.Context, req *llm.Request, a *answer, yield func(llm.Chunk, error) bool) {
	for _, c := range a.chunks() {
		if err := ctx.Err(); err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		if !yield(c, nil) {
			return
		}
	}
	if err := ctx.Err(); err != nil {
		yield(llm.Chunk{}, err)
		return
	}
	if a.failure != nil {
		yield(llm.Chunk{}, a.failure)
		return
	}
	yield(llm.Chunk{Done: a.response(req)}, nil)
}

func (p *Provider) record(req *llm.Request) {
	p.mu.Lock()
	keep := p.keep
	p.mu.Unlock()
	if keep == 0 {
		return
	}
	c := *req // what it refers to is not changed once sent (see llm.Request)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) < p.keep {
		p.requests = append(p.requests, c)
		return
	}
	if p.keep == 0 {
		return
	}
	// Full: the newest takes the oldest's place, nothing moves.
	p.requests[p.next] = c
	p.next = (p.next + 1) % p.keep
}

// answer is a rendered reply.
type answer struct {
	model   string
	delay   time.Duration
	text    string
	calls   []llm.ToolCall
	failure error
}

func (s *compiledScript) answer(req *llm.Request) (*answer, error) {
	v := newView(req)
	i := slices.IndexFunc(s.rules, func(r compiledRule) bool { return r.matches(v) })
	if i < 0 {
		return nil, &noMatchError{msg: fmt.Sprintf("scripted: no rule of script %q matches turn %d (last message: %s)",
			s.name, v.turn, describeLast(req.Messages))}
	}
	r := &s.rules[i]
	// Template errors name the field themselves, as "template: reply.text:1:2: ...".
	fail := func(err error) error {
		return fmt.Errorf("scripted: script %q: %s: %w", s.name, r.label, err)
	}
	a := &answer{model: s.model, delay: r.delay}
	if r.text != nil {
		text, err := execute(r.text, v)
		if err != nil {
			return nil, fail(err)
		}
		a.text = text
	}
	for j, c := range r.calls {
		call := llm.ToolCall{ID: c.id, Name: c.name, Arguments: c.args}
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d_%d", v.turn, j)
		}
		if c.argsTmpl != nil {
			args, err := execute(c.argsTmpl, v)
			if err != nil {
				return nil, fail(err)
			}
			call.Arguments = args
		}
		a.calls = append(a.calls, call)
	}
	if r.failure != "" {
		a.failure = fmt.Errorf("%w: %s", ErrInjected, r.failure)
	}
	return a, nil
}

type noMatchError struct{ msg string }

func (e *noMatchError) Error() string { return e.msg }
func (e *noMatchError) Unwrap() error { return ErrNoMatch }

// describeLast renders the last message for the no-match error: role and abridged text.
func describeLast(msgs []llm.Message) string {
	if len(msgs) == 0 {
		return "none"
	}
	m := msgs[len(msgs)-1]
	return string(m.Role) + " " + strconv.Quote(abridge(m.Text, 60))
}

func abridge(s string, maxRunes int) string {
	if utf8.RuneCountInString(s) <= maxRunes {
		return s
	}
	n := 0
	for i := range s {
		if n == maxRunes {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// chunks streams the answer as a real provider would: the text word by word, then each tool
// call as a delta with ID and Name followed by deltas with pieces of the arguments.
func (a *answer) chunks() []llm.Chunk {
	words := splitWords(a.text)
	n := 0
	for _, c := range a.calls {
		n += 1 + argumentPieces(c.Arguments)
	}
	out := make([]llm.Chunk, 0, len(words)+n)
	for _, w := range words {
		out = append(out, llm.Chunk{TextDelta: w})
	}
	// The deltas of every call in one allocation: a call's arguments come in a dozen
	// pieces, and a run of many turns asks for many calls.
	deltas := make([]llm.ToolCallDelta, 0, n)
	for i, c := range a.calls {
		deltas = append(deltas, llm.ToolCallDelta{Index: i, ID: c.ID, Name: c.Name})
		out = append(out, llm.Chunk{ToolCallDelta: &deltas[len(deltas)-1]})
		for s := c.Arguments; s != ""; {
			var piece string
			piece, s = nextArgumentPiece(s, len(c.Arguments))
			deltas = append(deltas, llm.ToolCallDelta{Index: i, Arguments: piece})
			out = append(out, llm.Chunk{ToolCallDelta: &deltas[len(deltas)-1]})
		}
	}
	return out
}

func (a *answer) response(req *llm.Request) *llm.Response {
	finish := "stop"
	if len(a.calls) > 0 {
		finish = "tool_calls"
	}
	return &llm.Response{
		Text:         a.text,
		ToolCalls:    slices.Clone(a.calls),
		Usage:        llm.Usage{InputTokens: estimateTokens(requestSize(req)), OutputTokens: estimateTokens(a.size())},
		FinishReason: finish,
		Model:        a.model,
	}
}

// splitWords cuts s after each run of white space, keeping every byte.
func splitWords(s string) []string {
	var out []string
	start, inSpace := 0, false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if inSpace && !space {
			out = append(out, s[start:i])
			start = i
		}
		inSpace = space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// argumentPieces is how many pieces nextArgumentPiece cuts s into.
func argumentPieces(s string) int {
	n := 0
	for rest := s; rest != ""; n++ {
		_, rest = nextArgumentPiece(rest, len(s))
	}
	return n
}

// nextArgumentPiece cuts the next piece off rest, the remainder of arguments of total
// bytes: all of them when there are at most four, else pieces of up to 16 bytes (half
// the whole when that is less), never inside a UTF-8 sequence.
func nextArgumentPiece(rest string, total int) (piece, after string) {
	if total <= 4 {
		return rest, ""
	}
	size := min(16, (total+1)/2)
	n := 0
	for n < len(rest) {
		_, w := utf8.DecodeRuneInString(rest[n:])
		if n > 0 && n+w > size {
			break
		}
		n += w
	}
	return rest[:n], rest[n:]
}

// estimateTokens counts about four bytes per token, and at least one token.
func estimateTokens(n int) int64 {
	return int64(max(1, (n+3)/4))
}

func requestSize(req *llm.Request) int {
	n := len(req.System) + len(req.OutputSchema)
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Text) + len(m.ToolCallID) + len(m.ToolName)
		for _, c := range m.ToolCalls {
			n += len(c.ID) + len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return n
}

func (a *answer) size() int {
	n := len(a.text)
	for _, c := range a.calls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

// cloneRequest copies req deeply, so that a caller of Requests may change what it gets.
func cloneRequest(req *llm.Request) llm.Request {
	c := *req
	c.Messages = slices.Clone(req.Messages)
	for i := range c.Messages {
		c.Messages[i].ToolCalls = slices.Clone(c.Messages[i].ToolCalls)
	}
	c.Tools = slices.Clone(req.Tools)
	for i := range c.Tools {
		c.Tools[i].Parameters = slices.Clone(c.Tools[i].Parameters)
	}
	c.OutputSchema = slices.Clone(req.OutputSchema)
	if req.Temperature != nil {
		c.Temperature = new(*req.Temperature)
	}
	return c
}
