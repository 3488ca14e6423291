// Package loop is the tool loop: it calls the model with the conversation and the visible
// tools, runs the tool calls it asks for (concurrently, bounded), feeds the results back,
// and repeats until a final answer, a return-direct result, the iteration limit, or an
// error.
//
// It knows tools only through pkg/tool and models only through internal/llm: it must not
// import gRPC, generated protos, the router or the server. It knows nothing of facades
// or agentic tools either: what changes the tool set mid-loop plugs in as a Strategy
// (internal/progressive implements one and imports this package, not the reverse).
package loop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// DefaultMaxIterations is the iteration limit when none is set.
const DefaultMaxIterations = 20

// DefaultMaxParallel bounds the tool calls of one model turn run at once.
const DefaultMaxParallel = 8

// DefaultMaxResultBytes bounds the text of one tool result the model reads.
const DefaultMaxResultBytes = 32 << 10

// EmptyResponseNudge is the user message sent after a blank model turn when empty
// responses are retried.
const EmptyResponseNudge = "Your previous turn produced no response. Take ONE concrete action that progresses toward answering the user's most recent question — either call a tool to gather what you still need, or write the answer using the information you already have. Do not stay silent."

// MaxIterationsError ends a loop that used all its model calls without a final answer.
type MaxIterationsError struct{ Max int }

func (e *MaxIterationsError) Error() string {
	return fmt.Sprintf("Tool loop exceeded maximum iterations (%d). This may indicate a loop in tool calls or an overly complex task.", e.Max)
}

// ErrEmptyResponse ends a loop whose model kept answering with nothing.
var ErrEmptyResponse = errors.New("the model returned an empty response")

// SignalError ends a loop because a tool raised a control-flow signal: replan
// (tool.ReplanRequested) or terminate (tool.Terminate). When several calls of one turn
// raise signals, all of them run first, and the signal that wins is, in this order of
// priority, an agent termination, an action termination, another signal, a replan; the
// first in call order among equals. No result of that turn joins the history.
type SignalError struct {
	Tool   string
	CallID string
	Signal error
}

func (e *SignalError) Error() string { return fmt.Sprintf("tool '%s' signalled: %v", e.Tool, e.Signal) }
func (e *SignalError) Unwrap() error { return e.Signal }

// ModelError wraps a provider failure.
type ModelError struct {
	Iteration int
	Err       error
}

func (e *ModelError) Error() string {
	return fmt.Sprintf("model call %d failed: %v", e.Iteration, e.Err)
}
func (e *ModelError) Unwrap() error { return e.Err }

// Options configure one loop.
type Options struct {
	Provider        llm.Provider
	Model           string
	Temperature     *float64
	MaxOutputTokens int
	// MaxIterations bounds the model calls. Default DefaultMaxIterations.
	MaxIterations int
	// MaxParallel bounds the tool calls of one turn run at once. Default DefaultMaxParallel.
	MaxParallel int
	// MaxResultBytes bounds the text of a tool result the model reads: a longer one is
	// cut, at a character boundary, and ends with a line saying how long it was (the
	// artifact, if any, stays whole). Default DefaultMaxResultBytes.
	MaxResultBytes int
	// EmptyRetries is how many blank model turns in a row are answered with a nudge before
	// the loop fails; zero accepts a blank answer as final.
	EmptyRetries int
	// StreamText makes the loop report the model's text as it arrives (TextDelta events).
	StreamText bool
	// SharedCallIDs, when set and true for the answer the loop just got, keeps the ids
	// the model gave its calls as they are, even where an earlier call of the loop has
	// the same one (see withCallIDs): an answer a resumed run replays from a journal
	// written before calls got ids of their own, whose records name its calls by the
	// model's ids.
	SharedCallIDs func() bool
	// OutputSchema, when set, is the schema the final answer must satisfy; the model gets
	// one corrective turn when it does not.
	OutputSchema *OutputSchema
	// Budget bounds the tokens and cost of the loop's model calls.
	Budget Budget
	// Cost prices a model call; nil means calls cost nothing.
	Cost func(model string, u llm.Usage) float64
	// Context is the ToolCallContext every tool call of the loop receives (in its
	// context.Context, see toolctx.FromContext), with LoopID under toolctx.LoopIDKey.
	Context toolctx.Context
	// RunID and LoopID identify the loop's tool calls to the tools.
	RunID, LoopID string
	// NotFound handles unknown tool names. Default: NewAutoCorrection(). It must be a fresh
	// value per loop.
	NotFound NotFoundPolicy
	// Strategies change the tool set after tool calls, for example unfolding a
	// facade (internal/progressive). They are chained (see Chain): after each call of a
	// batch that returned a result that is not an error, in call order once the whole
	// batch has run, every strategy is evaluated and the changes of all are applied. A
	// tool added by one call of a batch is therefore callable from the next model turn.
	// Default: none.
	Strategies []Strategy
	// Decorate wraps every tool a strategy adds before it joins the tool set (nil keeps
	// it out: a tool the run may not use), so that
	// injected tools get the same decorator chain as the tools the loop started with
	// (which the caller decorated itself). Default: none (the tool as it is).
	Decorate func(tool.Tool) tool.Tool
	// PrepareCall, when set, fills in more of each tool call (after its call info and
	// ToolCallContext): the run sets the call's view of its blackboard and its progress
	// channel. ctx is the loop's.
	PrepareCall func(ctx context.Context, c *toolcall.Call)
	// Recorded, when set, says where a call's outcome is in the run's journal (a resumed
	// run's replay answers it from there): the calls of one turn that have one run one at
	// a time, in that order, before the others run in parallel, so that what they did to
	// the run (the blackboard's entries) is done in the order it was done the first time.
	Recorded func(tool.CallInfo) (order int64, ok bool)
	// Known, with Recorded, says whether the run's journal holds anything of a call (its
	// dispatch, an approval, its nested loop). The calls of a replayed turn it holds
	// nothing of (reads of the run in process, refusals) ran at once the first time,
	// before any call that ended with a record: they run first.
	Known func(tool.CallInfo) bool
	// Observer receives the loop's events, synchronously, from several goroutines at once
	// when tool calls run in parallel.
	Observer func(Event)
	Logger   *slog.Logger
}

