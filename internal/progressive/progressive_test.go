package progressive_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestEvaluate covers the strategy's cases: facades beneath wrappers, empty selections,
// exclusive facades, guide and context tools switched off.
func TestEvaluate(t *testing.T) {
	c := &calls{}
	sibling := c.leaf("sibling")
	other := c.leaf("other")
	plain := tool.Of("db", "Database.", c.leaves("query", "insert"))
	notes := tool.Of("db", "Database.", c.leaves("query"), tool.UsageNotes("Query first."))
	exclusive := tool.Of("db", "Database.", c.leaves("query", "insert"), tool.Exclusive())
	bare := tool.Of("db", "Database.", c.leaves("query"), tool.NoGuideTool(), tool.NoContextTool())
	noGuide := tool.Of("db", "Database.", c.leaves("query"), tool.NoGuideTool())
	noContext := tool.Of("db", "Database.", c.leaves("query"), tool.NoContextTool())
	selectable := tool.Selectable("db", "Database.", schema.Params(schema.String("mode", "Mode")), c.leaves("query", "insert"),
		tool.SelectorFunc(func(_ context.Context, in string) ([]tool.Tool, error) {
			if strings.Contains(in, "read") {
				return c.leaves("query"), nil
			}
			return nil, nil
		}))
	byCategory := tool.ByCategory("db", "Database.", []tool.Category{{Name: "read", Tools: c.leaves("query")}, {Name: "write", Tools: c.leaves("insert")}})
	failing := tool.Selectable("db", "Database.", schema.Empty(), nil, tool.SelectorFunc(func(context.Context, string) ([]tool.Tool, error) {
		return nil, errors.New("worker gone")
	}))
	wrapped := tool.WithNote(plain, "Start here")

	tests := []struct {
		name       string
		called     tool.Tool
		input      string
		current    []tool.Tool
		wantAdd    []string
		wantRemove []string
		wantErr    string
	}{
		{name: "a tool that is not a facade changes nothing", called: sibling, current: []tool.Tool{sibling, plain}},
		{name: "the facade is replaced by its children, a guide and a context tool", called: plain, current: []tool.Tool{sibling, plain, other},
			wantAdd: []string{"query", "insert", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "a facade beneath a wrapper: the wrapper leaves", called: wrapped, current: []tool.Tool{wrapped},
			wantAdd: []string{"query", "insert", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "exclusive removes every current tool", called: exclusive, current: []tool.Tool{sibling, exclusive, other},
			wantAdd: []string{"query", "insert", "db", "db_context"}, wantRemove: []string{"sibling", "db", "other"}},
		{name: "the selector decides", called: selectable, input: `{"mode":"read"}`, current: []tool.Tool{selectable},
			wantAdd: []string{"query", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "an empty selection changes nothing", called: selectable, input: `{"mode":"write"}`, current: []tool.Tool{selectable}},
		{name: "by category", called: byCategory, input: `{"category":"write"}`, current: []tool.Tool{byCategory},
			wantAdd: []string{"insert", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "by unknown category: all", called: byCategory, input: `{"category":"x"}`, current: []tool.Tool{byCategory},
			wantAdd: []string{"query", "insert", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "no guide, no context", called: bare, current: []tool.Tool{bare}, wantAdd: []string{"query"}, wantRemove: []string{"db"}},
		{name: "no guide", called: noGuide, current: []tool.Tool{noGuide}, wantAdd: []string{"query", "db_context"}, wantRemove: []string{"db"}},
		{name: "no context", called: noContext, current: []tool.Tool{noContext}, wantAdd: []string{"query", "db"}, wantRemove: []string{"db"}},
		{name: "notes do not change the set", called: notes, current: []tool.Tool{notes}, wantAdd: []string{"query", "db", "db_context"}, wantRemove: []string{"db"}},
		{name: "a failing selector changes nothing", called: failing, current: []tool.Tool{failing},
			wantErr: "progressive: unfolding 'db': selecting the tools of 'db': worker gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := progressive.New().Evaluate(t.Context(), loop.InjectionContext{Tool: tt.called, Input: tt.input, Current: tt.current})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantAdd, toolNames(inj.Add)); diff != "" {
				t.Errorf("Add (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRemove, toolNames(inj.Remove)); diff != "" {
				t.Errorf("Remove (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnfold(t *testing.T) {
	c := &calls{}
	f := tool.Of("db", "Database.", c.leaves("query", "insert"))
	u, err := progressive.Unfold(t.Context(), f, "{}", []tool.Tool{c.leaf("x"), f})
	if err != nil {
		t.Fatal(err)
	}
	if u.Facade != f {
		t.Errorf("Facade = %v", u.Facade)
	}
	if diff := cmp.Diff([]string{"query", "insert"}, toolNames(u.Selected)); diff != "" {
		t.Errorf("Selected (-want +got):\n%s", diff)
	}
	want := progressive.Change{Added: []string{"query", "insert", "db", "db_context"}, Removed: []string{"db"}}
	if diff := cmp.Diff(want, u.Change()); diff != "" {
		t.Errorf("Change (-want +got):\n%s", diff)
	}
	none, err := progressive.Unfold(t.Context(), c.leaf("x"), "{}", nil)
	if err != nil || none.Facade != nil || !cmp.Equal(progressive.Change{}, none.Change()) {
		t.Errorf("Unfold of a plain tool = %+v, %v", none, err)
	}
}

// TestChainedWithUnfolding: the unfolding strategy chained with another, both applied
// to the same call.
func TestChainedWithUnfolding(t *testing.T) {
	c := &calls{}
	f := tool.Of("db", "Database.", c.leaves("query"))
	audit := c.leaf("audit")
	extra := loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		if ic.Tool.Definition().Name == "db" {
			return loop.Injection{Add: []tool.Tool{audit}}, nil
		}
		return loop.Injection{}, nil
	})
	inj, err := loop.Chain(progressive.New(), extra).Evaluate(t.Context(), loop.InjectionContext{Tool: f, Input: "{}", Current: []tool.Tool{f}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"query", "db", "db_context", "audit"}, toolNames(inj.Add)); diff != "" {
		t.Errorf("Add (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"db"}, toolNames(inj.Remove)); diff != "" {
		t.Errorf("Remove (-want +got):\n%s", diff)
	}
}
