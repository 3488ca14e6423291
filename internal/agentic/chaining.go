package agentic

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// Tool chaining: a tool that returns a domain object (an artifact whose type some
// methods have as their receiver type, tool.MethodOf) binds it in its loop, and the
// methods of that type then run on it. The last object returned of a type is the one
// bound; a method that changes its receiver rebinds the new value.

// The texts of a method tool.
func methodNote(typeName string) string {
	return "Note: This tool requires a " + tool.SimpleTypeName(typeName) + " instance to be retrieved first."
}

func methodUnbound(typeName string) string {
	return "This tool is not yet available. You must first retrieve a single " + tool.SimpleTypeName(typeName) + " instance."
}

// Source says which returned objects bind: those of Type, when When holds for them.
// When reads the object (`value`, `type_name`) and the run's process: its blackboard and
// its ToolCallContext (see sourceInputs).
type Source struct {
	Type string
	When *sourcePredicate
}

// CompileSources compiles chaining sources; an error names the field (field[i].type_name,
// field[i].when).
func CompileSources(field string, specs []ChainingSpec) ([]Source, error) {
	out := make([]Source, 0, len(specs))
	for i, sp := range specs {
		f := indexed(field, i)
		if strings.TrimSpace(sp.Type) == "" {
			return nil, fieldErr(f+".type_name", "a chaining source needs a type name")
		}
		src := Source{Type: sp.Type}
		if sp.When != "" {
			x, err := compileSourcePredicate(sp.When)
			if err != nil {
				return nil, fieldErr(f+".when", "%v", err)
			}
			src.When = x
		}
		out = append(out, src)
	}
	return out, nil
}

// Bindings are the domain objects one loop has bound, by receiver type. Safe for
// concurrent use.
type Bindings struct {
	// types are the receiver types an object can bind as: those of the methods the
	// mesh serves.
	types   func() []string
	sources []Source
	// fits reports whether an object satisfies what its type declares (its schema).
	fits func(typ string, e tool.Entry) bool
	// hidden reports the keys of the ToolCallContext a source's predicate must not read;
	// nil hides the whole context.
	hidden func(key string) bool

	mu     sync.Mutex
	bound  map[string]tool.Entry
	recent []Binding // types bound since the last Recent
}

// Binding is a type that bound an object; Replaced says an earlier object of the type
// was bound and the new one replaced it.
type Binding struct {
	Type     string
	Replaced bool
}

// NewBindings returns the bindings of a loop. types lists the receiver types an
// object may bind as; sources, when there are any, restrict which objects bind.
func NewBindings(types func() []string, sources []Source) *Bindings {
	return &Bindings{types: types, sources: sources, bound: map[string]tool.Entry{}}
}

// Checking makes b bind an object only when fits says it satisfies its type (the
// schema of a declared domain type); it returns b.
func (b *Bindings) Checking(fits func(typ string, e tool.Entry) bool) *Bindings {
	b.fits = fits
	return b
}

// Hiding makes the sources' predicates read the ToolCallContext without the keys hidden
// reports (the config's secrets, the well-known credential keys); it returns b. The run
// passes them in, since the config that names its secrets lives above this package.
// Without it a predicate reads an empty context.
func (b *Bindings) Hiding(hidden func(key string) bool) *Bindings {
	b.hidden = hidden
	return b
}

// OfferIn binds e, returned by a call whose context is ctx, as every receiver type it
// satisfies that a source takes; a source's predicate reads the run's blackboard and
// ToolCallContext from ctx. An object that is a list is not bound (its elements are
// offered one by one). An object that binds as a type already bound replaces the
// earlier one.
func (b *Bindings) OfferIn(ctx context.Context, e tool.Entry) {
	if len(e.JSON) == 0 || e.JSON[0] == '[' {
		return
	}
	in := &sourceInputs{ctx: ctx, hidden: b.hidden}
	for _, typ := range b.types() {
		if !tool.SatisfiesType(e, typ) || !b.takes(e, in) || (b.fits != nil && !b.fits(typ, e)) {
			continue
		}
		b.mu.Lock()
		_, replaced := b.bound[typ]
		b.bound[typ] = e
		if i := slices.IndexFunc(b.recent, func(r Binding) bool { return r.Type == typ }); i >= 0 {
			b.recent[i].Replaced = b.recent[i].Replaced || replaced
		} else {
			b.recent = append(b.recent, Binding{Type: typ, Replaced: replaced})
		}
		b.mu.Unlock()
	}
}