// Input is what the loop starts from.
type Input struct {
	System   string
	Messages []llm.Message
	// Tools offered to the model; the first tool of a name wins.
	Tools []tool.Tool
}

// Result is how a loop ended.
type Result struct {
	Text         string
	Iterations   int
	ReturnDirect bool
	Usage        llm.Usage
	CostUSD      float64
	ToolCalls    int
	History      []llm.Message
}

// Run runs the loop.
func Run(ctx context.Context, opts Options, in Input) (*Result, error) {
	st, err := Start(opts, in)
	if err != nil {
		return nil, err
	}
	for {
		req, err := st.Request()
		if err != nil {
			return nil, err
		}
		resp, err := st.Collect(ctx, req)
		if res, err := st.Answer(ctx, resp, err); res != nil || err != nil {
			return res, err
		}
	}
}

// Stepper is a loop run one model call at a time by its caller, which makes the model
// call itself: Request says what to ask the model, Collect asks it (the caller may do
// so wherever it likes, such as on a goroutine that holds nothing else), and Answer
// runs what the model answered, the tool calls among it, and says whether the loop
// ended. Run is Request, Collect and Answer until then. A Stepper is used by one
// goroutine at a time.
type Stepper struct {
	l      *state
	system string
	iter   int // the iteration whose request Request returned last
}

// Start prepares a loop to be stepped through: see Stepper.
func Start(opts Options, in Input) (*Stepper, error) {
	if opts.Provider == nil {
		return nil, errors.New("loop: no provider")
	}
	if opts.MaxIterations <= 0 {
		opts.MaxIterations = DefaultMaxIterations
	}
	if opts.MaxParallel <= 0 {
		opts.MaxParallel = DefaultMaxParallel
	}
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = DefaultMaxResultBytes
	}
	if opts.NotFound == nil {
		opts.NotFound = NewAutoCorrection()
	}
	if opts.Observer == nil {
		opts.Observer = func(Event) {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Decorate == nil {
		opts.Decorate = func(t tool.Tool) tool.Tool { return t }
	}
	l := &state{opts: opts}
	if len(opts.Strategies) > 0 {
		l.strategy = Chain(opts.Strategies...)
	}
	if len(in.Tools) > 0 {
		l.tools = make(map[string]tool.Tool, len(in.Tools))
	}
	for _, t := range in.Tools {
		name := t.Definition().Name
		if _, dup := l.tools[name]; dup {
			continue
		}
		l.tools[name] = t
		l.order = append(l.order, name)
	}
	l.history = append([]llm.Message(nil), in.Messages...)
	return &Stepper{l: l, system: in.System}, nil
}

// Request returns the next model call of the loop, or the error that ends it before
// that call: the iteration limit, or a budget a loop sharing it used up.
func (s *Stepper) Request() (*llm.Request, error) {
	l := s.l
	if s.iter >= l.opts.MaxIterations {
		return nil, &MaxIterationsError{Max: l.opts.MaxIterations}
	}
	s.iter++
	if sh := l.opts.Budget.Shared; sh != nil {
		// A loop sharing the budget used it up (a nested loop, say): this one stops too.
		if err := sh.Exceeded(); err != nil {
			return nil, err
		}
	}
	req := &llm.Request{
		Model:  l.opts.Model,
		System: s.system,
		// The history as it is: the loop only ever appends to it, and the full slice
		// expression keeps an append from reaching what a request holds.
		Messages:        l.history[:len(l.history):len(l.history)],
		Tools:           l.specs(),
		Temperature:     l.opts.Temperature,
		MaxOutputTokens: l.opts.MaxOutputTokens,
	}
	if l.opts.OutputSchema != nil {
		req.OutputSchema = l.opts.OutputSchema.JSON()
	}
	return req, nil
}

// Collect makes the model call req (the last Request) and assembles the answer,
// reporting text deltas when the loop streams text.
func (s *Stepper) Collect(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	return s.l.collect(ctx, s.iter, req)
}

// Answer runs the model's answer to the last Request (or the error the call failed
// with): it returns the loop's result or the error that ended it, or neither when the
// loop goes on with another Request.
func (s *Stepper) Answer(ctx context.Context, resp *llm.Response, err error) (*Result, error) {
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ModelError{Iteration: s.iter, Err: err}
	}
	return s.l.answer(ctx, s.iter, resp)
}

