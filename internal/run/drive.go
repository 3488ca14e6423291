package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/agentic"
	"github.com/toolmesh/toolmesh/internal/deep"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A run is driven one model call at a time (loop.Stepper). The goroutine that runs it
// (Run's caller: a client's Run stream) makes each model call itself, a few frames deep,
// and works each answer (its tool calls) from the same few frames. Starting the run,
// whose call chain is the deepest (checking the request, resolving its tools, opening its
// journal and loop), and ending it run on a goroutine of their own that ends with that
// piece of work (Deep). So a run waiting for its first answer holds one goroutine with a
// small stack; one that worked an answer grew that stack, and the garbage collector
// shrinks it back while the run waits again (a waiting run uses a few KiB of it) —
// rather than every answer paying for a fresh goroutine's stack to grow.

// driver is a run that started: what its pieces of work share.
type driver struct {
	s      *Service
	ctx    context.Context
	rc     *runContext // the context ctx derives from, which holds the run's approver
	cancel context.CancelCauseFunc
	stop   func()
	r      *record
	// p is the prepared run until it started (begin drops it: the run's loop and nested
	// loops keep what they need of it); label, timeout and tools are what the rest of
	// the run reads of it.
	p       *prepared
	label   string
	timeout time.Duration
	tools   int
	j       *journal
	id      string
	loopID  string
	started time.Time // when the run started: a resumed run's first start
	opened  bool      // the run reached its journal (or has none): finish, not discard, its record
	observe func(Event)

	span     trace.Span
	proc     *process.Process
	observer *serialObserver
	step     *loop.Stepper
	startErr error // why the loop could not start
	// first is the loop's first model call, made ready with the rest of the start (or
	// the error that ends the loop before it).
	first    *llm.Request
	firstErr error
}

// launch runs a prepared run: a new one (j nil), or one taken over from the journal.
func (s *Service) launch(ctx context.Context, p *prepared, id, loopID string, started time.Time, j *journal, observe func(Event)) (*Result, error) {
	return s.launchWith(func() (*driver, error) { return s.begin(ctx, p, id, loopID, started, j, observe) })
}

// launchWith starts a run with start, drives its loop and ends it. Its frame stays
// under the loop's while the run waits for its model, on the goroutine of the run's
// stream: it is kept small, the work before and after the loop in functions of their own.
func (s *Service) launchWith(start func() (*driver, error)) (*Result, error) {
	d, err := started(start)
	if err != nil {
		return nil, err
	}
	defer d.release()
	s.logStarted(d)
	lr, lerr := d.loop()
	return d.ended(lr, lerr)
}

// started starts a run with start, off the caller's goroutine (deep.Run): the deep
// stack the start grows goes with it.
//
//go:noinline
func started(start func() (*driver, error)) (d *driver, err error) {
	deep.Run(func() { d, err = start() })
	return d, err
}

// logStarted logs that run d started, off the caller's goroutine: the log's handler
// (JSON, say) grows a deep stack too. A log that keeps its writers waiting (a slow
// stderr, many runs starting at once) keeps no start's stack waiting.
//
//go:noinline
func (s *Service) logStarted(d *driver) {
	deep.Run(func() { s.log.InfoContext(d.ctx, "run started", "model", d.label, "tools", d.tools) })
}

// ended ends the run, off the caller's goroutine.
//
//go:noinline
func (d *driver) ended(lr *loop.Result, lerr error) (res *Result, err error) {
	deep.Run(func() { res, err = d.end(lr, lerr) })
	return res, err
}

// loop alternates the model calls with the work of their answers, until the loop ends.
func (d *driver) loop() (*loop.Result, error) {
	if d.step == nil {
		return nil, d.startErr
	}
	req, err := d.first, d.firstErr
	for err == nil {
		resp, cerr := d.step.Collect(d.ctx, req)
		var res *loop.Result
		if res, err = d.step.Answer(d.ctx, resp, cerr); res != nil {
			return res, nil
		}
		if err == nil {
			req, err = d.step.Request()
		}
	}
	return nil, err
}

