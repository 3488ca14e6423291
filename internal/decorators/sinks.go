package decorators

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// Capture is one artifact (or one element of a list artifact) on its way to a sink.
type Capture struct {
	// Entry is what goes to the sink, after the selector's transform.
	Entry tool.Entry
	// Tool is the name of the tool that returned it; CallID and LoopID name the call.
	Tool, CallID, LoopID string
}

// Sink receives captured artifacts. An error fails the call: the model reads it.
type Sink interface {
	Accept(ctx context.Context, c Capture) error
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(ctx context.Context, c Capture) error

// Accept calls f.
func (f SinkFunc) Accept(ctx context.Context, c Capture) error { return f(ctx, c) }

// ListSink collects what it receives.
type ListSink struct {
	mu    sync.Mutex
	items []tool.Entry
}

// Accept appends the capture's entry.
func (l *ListSink) Accept(_ context.Context, c Capture) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, c.Entry)
	return nil
}

// Items returns a copy of what the sink received, in order.
func (l *ListSink) Items() []tool.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// Composite sends every capture to each of sinks in turn; the first failure stops it.
// No sinks is allowed: it accepts everything.
func Composite(sinks ...Sink) Sink {
	return SinkFunc(func(ctx context.Context, c Capture) error {
		for _, s := range sinks {
			if err := s.Accept(ctx, c); err != nil {
				return err
			}
		}
		return nil
	})
}

// ErrNoBlackboard fails a blackboard sink used outside a run.
var ErrNoBlackboard = errors.New("no run blackboard is available for the blackboard sink")

// BlackboardSink puts captures on the run's blackboard (tool.BlackboardFrom).
var BlackboardSink Sink = SinkFunc(func(ctx context.Context, c Capture) error {
	b := tool.BlackboardFrom(ctx)
	if b == nil {
		return ErrNoBlackboard
	}
	return b.Add(c.Entry)
})

// Selector chooses the artifacts a sink takes and what it takes of them.
type Selector struct {
	// TypeName, when set, takes only entries that satisfy it (tool.SatisfiesType).
	TypeName string
	// Filter, when set, takes only entries for which it is true. It sees the entry
	// before Transform, a blob too (tool.Entry.IsBlob) unless JSONOnly is set.
	Filter func(tool.Entry) (bool, error)
	// Transform, when set, replaces each entry taken.
	Transform func(tool.Entry) (tool.Entry, error)
	// JSONOnly takes no blob. CompileSelector sets it for a CEL predicate or transform,
	// which see JSON values only.
	JSONOnly bool
}

// Select returns what s takes of a result: nothing unless it carries an artifact; for a
// list artifact (a JSON array, or a multipart/mixed blob: see ListArtifact) each
// element that passes, in order; otherwise the artifact itself if it passes. A blob is
// one entry, of the artifact's type name and media type. The type check comes first,
// then the filter, then the transform.
func (s Selector) Select(res tool.Result) ([]tool.Entry, error) {
	var out []tool.Entry
	for _, e := range Elements(res.Artifact) {
		if s.TypeName != "" && !tool.SatisfiesType(e, s.TypeName) {
			continue
		}
		if s.JSONOnly && e.IsBlob() {
			continue
		}
		if s.Filter != nil {
			ok, err := s.Filter(e)
			if err != nil {
				return nil, fmt.Errorf("the filter failed: %w", err)
			}
			if !ok {
				continue
			}
		}
		if s.Transform != nil {
			t, err := s.Transform(e)
			if err != nil {
				return nil, fmt.Errorf("the transform failed: %w", err)
			}
			e = t
		}
		out = append(out, e)
	}
	return out, nil
}

// Elements is an artifact as blackboard entries: none for no artifact; each element of a
// JSON array, or each part of a list that holds blobs (ListArtifact); else the artifact
// itself, a blob as one entry of its media type (DefaultMediaType when it names none).
// An element's type name is its "_typeName" entry when it is an object that has one (a
// part's Toolmesh-Type-Name header), else the artifact's type name without a list
// marker: "[]Customer", "Customer[]" and "list<Customer>" all give "Customer".
func Elements(a *tool.Artifact) []tool.Entry {
	if a != nil && a.Data != nil {
		return blobElements(a)
	}
	raw := artifactJSON(a)
	if len(raw) == 0 {
		return nil
	}
	trimmed := strings.TrimLeft(string(raw), " \t\r\n")
	if !strings.HasPrefix(trimmed, "[") {
		return []tool.Entry{{TypeName: a.TypeName, JSON: raw}}
	}
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) != nil {
		return []tool.Entry{{TypeName: a.TypeName, JSON: raw}}
	}
	elemType := ElementType(a.TypeName)
	out := make([]tool.Entry, 0, len(elems))
	for _, el := range elems {
		typ := elemType
		var named struct {
			TypeName string `json:"_typeName"`
		}
		if len(el) > 0 && el[0] == '{' && json.Unmarshal(el, &named) == nil && named.TypeName != "" {
			typ = named.TypeName
		}
		out = append(out, tool.Entry{TypeName: typ, JSON: el})
	}
	return out
}

