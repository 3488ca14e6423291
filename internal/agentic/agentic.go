package agentic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// sub is a sub-tool of an agentic tool.
type sub struct {
	t tool.Tool
	// agentic marks a sub-tool that is itself an agentic tool.
	agentic bool
	// lock is a playbook's condition for it; nil means unlocked.
	lock condition
}

// stateTool is a state machine's tool: the states it is available in and where each
// moves the machine when it succeeds.
type stateTool struct {
	sub
	states  []string
	targets map[string]string
}

// agenticTool is a compiled spec: a tool whose call runs a nested loop.
type agenticTool struct {
	spec *Spec
	// tools are the sub-tools (a state machine's global ones); stateTools a state
	// machine's others, one per name.
	tools      []sub
	stateTools []*stateTool
	// initial overrides the spec's initial state (name@STATE).
	initial string
	// sources are the spec's chaining sources, compiled.
	sources []Source
	// prompt is the spec's system prompt template, compiled; nil without one.
	prompt *Prompt
	// output is an agent's output schema, compiled; nil without one.
	output *loop.OutputSchema
}

func (a *agenticTool) Definition() tool.Definition {
	desc := a.spec.Description
	if desc == "" && a.spec.Kind == KindAgent {
		desc = AgentDescription(a.spec.Name)
	}
	return tool.Definition{Name: a.spec.Name, Description: desc, InputSchema: a.spec.Parameters}
}

func (a *agenticTool) Metadata() tool.Metadata { return tool.Metadata{} }

// SubTools are the sub-tools of a compiled agentic tool (t from Compile), undecorated:
// its tools and groups' tools, then a state machine's state-bound ones. Nil for another
// tool.
func SubTools(t tool.Tool) []tool.Tool {
	a, ok := t.(*agenticTool)
	if !ok {
		return nil
	}
	var out []tool.Tool
	for _, s := range a.tools {
		out = append(out, s.t)
	}
	for _, s := range a.stateTools {
		out = append(out, s.t)
	}
	return out
}

// startingIn is the state machine a in another initial state.
func (a *agenticTool) startingIn(state string) *agenticTool {
	c := *a
	c.initial = state
	return &c
}

func (a *agenticTool) addStateTool(s sub, state, target string) {
	name := s.t.Definition().Name
	for _, st := range a.stateTools {
		if st.t.Definition().Name == name {
			st.states = append(st.states, state)
			st.targets[state] = target
			return
		}
	}
	a.stateTools = append(a.stateTools, &stateTool{sub: s, states: []string{state}, targets: map[string]string{state: target}})
}

// dedupe refuses two sub-tools of one name: the model could call only one of them.
func (a *agenticTool) dedupe() error {
	seen := map[string]bool{}
	for _, s := range a.tools {
		name := s.t.Definition().Name
		if seen[name] {
			return fieldErr(a.spec.Key+".tools", "two sub-tools are named %q (listed twice, or in a group and by name)", name)
		}
		seen[name] = true
	}
	for _, s := range a.stateTools {
		if name := s.t.Definition().Name; seen[name] {
			return fieldErr(a.spec.Key+".state_machine", "%q is bound to states and is also a global tool (listed in tools or in one of tool_groups)", name)
		}
	}
	return nil
}

