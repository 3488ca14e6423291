package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Default limits of nesting.
const (
	DefaultMaxNestingDepth = 4
	DefaultMaxNestedLoops  = 64
)

// Scope says which nested loop an event comes from.
type Scope struct {
	LoopID, ParentLoopID string
	// Tool is the agentic tool whose call runs the loop; Kind its kind.
	Tool, Kind string
	// Depth is 1 for a loop the run's own loop started, 2 for one that started, ...
	Depth int
	// ChildRunID is the child run of a subagent's loop; empty for an agentic tool's.
	ChildRunID string
	// ParentCallID is the call, in the parent loop, that started the loop.
	ParentCallID string
}

// Nested is an event of a nested loop (a loop.Event) with the loop it comes from.
type Nested struct {
	Scope Scope
	Event Event
}

// NestedStarted: an agentic tool's call started its loop.
type NestedStarted struct {
	Scope         Scope
	Model         string
	Tools         []string
	MaxIterations int
}

// NestedFinished: a nested loop ended; Err is empty when it ended with an answer.
type NestedFinished struct {
	Scope      Scope
	Iterations int
	ToolCalls  int
	Err        string
}

// LoopInfo is a loop of a run, for GetRun's tree of loops: the run's own loop has depth
// 0 and no parent.
type LoopInfo struct {
	Scope
	Iterations, ToolCalls int
	// Running is set until the loop ends; Err is how it failed.
	Running bool
	Err     string
}

// nester runs the nested loops of one run (agentic.Nester). Each loop gets a nester
// of its own, one level deeper, in the context of its tool calls.
type nester struct {
	s        *Service
	p        *prepared
	observer *serialObserver
	decorate func(tool.Tool) tool.Tool
	// loops counts the nested loops the run started, against MaxNestedLoops.
	loops *atomic.Int64
	// parent is the loop whose tool calls see this nester; depth its depth; bag its
	// ToolCallContext, which a nested loop's spec context goes over.
	parent string
	depth  int
	bag    toolctx.Context
	// runs are the records of the runs the loop belongs to, innermost first: the run's
	// own, then for a loop inside a subagent the child run's before it. Each counts the
	// loop's usage and tool calls and lists it in its tree. procs are their processes;
	// childRun is the innermost child run's id ("" in the run itself).
	runs     []*record
	procs    []*process.Process
	childRun string
}

func (n *nester) Decorate(t tool.Tool) tool.Tool { return n.decorate(t) }

var _ agentic.Hider = (*nester)(nil)

// Hidden: a system prompt template sees no secret of the config and no credential key.
func (n *nester) Hidden(key string) bool { return n.s.cfg.PromptHides(key) }

