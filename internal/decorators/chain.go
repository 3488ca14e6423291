package decorators

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// FilterSpec chooses artifacts: by type name, by a CEL predicate, and what to take of
// them through a CEL transform (see Expression).
type FilterSpec struct {
	TypeName      string
	When          string
	Transform     string
	TransformType string
	// TransformTypeField names TransformType in errors; default "transform_type" (the
	// config key).
	TransformTypeField string
}

// RuleSpec is one artifact rule as the config or a run request states it: the tools it
// applies to, what it takes, and where that goes.
type RuleSpec struct {
	// Key names the rule in errors ("groups.crm.artifacts[0]", "artifact_sinks[2]").
	Key string
	// Tools and Groups choose the tools, by name and by group; both empty mean all.
	Tools, Groups []string
	FilterSpec
	// Sinks are sink names: SinkBlackboard, SinkAssets, or a custom sink's name.
	Sinks []string
}

// Rule is a compiled RuleSpec.
type Rule struct {
	key           string
	tools, groups map[string]bool
	sel           Selector
	sinks         []string
	sink          Sink
}

// SpecError is a rule that cannot be compiled; Key names the offending field.
type SpecError struct {
	Key     string
	Problem string
}

func (e *SpecError) Error() string { return e.Key + ": " + e.Problem }

// CompileSelector compiles a FilterSpec; errors name key's fields. CEL sees JSON values
// only: a selector with a predicate or a transform takes no blob (Selector.JSONOnly).
func CompileSelector(key string, f FilterSpec) (Selector, error) {
	sel := Selector{TypeName: f.TypeName, JSONOnly: f.When != "" || f.Transform != ""}
	if f.When != "" {
		x, err := CompilePredicate(f.When)
		if err != nil {
			return Selector{}, &SpecError{Key: key + ".when", Problem: err.Error()}
		}
		sel.Filter = x.Match
	}
	if f.Transform != "" {
		x, err := CompileTransform(f.Transform)
		if err != nil {
			return Selector{}, &SpecError{Key: key + ".transform", Problem: err.Error()}
		}
		typ := f.TransformType
		sel.Transform = func(e tool.Entry) (tool.Entry, error) { return x.Apply(e, typ) }
	} else if f.TransformType != "" {
		field := f.TransformTypeField
		if field == "" {
			field = "transform_type"
		}
		return Selector{}, &SpecError{Key: key + "." + field, Problem: "is set without a transform"}
	}
	return sel, nil
}

// CompileRule compiles a rule; custom holds the sinks the program registered by name.
func CompileRule(spec RuleSpec, custom map[string]Sink) (Rule, error) {
	sel, err := CompileSelector(spec.Key, spec.FilterSpec)
	if err != nil {
		return Rule{}, err
	}
	if len(spec.Sinks) == 0 {
		return Rule{}, &SpecError{Key: spec.Key + ".sinks", Problem: "is empty: name at least one sink (blackboard, assets" + customNames(custom) + ")"}
	}
	var sinks []Sink
	for i, name := range spec.Sinks {
		s := builtinSink(name)
		if s == nil {
			s = custom[name]
		}
		if s == nil {
			return Rule{}, &SpecError{Key: fmt.Sprintf("%s.sinks[%d]", spec.Key, i), Problem: fmt.Sprintf("unknown sink %q (known sinks: blackboard, assets%s)", name, customNames(custom))}
		}
		sinks = append(sinks, s)
	}
	sink := sinks[0]
	if len(sinks) > 1 {
		sink = Composite(sinks...)
	}
	return Rule{key: spec.Key, tools: set(spec.Tools), groups: set(spec.Groups), sel: sel, sinks: spec.Sinks, sink: sink}, nil
}

func builtinSink(name string) Sink {
	switch name {
	case SinkBlackboard:
		return BlackboardSink
	case SinkAssets:
		return AssetsSink
	}
	return nil
}

func customNames(custom map[string]Sink) string {
	if len(custom) == 0 {
		return ""
	}
	return ", " + strings.Join(slices.Sorted(maps.Keys(custom)), ", ")
}