func (a *agenticTool) Call(ctx context.Context, input string) (tool.Result, error) {
	n := NesterFrom(ctx)
	if n == nil {
		return tool.Error(noContext), nil
	}
	st := &tracker{board: tool.BlackboardFrom(ctx)}
	system, err := a.systemPrompt(ctx, n, input)
	if err != nil {
		return tool.Error(err.Error()), nil
	}
	l := Loop{
		Tool: a.spec.Name, Kind: a.spec.Kind, Input: input, Model: a.spec.Model, Role: a.spec.Role,
		MaxIterations: a.spec.MaxIterations, Context: a.spec.Context, System: system,
		Sources: a.sources, FromAny: a.spec.ChainFromAny,
		Temperature: a.spec.Temperature, MaxOutputTokens: a.spec.MaxOutputTokens, OutputSchema: a.output,
	}
	switch a.spec.Kind {
	case KindStateMachine:
		m := &machine{state: a.startState()}
		var global func(tool.Tool) tool.Tool
		global = func(t tool.Tool) tool.Tool { return asFacade(&globalTool{t}, t, global) }
		for _, s := range a.tools {
			if t := n.Decorate(s.t); t != nil {
				l.Tools = append(l.Tools, global(t))
			}
		}
		for _, s := range a.stateTools {
			// A facade's children are available in its states, and do not move the machine.
			var child func(tool.Tool) tool.Tool
			child = func(t tool.Tool) tool.Tool {
				return asFacade(&boundTool{Tool: t, states: s.states, m: m}, t, child)
			}
			t := n.Decorate(s.t)
			if t == nil {
				continue
			}
			l.Tools = append(l.Tools, asFacade(&boundTool{Tool: t, states: s.states, targets: s.targets, m: m}, t, child))
		}
	case KindPlaybook:
		var record func(tool.Tool) tool.Tool
		record = func(t tool.Tool) tool.Tool { return asFacade(&recording{Tool: t, st: st}, t, record) }
		for _, s := range a.tools {
			t := n.Decorate(s.t)
			if t == nil {
				continue
			}
			if s.lock != nil {
				// Once the lock opened, a locked facade's children are plain recorded tools.
				l.Tools = append(l.Tools, asFacade(&lockedTool{recording: &recording{Tool: t, st: st}, cond: s.lock}, t, record))
				continue
			}
			l.Tools = append(l.Tools, record(t))
		}
	default:
		var record func(tool.Tool) tool.Tool
		record = func(t tool.Tool) tool.Tool { return asFacade(&recording{Tool: t, st: st}, t, record) }
		for _, s := range a.tools {
			t := n.Decorate(s.t)
			if t == nil {
				continue
			}
			if !s.agentic || a.spec.CaptureNestedArtifacts {
				t = record(t)
			}
			l.Tools = append(l.Tools, t)
		}
	}
	res, err := n.RunLoop(ctx, l)
	if err != nil {
		var sig tool.Signal
		var se *loop.SignalError
		switch {
		case errors.As(err, &se):
			return tool.Result{}, se.Signal // a sub-tool's replan or termination ends the run
		case errors.As(err, &sig):
			return tool.Result{}, err
		case ctx.Err() != nil:
			return tool.Result{}, err
		}
		return tool.Error(err.Error()), nil
	}
	switch {
	case a.spec.Kind == KindStateMachine:
		return tool.Text(res.Text), nil
	case a.output != nil:
		// The agent's result object is its artifact, and the text the model reads.
		return tool.ArtifactResult(res.Text, tool.Artifact{TypeName: a.OutputType(), JSON: []byte(res.Text)}), nil
	}
	return st.result(res.Text), nil
}

// OutputType is the type of an agent's result object: its output_type, or its name.
func (a *agenticTool) OutputType() string { return cmpOr(a.spec.OutputType, a.spec.Name) }

// startState is the state a state machine starts in.
func (a *agenticTool) startState() string { return cmpOr(a.initial, a.spec.Initial) }

// defaultPrompt is the kind's system prompt; a state machine's names the state it starts
// in.
func (a *agenticTool) defaultPrompt() string {
	switch a.spec.Kind {
	case KindStateMachine:
		return StateMachineSystemPrompt(a.spec.Description, a.startState())
	case KindPlaybook:
		return PlaybookSystemPrompt(a.spec.Description)
	}
	return DefaultSystemPrompt(a.Definition().Description)
}