type state struct {
	opts     Options
	strategy Strategy // nil when there is none
	// ids are the ids of the calls of the loop's earlier turns (withCallIDs).
	ids     map[string]bool
	tools   map[string]tool.Tool
	order   []string
	history []llm.Message
	usage   llm.Usage
	cost    float64
	calls   int
	empties int
	// sharedTokens and sharedCost are the shared budget's totals after this loop's last
	// model call.
	sharedTokens int64
	sharedCost   float64
	// corrected is set once the model had its corrective turn for the output schema.
	corrected bool
	// offered are the last specs(), which the next request shares if they still hold.
	offered []llm.ToolSpec
}

// specs are the tools offered to the model. Requests share them while they stay the same
// (a tool's definition may change between turns: a playbook unlocks a tool, say).
func (l *state) specs() []llm.ToolSpec {
	if l.offered != nil && len(l.offered) == len(l.order) {
		same := true
		for i, name := range l.order {
			d, o := l.tools[name].Definition(), l.offered[i]
			if d.Name != o.Name || d.Description != o.Description || !sameBytes(d.InputSchema.JSON(), o.Parameters) {
				same = false
				break
			}
		}
		if same {
			return l.offered
		}
	}
	specs := make([]llm.ToolSpec, 0, len(l.order))
	for _, name := range l.order {
		d := l.tools[name].Definition()
		specs = append(specs, llm.ToolSpec{Name: d.Name, Description: d.Description, Parameters: d.InputSchema.JSON()})
	}
	l.offered = specs[:len(specs):len(specs)]
	return l.offered
}

// sameBytes reports whether a and b are the same bytes: the same slice, or equal ones.
func sameBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0] || string(a) == string(b)
}

