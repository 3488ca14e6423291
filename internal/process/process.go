// Package process is the state of a run as a process: its blackboard (the entries that
// tools, agentic tools and subagents share), its budget and what it used, the history of
// its tool calls, the models it used, its assets, and its output channel to the client.
// It also holds the orchestrator's built-in tools over that state: the agent_process and
// blackboard facades, progress and communicate.
//
// The state is plain values (State) with no behaviour hidden in closures, so that a run
// journal can record it and rebuild it; Process guards one State for the goroutines of a
// run and tells the output channel what changes.
//
// It depends on pkg/tool only, and nothing in the orchestrator below it.
package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Status is where a process is in its life.
type Status string

// The statuses of a process.
const (
	StatusRunning    Status = "RUNNING"
	StatusCompleted  Status = "COMPLETED"
	StatusFailed     Status = "FAILED"
	StatusCancelled  Status = "CANCELLED"
	StatusReplan     Status = "REPLAN_REQUESTED"
	StatusTerminated Status = "TERMINATED"
)

// Limits is what a process may spend. Zero fields mean no limit.
type Limits struct {
	MaxCostUSD float64
	MaxTokens  int64
	MaxActions int
}

// Usage is what a process spent.
type Usage struct {
	CostUSD          float64
	PromptTokens     int64
	CompletionTokens int64
	// ModelCalls counts the model calls (LLM invocations).
	ModelCalls int
	// EmbeddingCalls counts the embedding model calls that tools reported
	// (EmbeddingUsageType).
	EmbeddingCalls int
}

// Tokens is prompt plus completion tokens.
func (u Usage) Tokens() int64 { return u.PromptTokens + u.CompletionTokens }

// Action is one tool call that was dispatched.
type Action struct {
	Tool     string
	CallID   string
	LoopID   string
	Duration time.Duration
	// Failed is set when the call ended with an error result.
	Failed bool
}

// ToolStats is the use of one tool.
type ToolStats struct {
	Tool     string
	Calls    int
	Failures int
	// Total is the time all its calls took.
	Total time.Duration
}

// Model is a model a process used.
type Model struct {
	Name     string
	Provider string
}

// Asset is an artifact the run keeps for its client.
type Asset struct {
	Entry  tool.Entry
	Tool   string
	CallID string
}

// State is everything a process holds, as plain values.
type State struct {
	ID       string
	ParentID string
	// Goal names what the process is for; empty for a utility process.
	Goal       string
	Status     Status
	Started    time.Time
	Blackboard Blackboard
	Limits     Limits
	Usage      Usage
	History    []Action
	Models     []Model
	Assets     []Asset
	// AssetBytes is the size of all assets' values together, JSON and blobs' data.
	AssetBytes int
}

// Clone returns a deep copy.
func (s State) Clone() State {
	s.Blackboard = s.Blackboard.Clone()
	s.History = slices.Clone(s.History)
	s.Models = slices.Clone(s.Models)
	s.Assets = slices.Clone(s.Assets)
	return s
}

// Actions is the number of tool calls dispatched.
func (s State) Actions() int { return len(s.History) }

// Stats is the use of each tool, most called first (ties by name).
func (s State) Stats() []ToolStats {
	by := map[string]*ToolStats{}
	var out []*ToolStats
	for _, a := range s.History {
		st := by[a.Tool]
		if st == nil {
			st = &ToolStats{Tool: a.Tool}
			by[a.Tool] = st
			out = append(out, st)
		}
		st.Calls++
		st.Total += a.Duration
		if a.Failed {
			st.Failures++
		}
	}
	res := make([]ToolStats, len(out))
	for i, st := range out {
		res[i] = *st
	}
	slices.SortStableFunc(res, func(a, b ToolStats) int {
		if a.Calls != b.Calls {
			return b.Calls - a.Calls
		}
		switch {
		case a.Tool < b.Tool:
			return -1
		case a.Tool > b.Tool:
			return 1
		}
		return 0
	})
	return res
}

// Output is what a process tells its client: the concrete types below are all of them.
type Output interface{ output() }

// EntryAdded reports an entry that joined the blackboard.
type EntryAdded struct {
	Index int
	Name  string
	Entry tool.Entry
	// Tool and CallID name the call that added it; empty when the run did.
	Tool, CallID, LoopID string
}

// ProgressReported is a transient status.
type ProgressReported struct {
	Tool, CallID, LoopID string
	Iteration            int
	Status               string
}

// MessageSent is a message for the user that stays in the conversation.
type MessageSent struct {
	CallID, LoopID string
	Text           string
}

// AssetAdded reports an asset the run keeps.
type AssetAdded struct {
	Asset  Asset
	LoopID string
}

func (EntryAdded) output()       {}
func (ProgressReported) output() {}
func (MessageSent) output()      {}
func (AssetAdded) output()       {}

// Channel receives a process's outputs, one at a time, in the order they happened. An
// error means the output did not reach the client; the tool that sent it fails.
type Channel func(Output) error