// takes reports whether a source takes e (any object when there is no source).
func (b *Bindings) takes(e tool.Entry, in *sourceInputs) bool {
	if len(b.sources) == 0 {
		return true
	}
	for _, s := range b.sources {
		if !tool.SatisfiesType(e, s.Type) {
			continue
		}
		if s.When == nil || s.When.match(e, in) {
			return true
		}
	}
	return false
}

// sourceInputs are the run's process as a source's predicate reads it: `blackboard`,
// the run's blackboard as a list of {type_name, type, value} (JSON values only), and
// `context`, the ToolCallContext as a map without toolmesh's reserved keys and the keys
// hidden reports. Each is read once per object offered, when a predicate first needs it.
type sourceInputs struct {
	ctx    context.Context
	hidden func(key string) bool

	board, bag       any
	gotBoard, gotBag bool
}

func (in *sourceInputs) blackboard() any {
	if !in.gotBoard {
		in.gotBoard = true
		var es []tool.Entry
		if bb := tool.BlackboardFrom(in.ctx); bb != nil {
			es = bb.Entries()
		}
		list := make([]any, 0, len(es))
		for _, e := range es {
			if val, err := decorators.DecodeJSON(e.JSON); err == nil {
				list = append(list, map[string]any{"type_name": e.TypeName, "type": e.TypeName, "value": val})
			}
		}
		in.board = list
	}
	return in.board
}

func (in *sourceInputs) context() any {
	if !in.gotBag {
		in.gotBag = true
		bag := map[string]string{}
		if in.hidden != nil {
			bag = toolctx.FromContext(in.ctx).Keep(func(k string) bool { return !toolctx.IsReserved(k) && !in.hidden(k) }).Map()
		}
		in.bag = bag
	}
	return in.bag
}

// Bound is the object bound as typ.
func (b *Bindings) Bound(typ string) (tool.Entry, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.bound[typ]
	return e, ok
}

// rebind replaces the object bound as typ with a method's new value of it.
func (b *Bindings) rebind(typ string, e tool.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bound[typ] = e
}

// Recent returns the types bound since the last call, and forgets them.
func (b *Bindings) Recent() []Binding {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.recent
	b.recent = nil
	return r
}

type bindingsKey struct{}

// WithBindings returns ctx carrying a loop's bindings.
func WithBindings(ctx context.Context, b *Bindings) context.Context {
	return context.WithValue(ctx, bindingsKey{}, b)
}

// BindingsFrom is the calling loop's bindings; nil outside a run.
func BindingsFrom(ctx context.Context) *Bindings {
	b, _ := ctx.Value(bindingsKey{}).(*Bindings)
	return b
}

// The names of the layers of tool chaining.
const (
	LayerBinding  = "binding"
	LayerReceiver = "receiver"
)

// BindingLayer offers what a call returns, an artifact element by element, to the
// calling loop's bindings. Off, it does nothing.
func BindingLayer(on bool) toolcall.Layer {
	return toolcall.Layer{Name: LayerBinding, For: func(tool.Tool) func(toolcall.Handler) toolcall.Handler {
		if !on {
			return nil
		}
		return bindResults
	}}
}

func bindResults(next toolcall.Handler) toolcall.Handler {
	return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
		res, err := next(ctx, c)
		if err == nil && res.Kind == tool.KindArtifact {
			if bs := BindingsFrom(ctx); bs != nil {
				for _, e := range decorators.Elements(res.Artifact) {
					bs.OfferIn(ctx, e)
				}
			}
		}
		return res, err
	}
}