// answer runs the model's answer of iteration iter: the loop's result or the error that
// ended it, or neither when it goes on.
func (l *state) answer(ctx context.Context, iter int, resp *llm.Response) (*Result, error) {
	l.usage = l.usage.Add(resp.Usage)
	cost := 0.0
	if l.opts.Cost != nil {
		cost = l.opts.Cost(resp.Model, resp.Usage)
	}
	l.cost += cost
	if sh := l.opts.Budget.Shared; sh != nil {
		l.sharedTokens, l.sharedCost = sh.addModel(resp.Usage.InputTokens+resp.Usage.OutputTokens, cost)
	}
	l.opts.Observer(ModelCalled{Iteration: iter, Model: resp.Model, Usage: resp.Usage, CostUSD: cost, FinishReason: resp.FinishReason})
	if err := l.checkBudget(); err != nil {
		l.opts.Budget.Shared.exceed(err)
		return nil, err
	}

	if len(resp.ToolCalls) == 0 {
		if strings.TrimSpace(resp.Text) == "" && l.opts.EmptyRetries > 0 {
			l.empties++
			if l.empties > l.opts.EmptyRetries {
				return nil, ErrEmptyResponse
			}
			text := resp.Text
			if text == "" {
				text = "(no response)" // some providers reject empty assistant turns
			}
			l.history = append(l.history, llm.Message{Role: llm.RoleAssistant, Text: text}, llm.Message{Role: llm.RoleUser, Text: EmptyResponseNudge})
			return nil, nil
		}
		l.history = append(l.history, llm.Message{Role: llm.RoleAssistant, Text: resp.Text})
		if l.opts.OutputSchema != nil {
			answer, err := l.opts.OutputSchema.Check(resp.Text)
			if err != nil {
				if l.corrected {
					return nil, &OutputSchemaError{Problem: err.Error()}
				}
				l.corrected = true
				l.history = append(l.history, llm.Message{Role: llm.RoleUser, Text: correction(err.Error())})
				return nil, nil
			}
			return l.result(answer, iter, false), nil
		}
		return l.result(resp.Text, iter, false), nil
	}
	l.empties = 0
	if strings.TrimSpace(resp.Text) != "" {
		l.opts.Observer(AssistantText{Iteration: iter, LoopID: l.opts.LoopID, Text: resp.Text})
	}
	calls := l.withCallIDs(iter, resp.ToolCalls)
	l.history = append(l.history, llm.Message{Role: llm.RoleAssistant, Text: resp.Text, ToolCalls: calls})

	outcomes, err := l.runBatch(ctx, iter, calls)
	if err != nil {
		return nil, err
	}
	direct, hasDirect := "", false
	for _, o := range outcomes {
		if o.returnDirect {
			direct, hasDirect = o.content, true
		}
	}
	for _, o := range outcomes {
		// The strategies see the history without this call's result; there is
		// no next turn to offer changed tools to after a return-direct result.
		if !hasDirect && o.tool != nil && !o.isError {
			l.inject(ctx, iter, o)
		}
		l.history = append(l.history, llm.Message{Role: llm.RoleTool, ToolCallID: o.call.ID, ToolName: o.call.Name, Text: o.content, IsError: o.isError,
			Images: imagesOf(o)})
	}
	if hasDirect {
		if l.opts.OutputSchema != nil {
			answer, err := l.opts.OutputSchema.Check(direct)
			if err != nil {
				return nil, &OutputSchemaError{Problem: "the return-direct tool result: " + err.Error()}
			}
			direct = answer
		}
		return l.result(direct, iter, true), nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, nil
}

// collect calls the model and assembles its answer, reporting text deltas when the loop
// streams text.
func (l *state) collect(ctx context.Context, iter int, req *llm.Request) (*llm.Response, error) {
	if !l.opts.StreamText {
		return llm.Collect(l.opts.Provider.Stream(ctx, req))
	}
	for c, err := range l.opts.Provider.Stream(ctx, req) {
		if err != nil {
			return nil, err
		}
		if c.Done != nil {
			return c.Done, nil
		}
		if c.TextDelta != "" {
			l.opts.Observer(TextDelta{Iteration: iter, LoopID: l.opts.LoopID, Text: c.TextDelta})
		}
	}
	return nil, llm.ErrNoFinalChunk
}

func (l *state) result(text string, iter int, direct bool) *Result {
	return &Result{Text: text, Iterations: iter, ReturnDirect: direct, Usage: l.usage, CostUSD: l.cost, ToolCalls: l.calls, History: l.history}
}

func (l *state) checkBudget() error {
	b := l.opts.Budget
	total, cost := l.usage.InputTokens+l.usage.OutputTokens, l.cost
	if b.Shared != nil {
		total, cost = l.sharedTokens, l.sharedCost
	}
	if b.MaxTokens > 0 && total > b.MaxTokens {
		return &BudgetExceededError{What: "tokens", Used: float64(total), Limit: float64(b.MaxTokens)}
	}
	if b.MaxCostUSD > 0 && cost > b.MaxCostUSD {
		return &BudgetExceededError{What: "cost", Used: cost, Limit: b.MaxCostUSD}
	}
	return nil
}

// actionsSpent are the actions that count against the budget: the loop's own, or those
// of every loop sharing it.
func (l *state) actionsSpent() int {
	if sh := l.opts.Budget.Shared; sh != nil {
		_, _, n := sh.Totals()
		return n
	}
	return l.calls
}

// withCallIDs returns a copy of calls in which every call has an id of its own in the
// loop, so that each tool message answers one call, and each call has its own
// idempotency key and its own place in the run's journal. A call without an id gets
// call_<iteration>_<n> (n its place in the turn, from 1); a call whose id an earlier
// call of the loop has, in this turn or an earlier one (some servers of open models
// number every turn's calls from the same id), gets it with _<iteration>_<n> appended,
// again until no call of the loop and no call of the turn has it. It copies because the
// response belongs to the provider, which may hand the same value out again.
func (l *state) withCallIDs(iter int, calls []llm.ToolCall) []llm.ToolCall {
	out := slices.Clone(calls)
	if l.ids == nil {
		l.ids = make(map[string]bool, len(out))
	}
	var given map[string]bool // the turn's ids as the model gave them, once one repeats
	shared := l.opts.SharedCallIDs != nil && l.opts.SharedCallIDs()
	for i := range out {
		id := out[i].ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", iter, i+1)
		}
		if l.ids[id] && !shared {
			if given == nil {
				given = make(map[string]bool, len(out))
				for _, c := range calls {
					given[c.ID] = true
				}
			}
			suffix := "_" + strconv.Itoa(iter) + "_" + strconv.Itoa(i+1)
			for l.ids[id] || given[id] {
				id += suffix
			}
		}
		l.ids[id] = true
		out[i].ID = id
	}
	return out
}

