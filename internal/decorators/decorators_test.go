package decorators_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// rawTool implements tool.Tool directly, without the protection tool.New adds, so that
// what ErrorMapping does is visible.
type rawTool struct {
	def  tool.Definition
	meta tool.Metadata
	call func(ctx context.Context, input string) (tool.Result, error)
}

func (t *rawTool) Definition() tool.Definition { return t.def }
func (t *rawTool) Metadata() tool.Metadata     { return t.meta }
func (t *rawTool) Call(ctx context.Context, input string) (tool.Result, error) {
	return t.call(ctx, input)
}

func newRaw(call func(ctx context.Context, input string) (tool.Result, error)) *rawTool {
	return &rawTool{
		def: tool.Definition{
			Name:        "lookup",
			Description: "looks things up",
			InputSchema: schema.Params(schema.String("q", "what to look up")),
			Metadata:    map[string]string{"owner": "search-team"},
		},
		meta: tool.Metadata{ReturnDirect: true, Idempotent: true, Timeout: 3 * time.Second},
		call: call,
	}
}

func TestErrorMapping(t *testing.T) {
	errDisk := errors.New("disk full")
	replan := tool.ReplanRequested{Reason: "stale"}
	wrappedTerminate := fmt.Errorf("stopping: %w", tool.Terminate{Scope: tool.TerminateAgent})
	tests := []struct {
		name    string
		call    func(context.Context, string) (tool.Result, error)
		want    tool.Result
		wantErr error // compared by identity: a signal passes through unchanged
	}{
		{
			name: "a text result passes through",
			call: func(context.Context, string) (tool.Result, error) { return tool.Text("found"), nil },
			want: tool.Text("found"),
		},
		{
			name: "an artifact result passes through",
			call: func(context.Context, string) (tool.Result, error) {
				return tool.ArtifactResult("a doc", tool.Artifact{TypeName: "Doc", JSON: []byte(`{}`)}), nil
			},
			want: tool.ArtifactResult("a doc", tool.Artifact{TypeName: "Doc", JSON: []byte(`{}`)}),
		},
		{
			name: "an error result passes through",
			call: func(context.Context, string) (tool.Result, error) { return tool.Error("Something went wrong"), nil },
			want: tool.Error("Something went wrong"),
		},
		{
			name: "a returned error becomes an error result",
			call: func(context.Context, string) (tool.Result, error) { return tool.Text("ignored"), errDisk },
			want: tool.Result{Kind: tool.KindError, Content: "disk full", Code: tool.CodeFailed, Cause: errDisk},
		},
		{
			name: "a returned error without a message becomes a generic error result",
			call: func(context.Context, string) (tool.Result, error) { return tool.Result{}, errors.New("") },
			want: tool.Result{Kind: tool.KindError, Content: "Tool invocation failed", Code: tool.CodeFailed, Cause: errors.New("")},
		},
		{
			name:    "a signal passes through",
			call:    func(context.Context, string) (tool.Result, error) { return tool.Result{}, replan },
			wantErr: replan,
		},
		{
			name:    "a wrapped signal passes through unchanged",
			call:    func(context.Context, string) (tool.Result, error) { return tool.Result{}, wrappedTerminate },
			wantErr: wrappedTerminate,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decorators.ErrorMapping(newRaw(tt.call)).Call(t.Context(), `{"q":"x"}`)
			if !reflect.DeepEqual(err, tt.wantErr) { // not errors.Is: a signal must come back unchanged, not rewrapped
				t.Fatalf("Call error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, equateMessages); diff != "" {
				t.Errorf("Call result (-want +got):\n%s", diff)
			}
		})
	}
}

// equateMessages compares error causes by message when they are not the same value, so
// that a want built with errors.New("") matches the tool's own errors.New("").
var equateMessages = cmp.Comparer(func(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || a.Error() == b.Error()
})