// systemPrompt is the nested loop's system prompt for a call with input: the spec's, its
// template rendered over the call, or the kind's default. A template that fails to
// render is an error for the calling model to read.
func (a *agenticTool) systemPrompt(ctx context.Context, n Nester, input string) (string, error) {
	switch {
	case a.spec.SystemPrompt != "":
		return a.spec.SystemPrompt, nil
	case a.prompt == nil:
		return a.defaultPrompt(), nil
	}
	var state string
	if a.spec.Kind == KindStateMachine {
		state = a.startState()
	}
	hidden := func(string) bool { return true }
	if h, ok := n.(Hider); ok {
		hidden = h.Hidden
	}
	out, err := a.prompt.Render(a.spec, state, a.defaultPrompt(), PromptCall{
		Input: input, Context: toolctx.FromContext(ctx).Merge(a.spec.Context), Hidden: hidden, Board: tool.BlackboardFrom(ctx),
	})
	if err != nil {
		return "", fmt.Errorf("agentic tool '%s' was not run: its system_prompt_template failed: %w", a.spec.Name, err)
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tracker is what the sub-tools of one call of an agentic tool did: the tools that ran
// (in order, once each), the artifacts they produced, element by element, and the
// number of calls that ran.
type tracker struct {
	board tool.Blackboard

	mu        sync.Mutex
	called    []string
	artifacts []tool.Entry
	calls     int
	// celArtifacts and celBoard are the first celArtifactsN artifacts and celBoardN
	// blackboard entries, decoded for CEL.
	celArtifacts, celBoard   []any
	celArtifactsN, celBoardN int
}

// view is a snapshot of a tracker, for conditions.
type view struct {
	called    []string
	artifacts []tool.Entry
	// board is the run's blackboard; when nil, t's is read on demand (boardEntries).
	board     []tool.Entry
	iteration int
	t         *tracker
}

// view is what the tracker holds now. The blackboard is read, and the JSON decoded for
// CEL, only when a condition needs them, and decoded once (see decoded).
func (t *tracker) view() view {
	t.mu.Lock()
	defer t.mu.Unlock()
	return view{called: slices.Clone(t.called), artifacts: slices.Clone(t.artifacts), iteration: t.calls, t: t}
}

func (v view) boardEntries() []tool.Entry {
	if v.board != nil || v.t == nil || v.t.board == nil {
		return v.board
	}
	return v.t.board.Entries()
}

// celInputs are the artifacts and the blackboard as CEL values ({type, value}).
func (v view) celInputs() (artifacts, board []any) {
	if v.t == nil {
		return celEntries(v.artifacts), celEntries(v.board)
	}
	return v.t.decoded()
}

// decoded returns the artifacts and the blackboard decoded for CEL, decoding only what
// was added since the last call (both only grow).
func (t *tracker) decoded() (artifacts, board []any) {
	var entries []tool.Entry
	if t.board != nil {
		entries = t.board.Entries()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.celArtifacts = append(t.celArtifacts, celEntries(t.artifacts[t.celArtifactsN:])...)
	t.celArtifactsN = len(t.artifacts)
	if len(entries) < t.celBoardN { // not an append: decode again
		t.celBoard, t.celBoardN = nil, 0
	}
	t.celBoard = append(t.celBoard, celEntries(entries[t.celBoardN:])...)
	t.celBoardN = len(entries)
	return slices.Clone(t.celArtifacts), slices.Clone(t.celBoard)
}

func (t *tracker) record(name string, res tool.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	if !slices.Contains(t.called, name) {
		t.called = append(t.called, name)
	}
	if res.Kind == tool.KindArtifact {
		t.artifacts = append(t.artifacts, decorators.Elements(res.Artifact)...)
	}
}

// result is the agentic tool's result: its text, with the artifacts its sub-tools
// produced: none, one (a JSON value or a blob), or a list of them (a JSON array, or a
// multipart/mixed blob when some are blobs: decorators.ListArtifact).
func (t *tracker) result(text string) tool.Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch len(t.artifacts) {
	case 0:
		return tool.Text(text)
	case 1:
		a := t.artifacts[0]
		return tool.ArtifactResult(text, tool.Artifact{TypeName: a.TypeName, JSON: a.JSON, Data: a.Data, MediaType: a.MediaType})
	}
	return tool.ArtifactResult(text, decorators.ListArtifact(t.artifacts))
}

// recording records the calls of a sub-tool that ran without an error, with their
// artifacts.
type recording struct {
	tool.Tool
	st *tracker
}

func (r *recording) Delegate() tool.Tool { return r.Tool }

func (r *recording) Call(ctx context.Context, input string) (tool.Result, error) {
	res, err := r.Tool.Call(ctx, input)
	if err == nil && !res.IsError() {
		r.st.record(r.Definition().Name, res)
	}
	return res, err
}

// lockedTool is a playbook's locked tool: until its condition holds it does not run, it
// answers with what unlocks it, and its description says so.
type lockedTool struct {
	*recording
	cond condition
	refusal
}

func (l *lockedTool) Delegate() tool.Tool { return l.Tool }

// GatesCalls implements loop.Gate.
func (l *lockedTool) GatesCalls() {}

func (l *lockedTool) Definition() tool.Definition {
	d := l.recording.Definition()
	if v := l.st.view(); !l.cond.holds(v) {
		d.Description += "\n\n" + lockedPrefix + l.cond.hint(v)
	}
	return d
}

func (l *lockedTool) Call(ctx context.Context, input string) (tool.Result, error) {
	if v := l.st.view(); !l.cond.holds(v) {
		l.last.Store(true)
		return tool.Text(lockedPrefix + l.cond.hint(v)), nil
	}
	l.last.Store(false)
	return l.recording.Call(ctx, input)
}

// machine is the state of one call of a state machine.
type machine struct {
	mu    sync.Mutex
	state string
}

// boundTool is a state machine's tool available in some states.
type boundTool struct {
	tool.Tool
	states  []string
	targets map[string]string
	m       *machine
	refusal
}

func (b *boundTool) Delegate() tool.Tool { return b.Tool }

// GatesCalls implements loop.Gate.
func (b *boundTool) GatesCalls() {}

func (b *boundTool) Definition() tool.Definition {
	d := b.Tool.Definition()
	d.Description += "\n\n" + stateNote(b.states, b.targets)
	return d
}

func (b *boundTool) Call(ctx context.Context, input string) (tool.Result, error) {
	b.m.mu.Lock()
	cur := b.m.state
	b.m.mu.Unlock()
	if !slices.Contains(b.states, cur) {
		b.last.Store(true)
		return tool.Text(wrongState(cur, b.states)), nil
	}
	b.last.Store(false)
	res, err := b.Tool.Call(ctx, input)
	if err == nil && !res.IsError() {
		if to := b.targets[cur]; to != "" {
			b.m.mu.Lock()
			if b.m.state == cur {
				b.m.state = to
			}
			b.m.mu.Unlock()
		}
	}
	return res, err
}

// globalTool is a state machine's tool available in every state.
type globalTool struct{ tool.Tool }

func (g *globalTool) Delegate() tool.Tool { return g.Tool }

func (g *globalTool) Definition() tool.Definition {
	d := g.Tool.Definition()
	d.Description += "\n\n" + globalNote
	return d
}

// condition unlocks a playbook's tool.
type condition interface {
	holds(v view) bool
	// hint says what unlocks the tool, once it does not hold.
	hint(v view) string
}

type afterTools []string

func (a afterTools) holds(v view) bool {
	for _, n := range a {
		if !slices.Contains(v.called, n) {
			return false
		}
	}
	return true
}

func (a afterTools) hint(v view) string {
	var missing []string
	for _, n := range a {
		if !slices.Contains(v.called, n) {
			missing = append(missing, n)
		}
	}
	return hintAfterTools(missing)
}

type onArtifact string

func (o onArtifact) holds(v view) bool {
	return slices.ContainsFunc(v.artifacts, func(e tool.Entry) bool { return tool.SatisfiesType(e, string(o)) })
}
func (o onArtifact) hint(view) string { return hintArtifact(tool.SimpleTypeName(string(o))) }

type onBlackboard string

func (o onBlackboard) holds(v view) bool {
	return slices.ContainsFunc(v.boardEntries(), func(e tool.Entry) bool { return tool.SatisfiesType(e, string(o)) })
}
func (o onBlackboard) hint(view) string { return hintPredicate }

type when struct{ p *predicate }

func (w when) holds(v view) bool { return w.p.eval(v) }
func (w when) hint(view) string  { return hintPredicate }

type allOf []condition

func (a allOf) holds(v view) bool {
	for _, c := range a {
		if !c.holds(v) {
			return false
		}
	}
	return true
}
func (a allOf) hint(view) string { return hintAllOf }

type anyOf []condition

func (a anyOf) holds(v view) bool {
	for _, c := range a {
		if c.holds(v) {
			return true
		}
	}
	return false
}
func (a anyOf) hint(view) string { return hintAnyOf }

// lockCondition is the condition a lock describes (see Lock).
func lockCondition(l Lock) (condition, error) {
	var parts []condition
	if len(l.AfterAll) > 0 {
		parts = append(parts, afterTools(l.AfterAll))
	}
	if len(l.AfterAny) > 0 {
		// One prerequisite or several, an after_any lock is an alternative: its hint
		// says so, and never names a tool to run first.
		var any anyOf
		for _, n := range l.AfterAny {
			any = append(any, afterTools{n})
		}
		parts = append(parts, any)
	}
	if l.ArtifactType != "" {
		parts = append(parts, onArtifact(l.ArtifactType))
	}
	if l.BlackboardType != "" {
		parts = append(parts, onBlackboard(l.BlackboardType))
	}
	if l.When != "" {
		p, err := compilePredicate(l.When)
		if err != nil {
			return nil, err
		}
		parts = append(parts, when{p})
	}
	switch len(parts) {
	case 0:
		return nil, fmt.Errorf("no condition")
	case 1:
		return parts[0], nil
	}
	return allOf(parts), nil
}

// String names the tool for logs.
func (a *agenticTool) String() string {
	return fmt.Sprintf("%s(%s: %s)", kindName(a.spec.Kind), a.spec.Name, strings.Join(a.subNames(), ", "))
}

func (a *agenticTool) subNames() []string {
	var out []string
	for _, s := range a.tools {
		out = append(out, s.t.Definition().Name)
	}
	for _, s := range a.stateTools {
		out = append(out, s.t.Definition().Name)
	}
	return out
}