// outcome is one tool call's contribution to the history.
type outcome struct {
	call         llm.ToolCall
	content      string
	isError      bool
	returnDirect bool
	signal       error
	// tool, input and result are set when the tool ran: the tool as found in the tool
	// set, the arguments it received, and what it returned.
	tool   tool.Tool
	input  string
	result tool.Result
}

// runBatch runs the tool calls of one model turn. Unknown names and invalid arguments are
// settled first, in call order, without contacting any tool; the rest run concurrently.
// Results come back in call order whatever order they finish in.
func (l *state) runBatch(ctx context.Context, iter int, calls []llm.ToolCall) ([]outcome, error) {
	outcomes := make([]outcome, len(calls))
	var jobs []job
	var overBudget error
	for i, c := range calls {
		outcomes[i].call = c
		l.opts.Observer(ToolCallStarted{Iteration: iter, LoopID: l.opts.LoopID, Call: c})
		if overBudget != nil {
			l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Outcome: OutcomeError, Content: "Error: not run: " + overBudget.Error()})
			continue
		}
		t, ok := l.tools[c.Name]
		if !ok {
			t, ok = l.hidden(c.Name)
		}
		if !ok {
			feedback, err := l.opts.NotFound.Handle(c.Name, append([]string(nil), l.order...))
			if err != nil {
				// Every started call gets a finished event, even the one that ends the loop,
				// and the valid calls before it, which will not run.
				l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Outcome: OutcomeUnknownTool, Content: err.Error()})
				for _, j := range jobs {
					l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: outcomes[j.i].call, Outcome: OutcomeError,
						Content: "Error: not run: the loop ended on an unknown tool in the same turn"})
				}
				return nil, err
			}
			outcomes[i].content, outcomes[i].isError = feedback, true
			l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Outcome: OutcomeUnknownTool, Content: feedback})
			continue
		}
		l.opts.NotFound.Found()
		args, err := validateArguments(t, c.Arguments)
		if err != nil {
			msg := fmt.Sprintf("Error: invalid arguments for tool '%s': %s. Call it again with arguments that match its schema.", c.Name, argumentProblem(err))
			outcomes[i].content, outcomes[i].isError = msg, true
			l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Outcome: OutcomeInvalidArguments, Content: msg})
			continue
		}
		if max := l.opts.Budget.MaxActions; max > 0 && l.actionsSpent()+len(jobs) >= max {
			// An action is a dispatched tool call: this one would be one too many.
			overBudget = &BudgetExceededError{What: "actions", Used: float64(l.actionsSpent() + len(jobs)), Limit: float64(max), Tool: c.Name}
			l.opts.Observer(ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Outcome: OutcomeError, Content: "Error: not run: " + overBudget.Error()})
			continue
		}
		jobs = append(jobs, job{i: i, t: t, args: args})
	}

	if sh := l.opts.Budget.Shared; sh != nil {
		sh.addActions(len(jobs)) // before the calls run: a nested loop they start counts them
	}
	l.runJobs(ctx, iter, jobs, outcomes)
	l.calls += len(jobs)
	if sig := winningSignal(outcomes); sig != nil {
		return nil, sig
	}
	if overBudget != nil {
		l.opts.Budget.Shared.exceed(overBudget)
		return nil, overBudget
	}
	return outcomes, nil
}

// job is a call of a turn that runs: the index of its outcome, its tool and arguments.
type job struct {
	i    int
	t    tool.Tool
	args string
}