func (n *nester) RunLoop(ctx context.Context, l agentic.Loop) (*loop.Result, error) {
	lc := n.s.cfg.Loop
	maxDepth, maxLoops := cmpOr(lc.MaxNestingDepth, DefaultMaxNestingDepth), cmpOr(lc.MaxNestedLoops, DefaultMaxNestedLoops)
	if n.depth+1 > maxDepth {
		return nil, fmt.Errorf("agentic tool '%s' was not run: nested loops go at most %d deep (loop.max_nesting_depth)", l.Tool, maxDepth)
	}
	if c := n.loops.Add(1); c > int64(maxLoops) {
		return nil, fmt.Errorf("agentic tool '%s' was not run: a run starts at most %d nested loops (loop.max_nested_loops)", l.Tool, maxLoops)
	}
	bag := n.bag.Merge(l.Context)
	if err := checkContext(bag, n.bag, l.Context, n.s.cfg.Context.MaxBytes); err != nil {
		return nil, fmt.Errorf("agentic tool '%s' was not run: its context: %w", l.Tool, err)
	}
	provider, model, label := n.p.provider, n.p.model, n.p.label
	if l.Model != "" || l.Role != "" {
		var err error
		if provider, model, err = n.s.chooseModel(l.Model, l.Role); err != nil {
			return nil, fmt.Errorf("agentic tool '%s' was not run: %w", l.Tool, err)
		}
		label = llm.Label(provider, model)
	}
	info, _ := tool.CallInfoFrom(ctx)
	dispatch := toolinternal.DispatchFrom(ctx) // the agentic tool's call's
	// A nested loop's ids follow from the call that starts it, so that a run resumed from
	// its journal replays the loop under the same ids.
	scope := Scope{LoopID: derivedID("loop_", info), ParentLoopID: n.parent, Tool: l.Tool, Kind: string(l.Kind), Depth: n.depth + 1, ChildRunID: n.childRun,
		ParentCallID: info.CallID}
	child := *n
	child.parent, child.depth, child.bag = scope.LoopID, scope.Depth, bag
	proc := n.procs[0]
	var childRec *record
	adoptFrom := 0
	if l.Kind == agentic.KindAgent {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		var err error
		if ctx, childRec, proc, err = n.startChild(ctx, cancel, &scope, &child, derivedID("run_", info)); err != nil {
			return nil, fmt.Errorf("subagent '%s' was not run: %w", l.Tool, err)
		}
		defer n.s.store.finish(childRec)
		adoptFrom = len(proc.Snapshot().Blackboard.Entries)
		if j := n.p.journal; j != nil {
			if at, ok := j.loopStarted(scope.LoopID); ok { // a replay: the child run started then
				proc.SetStarted(at)
				childRec.setStarted(at)
			}
		}
	}
	runID := cmp.Or(scope.ChildRunID, n.childRun, info.RunID)
	opts, bindings := n.loopOptions(l, runID, scope, proc, bag, provider, model, label)
	var names []string
	for _, t := range l.Tools {
		names = append(names, t.Definition().Name)
	}
	for _, r := range n.runs {
		r.startLoop(scope)
	}
	n.observer.scopes.Store(scope.LoopID, scope)
	n.observer.send(NestedStarted{Scope: scope, Model: label, Tools: names, MaxIterations: opts.MaxIterations})
	ctx = toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: runID, LoopID: scope.LoopID})
	ctx, span := n.s.tel.StartRun(ctx, telemetry.RunAttrs{RunID: runID, LoopID: scope.LoopID, Provider: provider.Name(), Model: model})
	opts.Observer = n.observe(ctx, scope, childRec, child.procs, provider.Name(), cmp.Or(model, tracedProvider{Provider: provider}.DefaultModel()), quietTools(l.Tools))
	lctx := agentic.WithBindings(agentic.WithNester(loopContext(ctx, proc, n.observer), &child), bindings)
	res, err := loop.Run(lctx, opts, loop.Input{System: l.System, Messages: []llm.Message{{Role: llm.RoleUser, Text: l.Input}}, Tools: l.Tools})
	fin := NestedFinished{Scope: scope}
	if res != nil {
		fin.Iterations, fin.ToolCalls = res.Iterations, res.ToolCalls
		n.s.tel.EndRun(span, telemetry.RunResult{Outcome: "completed", InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens})
	}
	if err != nil {
		fin.Err = err.Error()
		kind := KindOf(err).String()
		n.s.tel.EndRun(span, telemetry.RunResult{Outcome: "failed", ErrorType: kind, Err: err})
	}
	if childRec != nil {
		err = n.endChild(ctx, l.Tool, scope, childRec, proc, adoptFrom, res, err)
		if err != nil {
			fin.Err = err.Error()
		}
	}
	for _, r := range n.runs {
		r.endLoop(fin)
	}
	if j := n.p.journal; j != nil && dispatch != nil {
		if began, ended, ok := j.loopRecorded(scope.LoopID); ok {
			// A replay of the whole loop: the call took as long as it did the first time.
			dispatch.Replayed, dispatch.Took = true, ended.Sub(began)
		}
	}
	n.observer.send(fin)
	return res, err
}

// startChild starts a subagent's child run: its own run id and record, and its own
// process, whose goal is the subagent's name and whose blackboard starts as a copy of
// the parent's. scope and child become the child run's.
func (n *nester) startChild(ctx context.Context, cancel context.CancelCauseFunc, scope *Scope, child *nester, runID string) (context.Context, *record, *process.Process, error) {
	scope.ChildRunID = runID
	rec, err := n.s.store.startChild(runID, n.p.tenant, cancel)
	if err != nil {
		return ctx, nil, nil, err
	}
	sc := *scope
	proc := n.procs[0].Spawn(runID, scope.Tool, func(o process.Output) error { n.observer.send(Nested{Scope: sc, Event: o}); return nil })
	rec.setProcess(proc)
	rec.startLoop(Scope{LoopID: scope.LoopID})
	child.runs = append([]*record{rec}, n.runs...)
	child.procs = append([]*process.Process{proc}, n.procs...)
	child.childRun = runID
	return process.NewContext(ctx, proc), rec, proc, nil
}