// ReceiverLayer runs a method of a domain type (a tool whose Metadata.ReceiverType is
// set) on the object of that type bound in the calling loop: until one is bound the call
// answers with what it needs; then it carries the bound object as its receiver (its
// state), and a new value the method returns replaces the binding. Off, it does nothing.
func ReceiverLayer(on bool) toolcall.Layer {
	return toolcall.Layer{Name: LayerReceiver, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		typ := t.Metadata().ReceiverType
		if !on || typ == "" {
			return nil
		}
		return receiver(typ)
	}}
}

func receiver(typ string) func(toolcall.Handler) toolcall.Handler {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
			bs := BindingsFrom(ctx)
			var recv tool.Entry
			ok := false
			if bs != nil {
				recv, ok = bs.Bound(typ)
			}
			if !ok {
				return tool.Text(methodUnbound(typ)), nil
			}
			st := toolcall.NewState(recv.JSON)
			outer := c.State
			c.State = st
			res, err := next(ctx, c)
			c.State = outer
			if toolcall.StateChanged(st) {
				if b := st.Bytes(); json.Valid(b) {
					bs.rebind(typ, tool.Entry{TypeName: recv.TypeName, JSON: b})
				}
			}
			return res, err
		}
	}
}

// Chain wraps a tool for chaining (BindingLayer and ReceiverLayer): its artifacts
// (element by element) bind in the calling loop; a method runs on the object bound as
// its receiver type.
func Chain(t tool.Tool) tool.Tool {
	return toolcall.Pipeline{BindingLayer(true), ReceiverLayer(true)}.Wrap(MethodOf(t))
}

// MethodOf is t with the note of a method in its description when it is one (its
// Metadata.ReceiverType is set), else t: what a run offers of a method, whose calls
// ReceiverLayer runs.
func MethodOf(t tool.Tool) tool.Tool {
	if typ := t.Metadata().ReceiverType; typ != "" {
		return &method{Tool: t, typ: typ}
	}
	return t
}

// Method wraps t as a method of receiverType: described as one, run on the bound object
// of that type.
func Method(t tool.Tool, receiverType string) tool.Tool {
	return toolcall.Pipeline{{Name: LayerReceiver, For: func(tool.Tool) func(toolcall.Handler) toolcall.Handler { return receiver(receiverType) }}}.Wrap(&method{Tool: t, typ: receiverType})
}

// method is a method of a domain type as the model sees it: its description says which
// object it needs.
type method struct {
	tool.Tool
	typ string
}

func (m *method) Delegate() tool.Tool { return m.Tool }

func (m *method) Definition() tool.Definition {
	d := m.Tool.Definition()
	d.Description += "\n\n" + methodNote(m.typ)
	return d
}

// Discovery is the loop strategy of auto-discovery: once an object of a type binds,
// the methods of that type (methods returns them all) join the loop's tools. When a new
// object replaces the one bound, the type's methods the loop offers are replaced by
// methods of the new binding: they leave and join again, under the same names, so that
// the loop's tools_changed event shows the change.
func Discovery(b *Bindings, methods func() []tool.Tool) loop.Strategy {
	return loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		recent := b.Recent()
		if len(recent) == 0 {
			return loop.Injection{}, nil
		}
		current := map[string]tool.Tool{}
		for _, t := range ic.Current {
			current[t.Definition().Name] = t
		}
		added := map[string]bool{}
		var inj loop.Injection
		for _, t := range methods() {
			name := t.Definition().Name
			i := slices.IndexFunc(recent, func(r Binding) bool { return r.Type == t.Metadata().ReceiverType })
			if i < 0 || added[name] {
				continue
			}
			if old, offered := current[name]; offered {
				if !recent[i].Replaced {
					continue
				}
				inj.Remove = append(inj.Remove, old)
			}
			inj.Add = append(inj.Add, t)
			added[name] = true
		}
		return inj, nil
	})
}