// runJobs runs a turn's calls and puts their outcomes in place (runParallel). In a
// resumed run's replay of a turn, it runs first the calls the journal knows nothing of
// (Options.Known), then those it answers, one at a time in the order their outcomes
// were recorded (Options.Recorded), then the others: the order the first run's calls
// ended in.
func (l *state) runJobs(ctx context.Context, iter int, jobs []job, outcomes []outcome) {
	if len(jobs) > 1 && l.opts.Recorded != nil {
		type replayed struct {
			job
			order int64
		}
		info := func(j job) tool.CallInfo {
			return tool.CallInfo{RunID: l.opts.RunID, LoopID: l.opts.LoopID, CallID: outcomes[j.i].call.ID, Iteration: iter}
		}
		var answered []replayed
		var first, rest []job
		for _, j := range jobs {
			if order, ok := l.opts.Recorded(info(j)); ok {
				answered = append(answered, replayed{j, order})
			} else {
				rest = append(rest, j)
			}
		}
		if len(answered) > 0 { // a replayed turn
			if l.opts.Known != nil {
				rest = slices.DeleteFunc(rest, func(j job) bool {
					if l.opts.Known(info(j)) {
						return false
					}
					first = append(first, j)
					return true
				})
			}
			l.runParallel(ctx, iter, first, outcomes)
			slices.SortStableFunc(answered, func(a, b replayed) int { return cmp.Compare(a.order, b.order) })
			for _, j := range answered {
				outcomes[j.i] = l.call(ctx, iter, outcomes[j.i].call, j.t, j.args)
			}
			jobs = rest
		}
	}
	l.runParallel(ctx, iter, jobs, outcomes)
}

// runParallel runs calls and puts their outcomes in place: one in this goroutine,
// without the handoff to another and back; several in parallel, up to MaxParallel.
func (l *state) runParallel(ctx context.Context, iter int, jobs []job, outcomes []outcome) {
	switch len(jobs) {
	case 0:
	case 1:
		j := jobs[0]
		outcomes[j.i] = l.call(ctx, iter, outcomes[j.i].call, j.t, j.args)
	default:
		g := &errgroup.Group{}
		g.SetLimit(l.opts.MaxParallel)
		for _, j := range jobs {
			g.Go(func() error {
				outcomes[j.i] = l.call(ctx, iter, outcomes[j.i].call, j.t, j.args)
				return nil
			})
		}
		_ = g.Wait()
	}
}

// winningSignal is the signal that ends the loop after a turn whose calls raised some:
// agent termination, then action termination, then any other signal, then replan; the
// first in call order among equals. Nil when no call raised one.
func winningSignal(outcomes []outcome) *SignalError {
	rank := func(sig error) int {
		var term tool.Terminate
		var replan tool.ReplanRequested
		switch {
		case errors.As(sig, &term) && term.Scope == tool.TerminateAction:
			return 1
		case errors.As(sig, &term):
			return 0
		case errors.As(sig, &replan):
			return 3
		}
		return 2
	}
	var best *SignalError
	bestRank := 4
	for _, o := range outcomes {
		if o.signal == nil {
			continue
		}
		if r := rank(o.signal); r < bestRank {
			best, bestRank = &SignalError{Tool: o.call.Name, CallID: o.call.ID, Signal: o.signal}, r
		}
	}
	return best
}

// newCall is call c of iteration iter, of tool t with arguments args: its call info, the
// loop's ToolCallContext, and what PrepareCall adds.
func (l *state) newCall(ctx context.Context, iter int, c llm.ToolCall, t tool.Tool, args string) *toolcall.Call {
	// Every call of the loop gets the same context; the loop id travels in the call
	// info, and toolctx.FromContext shows it under toolctx.LoopIDKey.
	call := &toolcall.Call{Tool: t, Name: c.Name, Input: args, Info: tool.CallInfo{RunID: l.opts.RunID, LoopID: l.opts.LoopID, CallID: c.ID, Iteration: iter},
		Bag: l.opts.Context.WithoutReserved()}
	if l.opts.PrepareCall != nil {
		l.opts.PrepareCall(ctx, call)
	}
	return call
}

// callContext is ctx carrying call c, for what the loop does on its behalf.
func (l *state) callContext(ctx context.Context, iter int, c llm.ToolCall) context.Context {
	return l.newCall(ctx, iter, c, nil, "").Bind(ctx)
}