// loopOptions are a nested loop's options: the run's, with the loop's own model, limits,
// context, strategies and tool chaining.
func (n *nester) loopOptions(l agentic.Loop, runID string, scope Scope, proc *process.Process, bag toolctx.Context, provider llm.Provider, model, label string) (loop.Options, *agentic.Bindings) {
	opts := n.p.opts
	opts.RunID, opts.LoopID, opts.Logger = runID, scope.LoopID, n.s.log
	opts.Provider = n.s.modelProvider(provider, n.p.tenant)
	if j := n.p.journal; j != nil {
		jp := &journalProvider{Provider: opts.Provider, j: j, loopID: scope.LoopID}
		opts.Provider, opts.SharedCallIDs = jp, jp.sharedCallIDs
		opts.Recorded, opts.Known = j.recordedAt, j.known
	}
	opts.Model = model
	opts.MaxIterations = cmpOr(l.MaxIterations, loop.DefaultMaxIterations)
	if l.Temperature != nil {
		opts.Temperature = l.Temperature
	}
	if l.MaxOutputTokens > 0 {
		opts.MaxOutputTokens = l.MaxOutputTokens
	}
	opts.OutputSchema = l.OutputSchema // an agent's result object; nil for text
	opts.Context = bag
	opts.Cost = func(m string, u llm.Usage) float64 { return n.s.cost(m, label, u) }
	opts.Strategies = append([]loop.Strategy{progressive.New()}, n.s.strategies...)
	opts.Decorate = n.decorate
	opts.NotFound = nil // a fresh policy per loop
	opts.PrepareCall = prepareCall(proc)
	sources, fromAny := l.Sources, l.FromAny
	if len(sources) == 0 {
		sources = n.p.sources
	}
	bindings, discovery := n.s.loopChaining(sources, fromAny || n.p.chainFromAny)
	if discovery != nil {
		opts.Strategies = append(opts.Strategies, discovery)
	}
	return opts, bindings
}

// observe is a nested loop's observer: its events join the records of the runs above
// it (and the child run's), its model calls their costs, and the run's event stream.
func (n *nester) observe(ctx context.Context, scope Scope, childRec *record, procs []*process.Process, provider, requestModel string, quiet map[string]bool) func(loop.Event) {
	return func(ev loop.Event) {
		for _, r := range n.runs {
			r.observeNested(scope.LoopID, ev)
		}
		if childRec != nil {
			childRec.observe(ev)
		}
		if x, ok := ev.(loop.ModelCalled); ok {
			if j := n.p.journal; j == nil || !j.takeReplayed(scope.LoopID) { // a replayed call cost nothing now
				n.s.tel.RecordCost(ctx, requestModel, x.CostUSD)
			}
			for _, p := range procs {
				p.RecordModelCall(provider, x.Model, x.Usage.InputTokens, x.Usage.OutputTokens, x.CostUSD)
			}
		}
		if !quietCall(quiet, ev) {
			n.observer.send(Nested{Scope: scope, Event: ev})
		}
	}
}

// endChild ends a subagent's child run: what it added joins the parent's blackboard
// once it completed (all of it, or none when it does not fit), and its record and
// process say how it ended.
func (n *nester) endChild(ctx context.Context, name string, scope Scope, r *record, proc *process.Process, from int, res *loop.Result, err error) error {
	if err == nil {
		if aerr := n.procs[0].Adopt(proc, from, process.Origin{Tool: name, LoopID: scope.LoopID}); aerr != nil {
			err = fmt.Errorf("subagent '%s' answered, but what it put on its blackboard does not fit the run's: %w", name, aerr)
		}
	}
	recorded, status := err, process.StatusCompleted
	var se *loop.SignalError
	switch {
	case err == nil:
	case ctx.Err() != nil && context.Cause(ctx) != nil:
		recorded, status = context.Cause(ctx), process.StatusCancelled // the parent was cancelled
		if !cancelled(recorded) {
			recorded = fmt.Errorf("%w: %w", ErrCancelled, recorded)
		}
	case errors.As(err, &se):
		status = process.StatusTerminated
		var replan tool.ReplanRequested
		if errors.As(se.Signal, &replan) {
			status = process.StatusReplan
		}
	default:
		status = process.StatusFailed
	}
	proc.SetStatus(status)
	r.end(res, nil, recorded)
	return err
}