// begin starts a prepared run: its record, journal, context, process and loop. On an
// error nothing of the run stays.
func (s *Service) begin(ctx context.Context, p *prepared, id, loopID string, started time.Time, j *journal, observe func(Event)) (_ *driver, err error) {
	d := &driver{s: s, p: p, label: p.label, timeout: p.timeout, tools: len(p.tools), id: id, loopID: loopID, started: started, observe: observe}
	d.rc, d.cancel, d.stop = newRunContext(ctx, started.Add(p.timeout), j != nil)
	d.ctx = d.rc
	begun := false
	defer func() {
		if !begun { // an error, or a panic on its way to the caller's recovery
			d.release()
		}
	}()
	d.r, err = s.store.startLimited(id, p.tenant, s.cfg.Tenants[p.tenant].MaxConcurrentRuns, d.cancel)
	if err != nil {
		return nil, err
	}
	if !started.IsZero() {
		d.r.setStarted(started)
	}
	d.opened = s.journal == nil
	if s.journal != nil {
		if j, err = s.openJournal(d.ctx, j, id, loopID, started, p, d.cancel, observe); err != nil {
			return nil, err
		}
		d.opened = true
		d.j = j
		d.r.setJournal(j)
		j.setOnLive(d.rc.live)
		cancel := d.cancel
		j.setOnCancel(func(reason string) { cancel(fmt.Errorf("%w: %s", ErrCancelled, reason)) })
		if reason, ok := j.askedToCancel(); ok {
			d.rc.cancelAtLive(fmt.Errorf("%w: %s", ErrCancelled, reason))
		}
	}
	d.rc.info = tool.CallInfo{RunID: id, LoopID: loopID}
	if p.tenant != "" {
		d.ctx = toolinternal.WithTenant(d.ctx, p.tenant)
	}
	d.startLoop()
	d.p = nil
	begun = true
	return d, nil
}

// release lets go of what the run holds, once it is over or failed to start.
func (d *driver) release() {
	if d.j != nil {
		_ = d.j.close()
	}
	switch {
	case d.r == nil:
	case d.opened:
		d.s.store.finish(d.r)
	default:
		d.s.store.discard(d.r) // never started: the journal refused it, nothing of it stays
	}
	d.stop()
	d.cancel(nil)
}