// call runs one tool call and reports it.
func (l *state) call(ctx context.Context, iter int, c llm.ToolCall, t tool.Tool, args string) outcome {
	call := l.newCall(ctx, iter, c, t, args)
	// The arguments were validated against this tool's schema before dispatch.
	call.Validated = true
	dispatch := &toolinternal.Dispatch{}
	call.Dispatch = dispatch
	start := time.Now()
	res, err := toolcall.Run(ctx, l.opts.Logger, call)
	elapsed := time.Since(start)
	if dispatch.Replayed || dispatch.Took > 0 {
		elapsed = dispatch.Took // what the journal records, and a replay reports
	}
	o := outcome{call: c}
	ev := ToolCallFinished{Iteration: iter, LoopID: l.opts.LoopID, Call: c, Duration: elapsed, WorkerID: dispatch.WorkerID, Attempts: dispatch.Attempts}
	if err != nil { // only a control-flow signal
		o.signal = err
		ev.Outcome, ev.Content = OutcomeError, err.Error()
		l.opts.Observer(ev)
		return o
	}
	// Text that is not UTF-8 (an in-process tool's, a layer's) is repaired as the run's
	// journal encodes it, each bad byte a U+FFFD: the model, the client and a resumed run,
	// which reads the journal, see the same text, and it can cross the wire.
	res.Content = toolinternal.ValidText(res.Content)
	o.content = toolinternal.Truncate(res.Render(), l.opts.MaxResultBytes)
	o.isError = res.IsError()
	o.tool, o.input, o.result = t, args, res
	// A facade's shortcut to a return-direct child returns directly, as the child would.
	o.returnDirect = (t.Metadata().ReturnDirect || dispatch.Direct) && !res.IsError()
	ev.Result, ev.Content = res, o.content
	ev.Outcome = OutcomeOK
	if res.IsError() {
		ev.Outcome = OutcomeError
	}
	l.opts.Observer(ev)
	return o
}

// argumentProblem is the part of a validation error that describes the problem: the
// error starts with schema.ErrInvalidArguments' own text, which the message already says.
// MaxArgumentBytes bounds the arguments of one tool call; larger ones are refused before
// they are parsed, so a runaway model cannot make the orchestrator validate megabytes.
const MaxArgumentBytes = 1 << 20

var errArgumentsTooLarge = errors.New("arguments too large")

func validateArguments(t tool.Tool, args string) (string, error) {
	if len(args) > MaxArgumentBytes {
		return "", fmt.Errorf("%w: they are %d bytes; the limit is %d", errArgumentsTooLarge, len(args), MaxArgumentBytes)
	}
	if f, ok := tool.As[tool.Facade](t); ok && f.Kind() == tool.FacadeByCategory {
		// Its category's enum tells the model the choices; a category it does not list,
		// or none, opens every child, as the facade answers it: not a refusal.
		return args, nil
	}
	return t.Definition().InputSchema.Validate(args)
}

func argumentProblem(err error) string {
	return strings.TrimPrefix(err.Error(), schema.ErrInvalidArguments.Error()+": ")
}

// Strategy changes the tool set after a tool call: a facade unfolds into its
// children, a playbook unlocks tools. The loop evaluates it with the context of the call
// (call info and ToolCallContext, as the tool received them), so that a strategy that
// asks a remote tool forwards the same context.
//
// A strategy that fails (an error or a panic) changes nothing, and the loop goes on
// after logging it: a run never fails because its tool set could not change. The other
// strategies of the loop still apply (see Chain).
type Strategy interface {
	Evaluate(ctx context.Context, ic InjectionContext) (Injection, error)
}

// StrategyFunc adapts a function to a Strategy.
type StrategyFunc func(ctx context.Context, ic InjectionContext) (Injection, error)

// Evaluate calls f.
func (f StrategyFunc) Evaluate(ctx context.Context, ic InjectionContext) (Injection, error) {
	return f(ctx, ic)
}

var _ Strategy = StrategyFunc(nil)

// InjectionContext is what a strategy sees of the call it evaluates.
type InjectionContext struct {
	// Tool is the called tool as found in the current tool set, decorators included;
	// tool.As finds what is underneath.
	Tool tool.Tool
	// Input is the arguments the tool received (validated, canonical JSON).
	Input string
	// Result is what the tool returned; Content is its text as the model reads it.
	Result  tool.Result
	Content string
	// Iteration is the model call whose tool calls are being run, from 1.
	Iteration int
	// Current is the tool set before this change, in the order the model is offered it.
	Current []tool.Tool
	// History is the conversation so far, without this call's result.
	History []llm.Message
}

// Injection is a change to the tool set: the tools whose names match a tool of Remove
// leave, then the tools of Add join (decorated by Options.Decorate), except those whose
// name is already present, appended in order.
type Injection struct {
	Add, Remove []tool.Tool
}

// IsZero reports whether the injection changes nothing.
func (i Injection) IsZero() bool { return len(i.Add) == 0 && len(i.Remove) == 0 }

// Chain returns a strategy that evaluates every one of strategies (nil ones skipped)
// against the same context and concatenates their additions and their removals. A
// failing strategy contributes nothing; the others still do, and the error joins the
// failures. A strategy that panics counts as failing.
func Chain(strategies ...Strategy) Strategy {
	return chain(slices.DeleteFunc(slices.Clone(strategies), func(s Strategy) bool { return s == nil }))
}

type chain []Strategy