// Process is a running process: one State, guarded, and the channel its outputs go to.
type Process struct {
	out Channel
	// outMu orders additions and their reports: the channel hears of entries and assets
	// in the order of their positions. Readers take only mu.
	outMu sync.Mutex

	mu sync.Mutex
	st State
	// parent is the process p was spawned from: what tools report of their use of
	// models counts there too, as model calls of a nested loop do.
	parent *Process
}

// New returns a running process.
func New(id string, limits Limits, bounds Bounds, out Channel) *Process {
	if out == nil {
		out = func(Output) error { return nil }
	}
	return &Process{out: out, st: State{
		ID: id, Status: StatusRunning, Started: time.Now(), Limits: limits,
		Blackboard: Blackboard{Bounds: bounds},
	}}
}

// Restore returns a process holding st, as a journal recorded it.
func Restore(st State, out Channel) *Process {
	if out == nil {
		out = func(Output) error { return nil }
	}
	return &Process{out: out, st: st.Clone()}
}

// Spawn returns a child process of p, for a subagent's run: it starts with a copy of
// p's blackboard and p's limits, and its own id, goal, usage and history.
func (p *Process) Spawn(id, goal string, out Channel) *Process {
	p.mu.Lock()
	st := State{ID: id, ParentID: p.st.ID, Goal: goal, Status: StatusRunning, Started: time.Now(), Limits: p.st.Limits, Blackboard: p.st.Blackboard.Clone()}
	p.mu.Unlock()
	child := Restore(st, out)
	child.parent = p
	return child
}

// Adopt puts on p's blackboard what child added to its own after its first from entries
// (a spawned child starts with p's entries), with their binding names.
//
// All or nothing: when p's blackboard cannot take all of them, it takes none.
func (p *Process) Adopt(child *Process, from int, o Origin) error {
	st := child.Snapshot()
	var add []tool.Binding
	for i := from; i < len(st.Blackboard.Entries); i++ {
		name := ""
		if names := st.Blackboard.NameOf(i); len(names) > 0 {
			name = names[0]
		}
		add = append(add, tool.Binding{Name: name, Entry: st.Blackboard.Entries[i]})
	}
	if err := p.CanAdd(add); err != nil {
		return err
	}
	for _, b := range add {
		if err := p.Add(o, b.Name, b.Entry); err != nil {
			return err
		}
	}
	return nil
}

// Snapshot returns a copy of the state.
func (p *Process) Snapshot() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Clone()
}

// Size is about what the state holds, in bytes: its blackboard's and assets' values
// (JSON and blobs' data), and its history and model calls.
func (p *Process) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Blackboard.Bytes + p.st.AssetBytes + 64*(len(p.st.History)+len(p.st.Models))
}

// ID is the process's id.
func (p *Process) ID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.ID
}

// SetGoal records what the process is for; empty makes it a utility process.
func (p *Process) SetGoal(goal string) {
	p.mu.Lock()
	p.st.Goal = goal
	p.mu.Unlock()
}

// SetStarted records when the run started: a run resumed after a crash started when it
// first did, not when it resumed (its running time counts from then).
func (p *Process) SetStarted(t time.Time) {
	p.mu.Lock()
	p.st.Started = t
	p.mu.Unlock()
}

// SetStatus records where the process is.
func (p *Process) SetStatus(s Status) {
	p.mu.Lock()
	p.st.Status = s
	p.mu.Unlock()
}

// Origin names who changes the process: a tool call, or the run itself (all empty).
type Origin struct {
	Tool, CallID, LoopID string
	// Iteration is the turn of the loop that made the call (a model may give calls of
	// two turns the same id).
	Iteration int
}

// Add puts e on the blackboard, bound to name unless name is empty, and tells the
// channel. A usage report (EmbeddingUsageType) does not join the blackboard: it is
// counted in the process's usage, and in its parents'.
func (p *Process) Add(o Origin, name string, e tool.Entry) error {
	if m, ok, err := embeddingReport(e); ok {
		if err != nil {
			return err
		}
		p.recordEmbeddingCall(m)
		return nil
	}
	p.outMu.Lock()
	defer p.outMu.Unlock()
	p.mu.Lock()
	i, err := p.st.Blackboard.Add(name, e)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	stored := p.st.Blackboard.Entries[i]
	p.mu.Unlock()
	return p.out(EntryAdded{Index: i, Name: name, Entry: stored, Tool: o.Tool, CallID: o.CallID, LoopID: o.LoopID})
}

// CanAdd reports whether all of bs would join the blackboard now, without adding any: an
// error names the first that would be refused (numbered from 1) and why.
func (p *Process) CanAdd(bs []tool.Binding) error {
	p.mu.Lock()
	trial := p.st.Blackboard.Clone()
	p.mu.Unlock()
	for i, b := range bs {
		_, report, err := embeddingReport(b.Entry)
		if !report {
			_, err = trial.Add(b.Name, b.Entry)
		}
		if err != nil {
			return fmt.Errorf("blackboard object %d of %d was refused: %w", i+1, len(bs), err)
		}
	}
	return nil
}