// startLoop starts the run's loop: its span, observer, approver, process, and the loop
// itself with the run's options. A loop that cannot start ends the run as a loop that
// failed does (startErr).
func (d *driver) startLoop() {
	s, r, p, j, loopID := d.s, d.r, d.p, d.j, d.loopID
	ctx, span := s.tel.StartRun(d.ctx, telemetry.RunAttrs{RunID: r.id, LoopID: loopID, Provider: p.provider.Name(), Model: p.model})
	d.span = span
	s.tel.ContextAttributes(span, p.bag)
	facts := Facts{Agent: p.req.Agent, Model: llm.Label(p.provider, p.model)}
	if sc := span.SpanContext(); sc.HasTraceID() {
		facts.TraceID = sc.TraceID().String()
	}
	r.setFacts(facts)
	observer := &serialObserver{observe: d.observe, j: j}
	d.observer = observer
	r.setObserver(observer)
	p.journal = j
	d.rc.j = j // the run's context answers for its journal, asker and process
	ap := newApprover(r.id, s.owner, j, s.journal, observer)
	if j == nil {
		ap.store = nil
	}
	ap.inputTimeout = func(name string) time.Duration { _, t := s.cfg.ApprovalOf(name, false); return t }
	r.setApprover(ap)
	d.rc.ap = ap // a tool's questions to a person wait as approvals do
	req := p.req
	proc := process.New(r.id, process.Limits{MaxCostUSD: req.MaxCostUSD, MaxTokens: req.MaxTokens, MaxActions: req.MaxActions},
		process.Bounds{MaxEntries: s.cfg.Loop.MaxBlackboardEntries, MaxBytes: s.cfg.Loop.MaxBlackboardBytes},
		func(o process.Output) error { observer.send(o); return nil })
	proc.SetGoal(cmp.Or(req.Goal, req.Agent))
	if !d.started.IsZero() {
		proc.SetStarted(d.started)
	}
	d.proc = proc
	r.setProcess(proc)
	d.rc.proc = proc
	d.ctx = ctx
	observer.send(Started{RunID: r.id, LoopID: loopID, Model: p.label, Tools: toolNames(p.tools), MaxIterations: p.opts.MaxIterations})
	for _, w := range p.warnings {
		s.log.WarnContext(ctx, "run starts without a requested tool group", "field", w.Field, "warning", w.Message)
		observer.send(w)
	}
	opts := p.opts
	opts.RunID, opts.LoopID, opts.Logger = r.id, loopID, s.log
	if j != nil {
		jp := &journalProvider{Provider: opts.Provider, j: j, loopID: loopID}
		opts.Provider, opts.SharedCallIDs = jp, jp.sharedCallIDs
		opts.Recorded, opts.Known = j.recordedAt, j.known
	}
	opts.Budget.Shared = &loop.Spending{} // nested loops count against the run's budget
	p.opts.Budget.Shared = opts.Budget.Shared
	r.startLoop(Scope{LoopID: loopID})
	opts.PrepareCall = prepareCall(proc)
	var bindings *agentic.Bindings
	if p.chaining {
		var discovery loop.Strategy
		bindings, discovery = s.loopChaining(p.sources, req.ChainFromAny)
		if discovery != nil {
			opts.Strategies = append(slices.Clone(opts.Strategies), discovery)
		}
	}
	// What every tool call of the loop sees: the listener of its calls (the run's
	// context holds it), the nester of its agentic tools, the bindings of its tool
	// chaining.
	d.rc.listener = listener{p: proc, obs: observer}
	lctx := ctx
	if p.nests {
		lctx = agentic.WithNester(lctx, &nester{s: s, p: p, observer: observer, decorate: p.decorate, loops: &atomic.Int64{}, parent: loopID, bag: p.bag,
			runs: []*record{r}, procs: []*process.Process{proc}})
	}
	if bindings != nil {
		lctx = agentic.WithBindings(lctx, bindings)
	}
	d.ctx = lctx
	// The cost metric is labelled, like the chat spans, by the model the run asked for;
	// the model that answered may be a dated version of it.
	requestModel := p.model
	if requestModel == "" {
		requestModel = tracedProvider{Provider: p.provider}.DefaultModel()
	}
	quiet := quietTools(p.tools)
	provider := p.provider // the observer keeps no more of p
	opts.Observer = func(ev loop.Event) {
		r.observe(ev)
		switch x := ev.(type) {
		case loop.ModelCalled:
			if j == nil || !j.takeReplayed(loopID) { // a replayed call cost nothing now
				s.tel.RecordCost(ctx, requestModel, x.CostUSD)
			}
			proc.RecordModelCall(provider.Name(), x.Model, x.Usage.InputTokens, x.Usage.OutputTokens, x.CostUSD)
		case loop.ToolsChanged:
			s.tel.ToolsChanged(ctx, x.Added, x.Removed)
		}
		if !quietCall(quiet, ev) {
			observer.send(ev)
		}
	}
	d.step, d.startErr = loop.Start(opts, loop.Input{System: p.req.System, Messages: p.req.Messages, Tools: p.tools})
	if d.step != nil {
		d.first, d.firstErr = d.step.Request()
	}
	p.req = nil // the loop has what it needs of it; the run need not hold it while it goes on
}