func (c chain) Evaluate(ctx context.Context, ic InjectionContext) (Injection, error) {
	var out Injection
	var errs []error
	for _, s := range c {
		inj, err := safeEvaluate(ctx, s, ic)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Add = append(out.Add, inj.Add...)
		out.Remove = append(out.Remove, inj.Remove...)
	}
	return out, errors.Join(errs...)
}

// current is the tool set in the order the model is offered it.
func (l *state) current() []tool.Tool {
	out := make([]tool.Tool, len(l.order))
	for i, name := range l.order {
		out[i] = l.tools[name]
	}
	return out
}

// inject evaluates the strategies after call o and applies their change.
func (l *state) inject(ctx context.Context, iter int, o outcome) {
	if l.strategy == nil {
		return
	}
	ic := InjectionContext{
		Tool: o.tool, Input: o.input, Result: o.result, Content: o.content, Iteration: iter,
		Current: l.current(), History: l.history[:len(l.history):len(l.history)],
	}
	// l.strategy is a Chain: what it returns with an error is the others' contribution.
	inj, err := l.strategy.Evaluate(l.callContext(ctx, iter, o.call), ic)
	if err != nil {
		l.opts.Logger.WarnContext(l.callContext(ctx, iter, o.call), "injection strategy failed", "tool", o.call.Name, "error", err.Error())
	}
	added, removed := l.apply(inj)
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	l.opts.Observer(ToolsChanged{Iteration: iter, LoopID: l.opts.LoopID, Added: added, Removed: removed, Tools: slices.Clone(l.order)})
}

// hidden finds a tool of that name inside a facade the loop offers, at any depth, for a
// model that calls it without opening the facade first (it knows the name from an
// earlier run, a tool's answer, its prompt): the call runs, decorated as the facade's
// unfolding would have added it, and the tool set stays as it is. A tool the run may not
// use (Decorate drops it) stays unknown.
func (l *state) hidden(name string) (tool.Tool, bool) {
	var find func(ts []tool.Tool) tool.Tool
	find = func(ts []tool.Tool) tool.Tool {
		for _, t := range ts {
			f, ok := tool.As[tool.Facade](t)
			if !ok || gated(t) {
				continue
			}
			children := f.Children()
			for _, c := range children {
				if c.Definition().Name == name {
					return c
				}
			}
			if c := find(children); c != nil {
				return c
			}
		}
		return nil
	}
	offered := make([]tool.Tool, 0, len(l.order))
	for _, n := range l.order {
		offered = append(offered, l.tools[n])
	}
	c := find(offered)
	if c == nil {
		return nil, false
	}
	if c = l.opts.Decorate(c); c == nil {
		return nil, false
	}
	return c, true
}

// Gate is a wrapper that may refuse the calls of the tool it wraps (a playbook's locked
// tool, a state machine's tool outside its states): the tools of a facade behind one are
// not called unopened, since that would pass the gate.
type Gate interface {
	tool.Tool
	GatesCalls()
}

// gated reports whether a Gate wraps t (t itself or a tool its wrappers reach).
func gated(t tool.Tool) bool {
	_, ok := tool.As[Gate](t)
	return ok
}

// apply changes the tool set as Injection describes and returns the names that joined
// and left.
func (l *state) apply(inj Injection) (added, removed []string) {
	if inj.IsZero() {
		return nil, nil
	}
	gone := map[string]bool{}
	for _, t := range inj.Remove {
		if t != nil {
			gone[t.Definition().Name] = true
		}
	}
	if len(gone) > 0 {
		kept := l.order[:0:0]
		for _, name := range l.order {
			if gone[name] {
				removed = append(removed, name)
				delete(l.tools, name)
				continue
			}
			kept = append(kept, name)
		}
		l.order = kept
	}
	for _, t := range inj.Add {
		if t == nil {
			continue
		}
		if t = l.opts.Decorate(t); t == nil {
			continue // outside what the run may use (a tenant's grant)
		}
		name := t.Definition().Name
		if _, dup := l.tools[name]; dup {
			continue // the first tool of a name wins
		}
		if l.tools == nil {
			l.tools = map[string]tool.Tool{}
		}
		l.tools[name] = t
		l.order = append(l.order, name)
		added = append(added, name)
	}
	return added, removed
}

// safeEvaluate turns a panic in a strategy into an error: the tool set stays as it is.
func safeEvaluate(ctx context.Context, s Strategy, ic InjectionContext) (inj Injection, err error) {
	defer func() {
		if p := recover(); p != nil {
			inj, err = Injection{}, fmt.Errorf("injection strategy panicked: %v", p)
		}
	}()
	return s.Evaluate(ctx, ic)
}
