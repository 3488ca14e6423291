package tool_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func TestNewDefinitionAndMetadata(t *testing.T) {
	query := schema.Params(schema.String("q", "Query"))
	noop := func(context.Context, string) (tool.Result, error) { return tool.Text(""), nil }
	tests := []struct {
		name     string
		tool     tool.Tool
		wantDef  tool.Definition
		wantMeta tool.Metadata
	}{
		{
			name:    "defaults",
			tool:    tool.New("search", "Searches", schema.Empty(), noop),
			wantDef: tool.Definition{Name: "search", Description: "Searches", InputSchema: schema.Empty()},
		},
		{
			name: "all options",
			tool: tool.New("search", "Searches", query, noop,
				tool.ReturnDirect(), tool.Idempotent(), tool.Timeout(3*time.Second),
				tool.DefinitionMetadata(map[string]string{"a": "1", "b": "1"}),
				tool.DefinitionMetadata(map[string]string{"b": "2"}),
			),
			wantDef: tool.Definition{
				Name: "search", Description: "Searches", InputSchema: query,
				Metadata: map[string]string{"a": "1", "b": "2"},
			},
			wantMeta: tool.Metadata{ReturnDirect: true, Idempotent: true, Timeout: 3 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.wantDef, tt.tool.Definition()); diff != "" {
				t.Errorf("Definition() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantMeta, tt.tool.Metadata()); diff != "" {
				t.Errorf("Metadata() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewDefinitionMetadataIsACopy(t *testing.T) {
	m := map[string]string{"k": "v"}
	tl := tool.New("t", "", schema.Empty(), nil, tool.DefinitionMetadata(m))
	m["k"] = "changed by caller"
	tl.Definition().Metadata["k"] = "changed by reader"
	if got := tl.Definition().Metadata["k"]; got != "v" {
		t.Errorf("metadata = %q, want v", got)
	}
}

func TestNewCall(t *testing.T) {
	boom := errors.New("boom")
	replan := tool.ReplanRequested{Reason: "world changed"}
	terminate := tool.Terminate{Scope: tool.TerminateAgent, Reason: "done"}
	artifact := tool.ArtifactResult("made", tool.Artifact{TypeName: "X", JSON: []byte(`{}`)})
	tests := []struct {
		name    string
		fn      func(context.Context, string) (tool.Result, error)
		want    tool.Result
		wantErr error
	}{
		{
			name: "text passes through",
			fn:   func(_ context.Context, in string) (tool.Result, error) { return tool.Text("got " + in), nil },
			want: tool.Text("got {}"),
		},
		{
			name: "artifact passes through",
			fn:   func(context.Context, string) (tool.Result, error) { return artifact, nil },
			want: artifact,
		},
		{
			name: "error result passes through",
			fn:   func(context.Context, string) (tool.Result, error) { return tool.Error("bad"), nil },
			want: tool.Error("bad"),
		},
		{
			name: "returned error becomes error result",
			fn:   func(context.Context, string) (tool.Result, error) { return tool.Text("ignored"), boom },
			want: tool.Result{Kind: tool.KindError, Content: "boom", Code: tool.CodeFailed, Cause: boom},
		},
		{
			name: "message-less error",
			fn:   func(context.Context, string) (tool.Result, error) { return tool.Result{}, errors.New("") },
			want: tool.Result{Kind: tool.KindError, Content: "Tool invocation failed", Code: tool.CodeFailed},
		},
		{
			name:    "replan propagates",
			fn:      func(context.Context, string) (tool.Result, error) { return tool.Result{}, replan },
			wantErr: replan,
		},
		{
			name: "wrapped terminate propagates",
			fn: func(context.Context, string) (tool.Result, error) {
				return tool.Result{}, fmt.Errorf("stopping: %w", terminate)
			},
			wantErr: terminate,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tool.New("t", "", schema.Empty(), tt.fn).Call(context.Background(), "{}")
			if (err == nil) != (tt.wantErr == nil) || (err != nil && !reflect.DeepEqual(unwrapAll(err), unwrapAll(tt.wantErr))) {
				t.Fatalf("Call error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if _, ok := tool.AsSignal(err); !ok {
					t.Errorf("Call error %v is not a Signal", err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(tool.Result{}, "Cause")); diff != "" {
				t.Errorf("Call mismatch (-want +got):\n%s", diff)
			}
			if tt.want.Cause != nil && !errors.Is(got.Cause, tt.want.Cause) {
				t.Errorf("Cause = %v, want %v", got.Cause, tt.want.Cause)
			}
		})
	}
}

// TestNewDoesNotRecover: a panic in a tool is not hidden inside it; internal/toolcall,
// which runs every call on the worker and in the orchestrator, recovers and logs it.
func TestNewDoesNotRecover(t *testing.T) {
	defer func() {
		if p := recover(); p != 42 {
			t.Errorf("recovered %v, want the tool's panic 42", p)
		}
	}()
	_, _ = tool.New("t", "", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		panic(42)
	}).Call(context.Background(), "")
	t.Error("the panic did not reach the caller")
}

type ctxKey struct{}

func TestNewPassesContextAndInput(t *testing.T) {
	var gotCtx, gotIn any
	tl := tool.New("t", "", schema.Empty(), func(ctx context.Context, in string) (tool.Result, error) {
		gotCtx, gotIn = ctx.Value(ctxKey{}), in
		return tool.Text(""), nil
	})
	ctx := context.WithValue(context.Background(), ctxKey{}, "call context")
	if _, err := tl.Call(ctx, `{"raw": true}`); err != nil {
		t.Fatal(err)
	}
	if gotCtx != "call context" || gotIn != `{"raw": true}` {
		t.Errorf("fn saw ctx value %v and input %v", gotCtx, gotIn)
	}
}

func TestSignals(t *testing.T) {
	tests := []struct {
		err     error
		wantMsg string
	}{
		{tool.ReplanRequested{}, "replan requested"},
		{tool.ReplanRequested{Reason: "new facts"}, "replan requested: new facts"},
		{tool.Terminate{}, "terminate"},
		{tool.Terminate{Scope: tool.TerminateAgent}, "terminate agent"},
		{tool.Terminate{Scope: tool.TerminateAction, Reason: "enough"}, "terminate action: enough"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.wantMsg {
			t.Errorf("%#v.Error() = %q, want %q", tt.err, got, tt.wantMsg)
		}
		sig, ok := tool.AsSignal(fmt.Errorf("wrapped: %w", tt.err))
		if !ok || !reflect.DeepEqual(sig, tt.err) {
			t.Errorf("AsSignal(wrapped %#v) = %v, %v", tt.err, sig, ok)
		}
	}
	if _, ok := tool.AsSignal(errors.New("plain")); ok {
		t.Error("AsSignal(plain error) = true")
	}
	if _, ok := tool.AsSignal(nil); ok {
		t.Error("AsSignal(nil) = true")
	}
	var r tool.ReplanRequested
	if !errors.As(fmt.Errorf("x: %w", tool.ReplanRequested{Reason: "r"}), &r) || r.Reason != "r" {
		t.Errorf("errors.As into ReplanRequested = %+v", r)
	}
}

// unwrapAll is the innermost error of err's chain.
func unwrapAll(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