// TestErrorMappingIsTransparent checks that the wrapper is a tool.Delegating that keeps
// what the model and the loop see of the tool and hands the call's context on untouched.
func TestErrorMappingIsTransparent(t *testing.T) {
	type key struct{}
	var gotCtx context.Context
	var gotInput string
	inner := newRaw(func(ctx context.Context, input string) (tool.Result, error) {
		gotCtx, gotInput = ctx, input
		return tool.Text("ok"), nil
	})
	w := decorators.ErrorMapping(inner)

	d, ok := w.(tool.Delegating)
	if !ok {
		t.Fatalf("ErrorMapping(t) is a %T, want a tool.Delegating", w)
	}
	if d.Delegate() != tool.Tool(inner) {
		t.Errorf("Delegate() = %v, want the wrapped tool", d.Delegate())
	}
	if tool.Unwrap(w) != tool.Tool(inner) {
		t.Errorf("tool.Unwrap = %v, want the wrapped tool", tool.Unwrap(w))
	}
	if got, ok := tool.As[*rawTool](w); !ok || got != inner {
		t.Errorf("tool.As[*rawTool] = %v, %v; want the wrapped tool", got, ok)
	}
	if diff := cmp.Diff(inner.Definition(), w.Definition()); diff != "" {
		t.Errorf("Definition (-inner +wrapped):\n%s", diff)
	}
	if diff := cmp.Diff(inner.Metadata(), w.Metadata()); diff != "" {
		t.Errorf("Metadata (-inner +wrapped):\n%s", diff)
	}

	ctx := context.WithValue(t.Context(), key{}, "tool call context")
	ctx = toolcall.WithCallInfo(ctx, tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c"})
	ctx, dispatch := toolinternal.WithDispatch(ctx)
	if _, err := w.Call(ctx, `{"q":"x"}`); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if gotCtx.Done() != ctx.Done() {
		t.Error("the delegate's context is not cancelled with the caller's")
	}
	if v := gotCtx.Value(key{}); v != "tool call context" {
		t.Errorf("context value = %v, want the caller's", v)
	}
	if info, _ := tool.CallInfoFrom(gotCtx); info != (tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c"}) {
		t.Errorf("CallInfo = %+v, want the caller's", info)
	}
	if toolinternal.DispatchFrom(gotCtx) != dispatch {
		t.Error("the delegate got another Dispatch than the caller's")
	}
	if gotInput != `{"q":"x"}` {
		t.Errorf("input = %q, want the caller's", gotInput)
	}
}

// tracing is a decorator that logs around the calls of the tool it wraps.
type tracing struct {
	name string
	log  *[]string
	d    tool.Tool
}

func (t tracing) Definition() tool.Definition { return t.d.Definition() }
func (t tracing) Metadata() tool.Metadata     { return t.d.Metadata() }
func (t tracing) Delegate() tool.Tool         { return t.d }
func (t tracing) Call(ctx context.Context, input string) (tool.Result, error) {
	*t.log = append(*t.log, t.name+" in")
	defer func() { *t.log = append(*t.log, t.name+" out") }()
	return t.d.Call(ctx, input)
}

func TestApply(t *testing.T) {
	var log []string
	trace := func(name string) decorators.Decorator {
		return func(d tool.Tool) tool.Tool { return tracing{name: name, log: &log, d: d} }
	}
	inner := newRaw(func(context.Context, string) (tool.Result, error) {
		log = append(log, "tool")
		return tool.Text("ok"), nil
	})

	if got := decorators.Apply(inner); got != tool.Tool(inner) {
		t.Errorf("Apply without decorators = %v, want the tool itself", got)
	}

	w := decorators.Apply(inner, trace("first"), trace("second"))
	if _, err := w.Call(t.Context(), "{}"); err != nil {
		t.Fatalf("Call: %v", err)
	}
	want := []string{"second in", "first in", "tool", "first out", "second out"}
	if diff := cmp.Diff(want, log); diff != "" {
		t.Errorf("call order, first decorator innermost (-want +got):\n%s", diff)
	}
	var chain []string
	for t := tool.Tool(w); ; {
		tr, ok := t.(tracing)
		if !ok {
			break
		}
		chain = append(chain, tr.name)
		t = tr.Delegate()
	}
	if diff := cmp.Diff([]string{"second", "first"}, chain); diff != "" {
		t.Errorf("delegate chain from the outside (-want +got):\n%s", diff)
	}
	if tool.Unwrap(w) != tool.Tool(inner) {
		t.Errorf("Unwrap = %v, want the tool", tool.Unwrap(w))
	}
}

// TestChain checks the layers the config puts around every tool: a failing tool reaches
// the model as an error result, a signal still reaches the loop, a panic becomes an error
// result at the end of the pipeline (the layers see it as a failed call), and the layers
// run in the documented order, each only around the tools it covers.
func TestChain(t *testing.T) {
	chain := &decorators.Chain{Bounds: decorators.Bounds{MaxTextBytes: 1024}}
	failing := chain.Decorate(newRaw(func(context.Context, string) (tool.Result, error) { return tool.Result{}, errors.New("boom") }))
	res, err := failing.Call(t.Context(), "{}")
	if err != nil || res.Render() != "Error: boom" {
		t.Errorf("failing tool under the chain = %+v, %v; want the error result", res, err)
	}
	boom := chain.Decorate(newRaw(func(context.Context, string) (tool.Result, error) { panic("boom") }))
	if res, err := boom.Call(t.Context(), "{}"); err != nil || res.Code != tool.CodePanic || !strings.Contains(res.Content, "panicked: boom") {
		t.Errorf("panicking tool under the chain = %+v, %v; want an error result with code PANIC", res, err)
	}
	stop := chain.Decorate(newRaw(func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, tool.Terminate{Scope: tool.TerminateAction}
	}))
	if _, err := stop.Call(t.Context(), "{}"); !errors.As(err, new(tool.Terminate)) {
		t.Errorf("signalling tool under the chain error = %v, want the Terminate signal", err)
	}

	sinkAll, err := decorators.CompileRule(decorators.RuleSpec{Key: "all", Sinks: []string{"blackboard"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sinkOther, err := decorators.CompileRule(decorators.RuleSpec{Key: "other", Tools: []string{"other"}, Sinks: []string{"blackboard"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := &decorators.Chain{
		Bounds:  decorators.Bounds{MaxTextBytes: 1024},
		Replan:  map[string]decorators.Decider{"lookup": func(context.Context, decorators.ReplanContext) (*decorators.ReplanDecision, error) { return nil, nil }},
		Sinks:   []decorators.Rule{sinkAll, sinkOther},
		Assets:  []decorators.Rule{sinkAll},
		OneShot: map[string]string{"lookup": "advice"},
	}
	layers := func(t tool.Tool) []string {
		w, ok := t.(*toolcall.Tool)
		if !ok {
			return []string{fmt.Sprintf("%T", t)}
		}
		return w.Layers()
	}
	want := []string{"events", "one-shot", "assets", "artifact sinks", "replan", "output bound"}
	// Without telemetry there is nothing to trace: no layer for it.
	if diff := cmp.Diff(want, layers(full.Decorate(newRaw(nil)))); diff != "" {
		t.Errorf("layers without telemetry, outermost first (-want +got):\n%s", diff)
	}
	full.Telemetry = telemetrytest.New(t, telemetry.Options{}).Telemetry
	if diff := cmp.Diff(append([]string{"telemetry"}, want...), layers(full.Decorate(newRaw(nil)))); diff != "" {
		t.Errorf("layers with telemetry, outermost first (-want +got):\n%s", diff)
	}
	// A tool no rule covers passes only the layers for every tool.
	plain := newRaw(nil)
	plain.def.Name = "plain"
	full.Sinks, full.Assets = []decorators.Rule{sinkOther}, nil
	if diff := cmp.Diff([]string{"telemetry", "events", "output bound"}, layers(full.Decorate(plain))); diff != "" {
		t.Errorf("layers of a tool without rules (-want +got):\n%s", diff)
	}
}
