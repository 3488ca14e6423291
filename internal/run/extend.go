package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Placed is a layer of the program's own in a run's call pipeline: it comes right after
// the built-in layer After names (its place in the order), after any earlier program
// layer placed there.
type Placed struct {
	After string
	Layer toolcall.Layer
}

// DefaultPlace is where a program's layer goes when it names none: after the events
// layer, so that its calls (and its refusals) are traced and counted in the history,
// and before one-shot, assets, sinks, replanning and the output bound, so that what it
// sees of a result is what the tool returned.
const DefaultPlace = decorators.LayerEvents

// Group is a tool group the orchestrator serves in its own process: a run asks for it in
// tool_groups like a worker's group. Its calls are journaled as a worker's are, so that
// a resumed run does not run a tool that is not idempotent twice.
type Group struct {
	Description, UsageNotes string
	Tools                   []tool.Tool
}

// inProcessWorker is the worker an in-process group's calls are journaled as sent to.
const inProcessWorker = "in-process"

// BuiltinLayers are the names of the built-in layers of a run's call pipeline, in order.
func BuiltinLayers() []string {
	var s Service
	return s.pipeline("", Caller{}, config.Tenant{}, false, false, &decorators.Chain{}).Names()
}

// checkExtensions checks the program's layers and groups against the built-in ones and
// the config's, and returns the groups' tools ready to serve.
func checkExtensions(opts Options) (map[string]localGroup, error) {
	builtin := BuiltinLayers()
	names := map[string]bool{}
	for _, n := range builtin {
		names[n] = true
	}
	for i, p := range opts.Layers {
		switch {
		case p.Layer.Name == "" || p.Layer.For == nil:
			return nil, fmt.Errorf("run: layer %d needs a name and For", i)
		case names[p.Layer.Name]:
			return nil, fmt.Errorf("run: layer %d: the name %q is taken", i, p.Layer.Name)
		case p.After != "" && !slices.Contains(builtin, p.After):
			return nil, fmt.Errorf("run: layer %q: After names no built-in layer: %q (they are: %s)", p.Layer.Name, p.After, strings.Join(builtin, ", "))
		}
		names[p.Layer.Name] = true
	}
	out := map[string]localGroup{}
	seen := map[string]string{}
	for role, g := range opts.Groups {
		if err := checkGroup(opts, role, g, seen); err != nil {
			return nil, err
		}
		lg := localGroup{description: g.Description, notes: g.UsageNotes}
		for _, t := range g.Tools {
			lg.tools = append(lg.tools, &localTool{Tool: t, role: role})
		}
		out[role] = lg
	}
	return out, nil
}

func checkGroup(opts Options, role string, g Group, seen map[string]string) error {
	if !wire.RoleRE.MatchString(role) {
		return fmt.Errorf("run: in-process group %q: a role is 1 to 64 letters, digits, '_', '.' or '-'", role)
	}
	if _, builtin := process.Groups[role]; builtin {
		return fmt.Errorf("run: in-process group %q: the role is one of the orchestrator's built-in groups", role)
	}
	if gc, ok := opts.Config.Groups[role]; ok && (gc.MCP != nil || len(gc.Include) > 0) {
		return fmt.Errorf("run: in-process group %q: groups.%s makes the role the config's own or an MCP server's", role, role)
	}
	if len(g.Tools) == 0 {
		return fmt.Errorf("run: in-process group %q has no tools", role)
	}
	for i, t := range g.Tools {
		if t == nil {
			return fmt.Errorf("run: in-process group %q: tool %d is nil", role, i)
		}
		if _, ok := tool.As[tool.Facade](t); ok {
			return fmt.Errorf("run: in-process group %q: tool %q is a facade; offer the group as one with groups.%s.facade instead", role, t.Definition().Name, role)
		}
		name := t.Definition().Name
		if !wire.ToolNameRE.MatchString(name) {
			return fmt.Errorf("run: in-process group %q: tool %d: the name %q is not 1 to 64 letters, digits, '_' or '-'", role, i, name)
		}
		if other, dup := seen[name]; dup {
			return fmt.Errorf("run: in-process groups %q and %q both have a tool %q", other, role, name)
		}
		seen[name] = role
	}
	return nil
}

// localGroup is an in-process group, checked.
type localGroup struct {
	description, notes string
	tools              []tool.Tool
}

// localTool is a tool of an in-process group: it belongs to its group (tenant grants and
// artifact rules by group apply) and its calls are journaled.
type localTool struct {
	tool.Tool
	role string
}

var (
	_ decorators.Grouped = (*localTool)(nil)
	_ tool.Delegating    = (*localTool)(nil)
)

func (t *localTool) Group() string       { return t.role }
func (t *localTool) Delegate() tool.Tool { return t.Tool }