// RecordModelCall records one model call.
func (p *Process) RecordModelCall(provider, model string, prompt, completion int64, cost float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Usage.ModelCalls++
	p.st.Usage.PromptTokens += prompt
	p.st.Usage.CompletionTokens += completion
	p.st.Usage.CostUSD += cost
	m := Model{Name: model, Provider: provider}
	if !slices.Contains(p.st.Models, m) {
		p.st.Models = append(p.st.Models, m)
	}
}

// recordEmbeddingCall records one embedding model call in p and the processes above it.
func (p *Process) recordEmbeddingCall(m Model) {
	for q := p; q != nil; q = q.parent {
		q.mu.Lock()
		q.st.Usage.EmbeddingCalls++
		if !slices.Contains(q.st.Models, m) {
			q.st.Models = append(q.st.Models, m)
		}
		q.mu.Unlock()
	}
}

// RecordAction records a dispatched tool call.
func (p *Process) RecordAction(a Action) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.History = append(p.st.History, a)
}

// AddAsset records an asset and tells the channel. An asset may be a blob, whose media
// type must be valid (tool.CheckMediaType). The assets have the blackboard's bounds, a
// blob's data counted as JSON is.
func (p *Process) AddAsset(a Asset, loopID string) error {
	if e := a.Entry; e.IsBlob() {
		if len(e.JSON) > 0 {
			return fmt.Errorf("asset of type %q: it holds both JSON and a blob's data; it may hold one", e.TypeName)
		}
		if err := tool.CheckMediaType(e.MediaType); err != nil {
			return fmt.Errorf("asset of type %q: %w", e.TypeName, err)
		}
	}
	p.outMu.Lock()
	defer p.outMu.Unlock()
	p.mu.Lock()
	bounds := p.st.Blackboard.Bounds
	if len(p.st.Assets) >= bounds.maxEntries() {
		p.mu.Unlock()
		return fmt.Errorf("the run keeps at most %d assets", bounds.maxEntries())
	}
	if p.st.AssetBytes+a.Entry.Size() > bounds.maxBytes() {
		p.mu.Unlock()
		return fmt.Errorf("the run keeps at most %d bytes of assets", bounds.maxBytes())
	}
	p.st.Assets = append(p.st.Assets, a)
	p.st.AssetBytes += a.Entry.Size()
	p.mu.Unlock()
	return p.out(AssetAdded{Asset: a, LoopID: loopID})
}

// Progress tells the client a transient status.
func (p *Process) Progress(o Origin, status string) error {
	return p.out(ProgressReported{Tool: o.Tool, CallID: o.CallID, LoopID: o.LoopID, Iteration: o.Iteration, Status: status})
}

// ErrBlankMessage refuses a message with no text: the client would show an empty bubble.
var ErrBlankMessage = errors.New("a message to the user must not be blank")

// Message sends the user a message that stays in the conversation.
func (p *Process) Message(o Origin, text string) error {
	if isBlank(text) {
		return ErrBlankMessage
	}
	return p.out(MessageSent{CallID: o.CallID, LoopID: o.LoopID, Text: text})
}

// Board returns the process's blackboard as tools see it: lookups read the run's
// blackboard, additions join it (and are reported) as made by the call of ctx.
func (p *Process) Board(o Origin) tool.Blackboard { return &board{p: p, o: o} }

type board struct {
	p *Process
	o Origin
}

func (b *board) Entries() []tool.Entry {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return slices.Clone(b.p.st.Blackboard.Entries)
}

func (b *board) Last(typeName string) (tool.Entry, bool) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return b.p.st.Blackboard.Last(typeName)
}

// LastBound is Last with the name bound to the entry, if any.
func (b *board) LastBound(typeName string) (tool.Binding, bool) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	bb := b.p.st.Blackboard
	for i := len(bb.Entries) - 1; i >= 0; i-- {
		if tool.SatisfiesType(bb.Entries[i], typeName) {
			name := ""
			if names := bb.NameOf(i); len(names) > 0 {
				name = names[0]
			}
			return tool.Binding{Name: name, Entry: bb.Entries[i]}, true
		}
	}
	return tool.Binding{}, false
}

func (b *board) Get(name string) (tool.Entry, bool) {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return b.p.st.Blackboard.Get(name)
}

func (b *board) Add(e tool.Entry) error               { return b.p.Add(b.o, "", e) }
func (b *board) Bind(name string, e tool.Entry) error { return b.p.Add(b.o, name, e) }

// ContextKey is the context key of a Process (NewContext; a run's context answers it
// with the run's).
type ContextKey struct{}

// NewContext returns ctx carrying p; the built-in tools find their process there.
func NewContext(ctx context.Context, p *Process) context.Context {
	return context.WithValue(ctx, ContextKey{}, p)
}

// FromContext returns the process in ctx, or nil.
func FromContext(ctx context.Context) *Process {
	p, _ := ctx.Value(ContextKey{}).(*Process)
	return p
}

// OriginFrom is the origin of the call in ctx.
func OriginFrom(ctx context.Context, toolName string) Origin {
	info, _ := tool.CallInfoFrom(ctx)
	return Origin{Tool: toolName, CallID: info.CallID, LoopID: info.LoopID}
}
