package decorators_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// replanOf calls tl and returns the replan it raised, or nil with the result.
func replanOf(t *testing.T, tl tool.Tool) (*tool.ReplanRequested, tool.Result) {
	t.Helper()
	res, err := tl.Call(context.Background(), `{"q":"x"}`)
	if err == nil {
		return nil, res
	}
	var r tool.ReplanRequested
	if !errors.As(err, &r) {
		t.Fatalf("error %v is not a replan", err)
	}
	return &r, res
}

func TestReplanAlways(t *testing.T) {
	r, _ := replanOf(t, decorators.ReplanAlways(returning(artifact("Order", `{"id":7}`))))
	want := &tool.ReplanRequested{Reason: "lookup replans", Add: []tool.Binding{{Entry: tool.Entry{TypeName: "Order", JSON: []byte(`{"id":7}`)}}}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("replan (-want +got):\n%s", diff)
	}
	// Without an artifact nothing is added, and the replan still happens.
	r, _ = replanOf(t, decorators.ReplanAlways(returning(tool.Text("done"))))
	if r == nil || r.Reason != "lookup replans" || len(r.Add) != 0 {
		t.Errorf("text result: %+v", r)
	}
	// An error result is the model's to read: no replan.
	if r, res := replanOf(t, decorators.ReplanAlways(returning(tool.Error("boom")))); r != nil || res.Content != "boom" {
		t.Errorf("error result: %+v %q", r, res.Content)
	}
}

func TestReplanWhen(t *testing.T) {
	blocked := func(e tool.Entry) (bool, error) { return strings.Contains(string(e.JSON), "blocked"), nil }
	for _, tt := range []struct {
		name   string
		res    tool.Result
		replan bool
	}{
		{"match", artifact("crm.Customer", `{"status":"blocked"}`), true},
		{"no match", artifact("crm.Customer", `{"status":"ok"}`), false},
		{"wrong type", artifact("Order", `{"status":"blocked"}`), false},
		{"no artifact", tool.Text(`{"status":"blocked"}`), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, res := replanOf(t, decorators.ReplanWhen(returning(tt.res), "Customer", blocked))
			if (r != nil) != tt.replan {
				t.Fatalf("replan %+v, want %v", r, tt.replan)
			}
			if r != nil && (r.Reason != "lookup replans based on result" || len(r.Add) != 1) {
				t.Errorf("replan %+v", r)
			}
			if r == nil && res.Content != tt.res.Content {
				t.Errorf("result %q, want the original", res.Content)
			}
		})
	}
}

func TestConditionalReplanAndReplanAndAdd(t *testing.T) {
	var seen decorators.ReplanContext
	d := func(_ context.Context, rc decorators.ReplanContext) (*decorators.ReplanDecision, error) {
		seen = rc
		if strings.Contains(rc.Result.Content, "stale") {
			return &decorators.ReplanDecision{Reason: "the data is stale", Add: []tool.Binding{{Name: "why", Entry: tool.Entry{TypeName: "Note", JSON: []byte(`"stale"`)}}}}, nil
		}
		return nil, nil
	}
	if r, res := replanOf(t, decorators.ConditionalReplan(returning(tool.Text("fresh")), d)); r != nil || res.Content != "fresh" {
		t.Errorf("no decision: %+v %q", r, res.Content)
	}
	if seen.Tool.Name != "lookup" || seen.Input != `{"q":"x"}` || seen.Artifact != nil {
		t.Errorf("context %+v", seen)
	}
	r, _ := replanOf(t, decorators.ConditionalReplan(returning(artifact("X", `{"v":"stale"}`)), func(ctx context.Context, rc decorators.ReplanContext) (*decorators.ReplanDecision, error) {
		if rc.Artifact == nil || string(rc.Artifact.JSON) != `{"v":"stale"}` {
			t.Errorf("artifact %+v", rc.Artifact)
		}
		return d(ctx, decorators.ReplanContext{Result: tool.Text("stale")})
	}))
	if r == nil || r.Reason != "the data is stale" || r.Add[0].Name != "why" {
		t.Errorf("decision: %+v", r)
	}
	failing := func(context.Context, decorators.ReplanContext) (*decorators.ReplanDecision, error) {
		return nil, errors.New("decider down")
	}
	if _, res := replanOf(t, decorators.ConditionalReplan(returning(tool.Text("ok")), failing)); !res.IsError() || !strings.Contains(res.Content, "deciding whether to replan failed: decider down") {
		t.Errorf("failing decider: %q", res.Content)
	}

	compute := func(e tool.Entry) (tool.Entry, bool, error) {
		if strings.Contains(string(e.JSON), "skip") {
			return tool.Entry{}, false, nil
		}
		return tool.Entry{TypeName: "Summary", JSON: []byte(`"short"`)}, true, nil
	}
	r, _ = replanOf(t, decorators.ReplanAndAdd(returning(artifact("Doc", `{"body":"long"}`)), "Doc", compute))
	if r == nil || r.Reason != "lookup replans based on result" || string(r.Add[0].Entry.JSON) != `"short"` {
		t.Errorf("replanAndAdd: %+v", r)
	}
	if r, _ := replanOf(t, decorators.ReplanAndAdd(returning(artifact("Doc", `{"body":"skip"}`)), "Doc", compute)); r != nil {
		t.Errorf("no value: %+v", r)
	}
}

func TestCompileReplan(t *testing.T) {
	d, err := decorators.CompileReplan(decorators.ReplanSpec{Key: "tools.lookup.replan", Tool: "lookup", TypeName: "Customer", When: `value.status == "blocked"`, Add: `{"customer": value.id}`, AddType: "Hold"})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := replanOf(t, decorators.ConditionalReplan(returning(artifact("crm.Customer", `{"id":3,"status":"blocked"}`)), d))
	if r == nil || r.Reason != "lookup replans based on result" || r.Add[0].Entry.TypeName != "Hold" || string(r.Add[0].Entry.JSON) != `{"customer":3}` {
		t.Errorf("replan %+v", r)
	}
	if r, _ := replanOf(t, decorators.ConditionalReplan(returning(artifact("crm.Customer", `{"id":1,"status":"ok"}`)), d)); r != nil {
		t.Errorf("no match: %+v", r)
	}
	always, err := decorators.CompileReplan(decorators.ReplanSpec{Tool: "lookup"})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := replanOf(t, decorators.ConditionalReplan(returning(tool.Text("x")), always)); r == nil || r.Reason != "lookup replans" {
		t.Errorf("always: %+v", r)
	}
	if _, err := decorators.CompileReplan(decorators.ReplanSpec{Key: "tools.t.replan", When: "("}); err == nil || !strings.HasPrefix(err.Error(), "tools.t.replan.when: ") {
		t.Errorf("bad when: %v", err)
	}
}