// Call runs the tool under the run's journal: a call with a recorded outcome is answered
// from it (its control signal, and what it put on the blackboard, too), one in flight
// when the orchestrator stopped runs again only when idempotent.
func (t *localTool) Call(ctx context.Context, input string) (tool.Result, error) {
	var callErr error
	res, _ := toolcall.Journaled(ctx, t.Definition().Name, t.Metadata().Idempotent, toolcall.Dispatcher{
		Worker: inProcessWorker,
		Send: func(ctx context.Context) (tool.Result, []byte) {
			var log *slog.Logger
			if c := toolcall.From(ctx); c != nil {
				log = c.Log
			}
			board := &recordingBoard{Blackboard: tool.BlackboardFrom(ctx)}
			if board.Blackboard != nil {
				ctx = context.WithValue(ctx, toolinternal.BlackboardKey{}, tool.Blackboard(board))
			}
			res, err := toolcall.Protect(ctx, log, t.Definition().Name, func() (tool.Result, error) { return t.Tool.Call(ctx, input) })
			sig, signal := tool.AsSignal(err)
			switch {
			case signal:
				callErr = err
			case err != nil:
				res, err = tool.ErrorFrom(err), nil
			}
			return res, encodeLocalOutcome(res, err, sig, board.taken())
		},
		Replay: func(data []byte) (tool.Result, error) {
			res, sig, added, err := decodeLocalOutcome(data)
			if sig != nil {
				callErr = sig
			}
			if b := tool.BlackboardFrom(ctx); b != nil {
				for _, a := range added { // the run's blackboard as the call left it
					if a.Name != "" {
						_ = b.Bind(a.Name, a.Entry)
					} else {
						_ = b.Add(a.Entry)
					}
				}
			}
			return res, err
		},
	})
	return res, callErr
}

// recordingBoard is an in-process call's view of the run's blackboard that keeps what the
// call put on it, for its outcome record: a replay, which does not run the call, puts it
// on the blackboard again.
type recordingBoard struct {
	tool.Blackboard
	mu    sync.Mutex
	added []tool.Binding
}

func (b *recordingBoard) Add(o tool.Entry) error {
	if err := b.Blackboard.Add(o); err != nil {
		return err
	}
	b.mu.Lock()
	b.added = append(b.added, tool.Binding{Entry: o})
	b.mu.Unlock()
	return nil
}

func (b *recordingBoard) Bind(name string, o tool.Entry) error {
	if err := b.Blackboard.Bind(name, o); err != nil {
		return err
	}
	b.mu.Lock()
	b.added = append(b.added, tool.Binding{Name: name, Entry: o})
	b.mu.Unlock()
	return nil
}

// taken is what the call put on the blackboard.
func (b *recordingBoard) taken() []tool.Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.added
}

// localOutcome is the journaled outcome of an in-process tool's call that ended with a
// control signal or put something on the run's blackboard: the result, the signal, what
// it put there. A call with neither is journaled as its result alone
// (toolcall.EncodeResult). A signal of a type of the program's own (neither a replan nor
// a termination: the run fails on it) is kept as its text (Other).
type localOutcome struct {
	Result    json.RawMessage       `json:"result"`
	Replan    *tool.ReplanRequested `json:"replan,omitempty"`
	Terminate *tool.Terminate       `json:"terminate,omitempty"`
	Other     string                `json:"other_signal,omitempty"`
	Board     []tool.Binding        `json:"board,omitempty"`
}

// otherSignal is a replayed signal of a type of the program's own: the run fails on it
// with the text the first one had.
type otherSignal struct{ text string }

func (s otherSignal) Error() string { return s.text }
func (otherSignal) ToolSignal()     {}

// encodeLocalOutcome is the record of an in-process call's outcome; nil (the result
// alone, as the journal records by itself) without a signal or blackboard additions.
func encodeLocalOutcome(res tool.Result, err error, sig tool.Signal, added []tool.Binding) []byte {
	if sig == nil && len(added) == 0 {
		return nil
	}
	rec := localOutcome{Result: toolcall.EncodeResult(res), Board: added}
	var replan tool.ReplanRequested
	var terminate tool.Terminate
	switch {
	case sig == nil:
	case errors.As(sig, &replan):
		rec.Replan = &replan
	case errors.As(sig, &terminate):
		rec.Terminate = &terminate
	default:
		rec.Other = cmp.Or(err.Error(), "a tool's signal")
	}
	b, _ := toolinternal.MarshalJSON(rec)
	return b
}

func decodeLocalOutcome(data []byte) (tool.Result, tool.Signal, []tool.Binding, error) {
	var rec localOutcome
	if err := json.Unmarshal(data, &rec); err != nil || rec.Result == nil {
		res, err := toolcall.DecodeResult(data) // a call without a signal or additions
		return res, nil, nil, err
	}
	res, err := toolcall.DecodeResult(rec.Result)
	switch {
	case err != nil:
		return res, nil, nil, err
	case rec.Replan != nil:
		return res, *rec.Replan, rec.Board, nil
	case rec.Terminate != nil:
		return res, *rec.Terminate, rec.Board, nil
	case rec.Other != "":
		return res, otherSignal{rec.Other}, rec.Board, nil
	}
	return res, nil, rec.Board, nil
}

// insertLayers puts the program's layers into p at their places.
func insertLayers(p toolcall.Pipeline, extra []Placed) toolcall.Pipeline {
	for _, x := range extra {
		after := x.After
		if after == "" {
			after = DefaultPlace
		}
		i := slices.IndexFunc(p, func(l toolcall.Layer) bool { return l.Name == after })
		// After any program layer already placed there.
		for i+1 < len(p) && slices.ContainsFunc(extra, func(o Placed) bool { return o.Layer.Name == p[i+1].Name }) {
			i++
		}
		p = slices.Insert(p, i+1, x.Layer)
	}
	return p
}