// end ends a run whose loop ended (res or err): it settles a tool's signal, records how
// the run ended, and sends its last event.
func (d *driver) end(res *loop.Result, err error) (*Result, error) {
	s, r, j, id := d.s, d.r, d.j, d.id
	ctx := d.ctx
	lres, outcome, err := d.settle(res, err)
	r.end(lres, outcome, err)
	// The last event of a run goes out once the record says how it ended, so that a
	// client that reads it and asks GetRun sees the same.
	var last Event
	switch {
	case outcome != nil && outcome.Replan != nil:
		last = *outcome.Replan
	case outcome != nil && outcome.Terminated != nil:
		last = *outcome.Terminated
	case err != nil:
		err = &Error{RunID: id, Err: err}
		last = Ended{RunID: id, Err: err}
	default:
		last = Ended{RunID: id, Result: &Result{RunID: id, Model: d.label, Result: lres}}
	}
	if cause := stopping(ctx); j != nil && cause != nil {
		// Stopped by a shutdown or a failed journal: the run is not over. With a durable
		// journal its next owner resumes it, and its client hears that from the stream's
		// status, with no end event (WatchRun shows the rest); in memory it is lost, and
		// the client hears why. The journal records neither.
		_ = j.close()
		switch {
		case errors.Is(cause, ErrDamaged):
			// A record it replayed cannot be read: going on would tell the model what the
			// record does not say. The run waits for an operator.
			s.hold(ctx, j.currentLease(), cause)
			r.markStopped()
			return nil, &Error{RunID: id, Err: cause}
		case errors.Is(cause, runlog.ErrInvalid):
			// The journal refused a record: taking the run over would fail the same way.
			// It ends here, failed, and says why.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if ferr := s.journal.Finish(fctx, j.currentLease(), runlog.StateFailed); ferr != nil {
				s.log.WarnContext(ctx, "a run whose journal refused a record could not be ended", "run_id", id, "error", ferr.Error())
			}
			cancel()
		case durable(s.journal):
			if !errors.Is(cause, ErrShutdown) { // a shutdown says so once, for every run
				s.log.WarnContext(ctx, stoppedDriving, "run_id", id, "cause", cause.Error())
			}
			r.markStopped()
			return nil, &Error{RunID: id, Err: fmt.Errorf("%w: %w", ErrResumable, cause)}
		}
		if d.observe != nil {
			d.observe(last)
		}
	} else {
		r.observer().send(last)
		if j != nil {
			if ferr := j.finish(endOf(r.snapshot())); ferr != nil {
				// Its end event was never committed, so never sent: the client hears that
				// the run stopped here, and its next owner resumes it.
				s.log.WarnContext(ctx, stoppedDriving, "run_id", id, "cause", "its end could not be journaled: "+ferr.Error())
				r.markStopped()
				return nil, &Error{RunID: id, Err: fmt.Errorf("%w: %w: %w", ErrResumable, ErrJournal, ferr)}
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return &Result{RunID: id, Model: d.label, Result: lres, Outcome: outcome}, nil
}

// stoppedDriving is logged when this orchestrator stops driving a run that goes on
// (a shutdown, a journal that failed or a lease lost): its next owner, this
// orchestrator or another sharing the journal, resumes it.
const stoppedDriving = "this orchestrator stopped driving the run; its next owner resumes it"

// settle turns how the loop ended into how the run ended: a tool's signal settled
// (replan, terminate), an error named for the client, the span and the process status.
func (d *driver) settle(res *loop.Result, err error) (*loop.Result, *Outcome, error) {
	s, r, ctx, span, proc := d.s, d.r, d.ctx, d.span, d.proc
	var se *loop.SignalError
	if err != nil && errors.As(err, &se) && ctx.Err() == nil {
		snap := r.snapshot()
		outcome, serr := settleSignal(proc, se, d.loopID, snap.Iterations)
		if serr == nil {
			res = &loop.Result{Iterations: snap.Iterations, Usage: snap.Usage, CostUSD: snap.CostUSD, ToolCalls: snap.ToolCalls}
			kind := "replan_requested"
			if outcome.Terminated != nil {
				kind = "terminated"
			}
			s.tel.EndRun(span, telemetry.RunResult{Outcome: kind, InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens})
			s.log.InfoContext(ctx, "run ended by a tool", "outcome", kind, "tool", se.Tool)
			return res, outcome, nil
		}
		err = serr
	}
	if err != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, ErrCancelled):
			err = cause // "run cancelled: <reason>"
		case errors.Is(cause, ErrShutdown):
			err = fmt.Errorf("run stopped: %w; retry it on another orchestrator", cause)
		case errors.Is(cause, ErrJournal):
			err = cause
		case ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("run timed out after %s: %w", d.timeout, err)
		case ctx.Err() != nil && errors.Is(err, context.Canceled):
			err = fmt.Errorf("%w: the client went away: %w", ErrCancelled, err)
		}
		usage := r.snapshot().Usage
		kind := KindOf(err).String()
		s.tel.EndRun(span, telemetry.RunResult{Outcome: strings.ToLower(kind), ErrorType: kind, Err: err, InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens})
		if cancelled(err) {
			// Asked for (by the client or a shutdown): not a failure to warn about.
			s.log.InfoContext(ctx, "run cancelled", "reason", err.Error())
		} else {
			s.log.WarnContext(ctx, "run failed", "error", err.Error())
		}
		proc.SetStatus(process.StatusFailed)
		return nil, nil, err
	}
	proc.SetStatus(process.StatusCompleted)
	s.tel.EndRun(span, telemetry.RunResult{Outcome: "completed", InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens})
	s.log.InfoContext(ctx, "run succeeded", "iterations", res.Iterations, "tool_calls", res.ToolCalls)
	return res, nil, nil
}