func set(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// applies reports whether the rule covers a tool of the given name and group.
func (r Rule) applies(name, group string) bool {
	if r.tools == nil && r.groups == nil {
		return true
	}
	return r.tools[name] || (group != "" && r.groups[group])
}

// The names of the layers Chain compiles.
const (
	LayerTelemetry = "telemetry"
	LayerEvents    = "events"
	LayerOneShot   = "one-shot"
	LayerAssets    = "assets"
	LayerSinks     = "artifact sinks"
	LayerReplan    = "replan"
	LayerBound     = "output bound"
)

// Chain is the config's part of a run's call pipeline. Layers gives it, outermost
// first:
//
//  1. telemetry: the execute_tool span and the tool metrics, around everything below;
//  2. events: each finished call is reported (history, tool statistics);
//  3. one-shot per loop, for tools configured so;
//  4. asset tracking, by the asset rules that cover the tool;
//  5. artifact sinking, by the artifact rules that cover the tool, in their order;
//  6. replanning, for tools configured to replan;
//  7. output bound: huge text is cut with a note, an oversized artifact becomes an error.
//
// Below them, the end of every pipeline maps a returned error to an error result
// (signals pass) and a panic to one (toolcall.Terminal).
type Chain struct {
	Bounds Bounds
	// Replan holds the replan deciders of tools, by tool name.
	Replan map[string]Decider
	// Sinks are the artifact rules; Assets the asset rules (their sinks are ignored).
	Sinks, Assets []Rule
	// OneShot holds the one-shot advice of tools, by tool name.
	OneShot   map[string]string
	Telemetry *telemetry.Telemetry
}

// With returns a copy of c with more artifact rules after c's own.
func (c *Chain) With(sinks []Rule) *Chain {
	if len(sinks) == 0 {
		return c
	}
	cp := *c
	cp.Sinks = append(slices.Clip(c.Sinks), sinks...)
	return &cp
}

// Layers are c's layers, outermost first.
func (c *Chain) Layers() toolcall.Pipeline {
	return toolcall.Pipeline{
		TelemetryLayer(c.Telemetry),
		EventsLayer,
		toolcall.Layer{Name: LayerOneShot, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
			advice, ok := c.OneShot[t.Definition().Name]
			if !ok {
				// A tool that says it runs once per loop (a worker's, registered so): the
				// orchestrator counts, so that the rule holds across the worker's replicas.
				if m := t.Metadata(); m.OncePerLoop {
					advice, ok = m.OnceAdvice, true
				}
			}
			if !ok {
				return nil
			}
			return OneShot(t.Definition().Name, advice)
		}},
		SinkLayer(LayerAssets, func(t tool.Tool) []Sinking { return rulesFor(t, c.Assets, AssetsSink, SinkAssets) }),
		SinkLayer(LayerSinks, func(t tool.Tool) []Sinking { return rulesFor(t, c.Sinks, nil, "") }),
		ReplanLayer(func(t tool.Tool) Decider { return c.Replan[t.Definition().Name] }),
		BoundLayer(c.Bounds),
	}
}

// rulesFor are the rules that cover t, as sinkings; sink and name, when set, replace
// each rule's own.
func rulesFor(t tool.Tool, rules []Rule, sink Sink, name string) []Sinking {
	tn, group := t.Definition().Name, groupOf(t)
	var out []Sinking
	for _, r := range rules {
		if !r.applies(tn, group) {
			continue
		}
		s := Sinking{Selector: r.sel, Sink: r.sink, Name: strings.Join(r.sinks, "+")}
		if sink != nil {
			s.Sink, s.Name = sink, name
		}
		out = append(out, s)
	}
	return out
}

// OneShot is the one-shot layer's wrapping for a tool named name: in each loop, the
// first call runs; later calls answer that the tool's outcome is known already, with
// advice (toolctx.AlreadyLoaded).
func OneShot(name, advice string) func(toolcall.Handler) toolcall.Handler {
	memo := toolinternal.NewLoopMemo(toolinternal.DefaultMaxTracked)
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
			if memo.FirstTimeInLoop(c.Info.LoopID) {
				return next(ctx, c)
			}
			return tool.Text(toolctx.AlreadyLoaded(name, advice)), nil
		}
	}
}

// Decorate runs t through c's layers.
func (c *Chain) Decorate(t tool.Tool) tool.Tool { return c.Layers().Wrap(t) }

// ReplanSpec is a configured replan: see config.Replan.
type ReplanSpec struct {
	Key, Tool      string
	TypeName, When string
	Reason         string
	Add, AddType   string
}

// CompileReplan turns a ReplanSpec into a Decider: with neither type nor predicate every
// returned call replans (adding the artifact, if any); otherwise a call whose artifact
// matches does, adding the artifact or what Add computes of it.
func CompileReplan(spec ReplanSpec) (Decider, error) {
	var when *Expression
	if spec.When != "" {
		x, err := CompilePredicate(spec.When)
		if err != nil {
			return nil, &SpecError{Key: spec.Key + ".when", Problem: err.Error()}
		}
		when = x
	}
	var add *Expression
	if spec.AddType != "" && spec.Add == "" {
		return nil, &SpecError{Key: spec.Key + ".add_type", Problem: "is set without add"}
	}
	if spec.Add != "" {
		x, err := CompileTransform(spec.Add)
		if err != nil {
			return nil, &SpecError{Key: spec.Key + ".add", Problem: err.Error()}
		}
		add = x
	}
	always := spec.TypeName == "" && when == nil
	reason := spec.Reason
	if reason == "" {
		reason = spec.Tool + " replans based on result"
		if always {
			reason = spec.Tool + " replans"
		}
	}
	return func(_ context.Context, rc ReplanContext) (*ReplanDecision, error) {
		if !always {
			if rc.Artifact == nil || (spec.TypeName != "" && !tool.SatisfiesType(*rc.Artifact, spec.TypeName)) {
				return nil, nil
			}
			if when != nil {
				ok, err := when.Match(*rc.Artifact)
				if err != nil || !ok {
					return nil, err
				}
			}
		}
		d := &ReplanDecision{Reason: reason, Add: artifactBinding(rc)}
		if add != nil && rc.Artifact != nil {
			e, err := add.Apply(*rc.Artifact, spec.AddType)
			if err != nil {
				return nil, err
			}
			d.Add = []tool.Binding{{Entry: e}}
		}
		return d, nil
	}, nil
}