// artifactJSON is an artifact's JSON: its JSON, or its in-process value encoded; nil for
// no artifact, a blob, or a value JSON cannot encode.
func artifactJSON(a *tool.Artifact) json.RawMessage {
	if a == nil || a.Data != nil {
		return nil
	}
	if a.JSON != nil || a.Value == nil {
		return a.JSON
	}
	b, err := json.Marshal(a.Value)
	if err != nil {
		return nil
	}
	return b
}

// ElementType is the element type of a list type name ("[]X", "X[]", "list<X>" and
// "List<X>" give "X"); another name is returned as it is.
func ElementType(typeName string) string {
	switch {
	case strings.HasPrefix(typeName, "[]"):
		return typeName[2:]
	case strings.HasSuffix(typeName, "[]"):
		return strings.TrimSuffix(typeName, "[]")
	case (strings.HasPrefix(typeName, "list<") || strings.HasPrefix(typeName, "List<")) && strings.HasSuffix(typeName, ">"):
		return typeName[5 : len(typeName)-1]
	}
	return typeName
}

// SinkLayer sends the artifacts a call returns to the sinks of the rules that cover its
// tool (rules gives them; none: the layer does nothing for the tool), each rule in turn,
// then returns the result unchanged. A filter, transform or sink that fails turns the
// result into an error the model reads, which says what the tool returned.
func SinkLayer(name string, rules func(t tool.Tool) []Sinking) toolcall.Layer {
	return toolcall.Layer{Name: name, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		rs := rules(t)
		if len(rs) == 0 {
			return nil
		}
		toolName := t.Definition().Name
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				res, err := next(ctx, c)
				// The rules apply in their order, each to what the one before let through.
				for _, r := range rs {
					if err != nil || res.Kind != tool.KindArtifact {
						return res, err
					}
					entries, serr := r.Selector.Select(res)
					if serr == nil {
						serr = deliver(ctx, c, toolName, r, entries)
					}
					if serr != nil {
						res = sinkFailure(toolName, r.Name, res, serr)
					}
				}
				return res, err
			}
		}
	}}
}

// Sinking is where a rule sends the artifacts it takes: Selector takes them, Sink
// receives them, Name names the sink in errors and events.
type Sinking struct {
	Selector Selector
	Sink     Sink
	Name     string
}

// SinkArtifacts wraps t so that the artifacts sel takes go to sink (SinkLayer). name
// names the sink in errors and events.
func SinkArtifacts(t tool.Tool, sel Selector, sink Sink, name string) tool.Tool {
	return layer(SinkLayer(LayerSinks, func(tool.Tool) []Sinking { return []Sinking{{sel, sink, name}} }))(t)
}

// PublishToBlackboard wraps t so that every artifact it returns joins the run's
// blackboard, a list artifact element by element.
func PublishToBlackboard(t tool.Tool) tool.Tool {
	return SinkArtifacts(t, Selector{}, BlackboardSink, SinkBlackboard)
}

// PublishTypeToBlackboard is PublishToBlackboard for artifacts of one type.
func PublishTypeToBlackboard(t tool.Tool, typeName string) tool.Tool {
	return SinkArtifacts(t, Selector{TypeName: typeName}, BlackboardSink, SinkBlackboard)
}

// PublishSelectedToBlackboard is PublishToBlackboard with a selector.
func PublishSelectedToBlackboard(t tool.Tool, sel Selector) tool.Tool {
	return SinkArtifacts(t, sel, BlackboardSink, SinkBlackboard)
}

// deliver gives entries to r's sink, and tells the listener of each. A call a resumed
// run's journal answered gives them to the run's own sinks (the blackboard, the assets:
// the replay rebuilds them) but not to a program's, which had them the first time: an
// artifact reaches a program's sink at most once.
func deliver(ctx context.Context, c *toolcall.Call, toolName string, r Sinking, entries []tool.Entry) error {
	again := c.Dispatch != nil && c.Dispatch.Replayed && r.Name != SinkBlackboard && r.Name != SinkAssets
	for _, e := range entries {
		cp := Capture{Entry: e, Tool: toolName, CallID: c.Info.CallID, LoopID: c.Info.LoopID}
		if !again { // else its event alone, which the journal has from the first time
			if err := r.Sink.Accept(ctx, cp); err != nil {
				return err
			}
		}
		if l := listenerFrom(ctx); l != nil {
			l.Captured(r.Name, cp)
		}
	}
	return nil
}

// sinkFailure is the error result of a call whose artifact could not be sunk.
func sinkFailure(toolName, sink string, res tool.Result, err error) tool.Result {
	msg := fmt.Sprintf("tool '%s' ran, but its artifact could not go to the %s sink: %v", toolName, sink, err)
	if res.Content != "" {
		msg += ". Its result was: " + res.Content
	}
	return tool.ErrorWithCode(tool.CodeFailed, msg)
}
