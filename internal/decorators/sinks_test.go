package decorators_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// returning is a tool that returns res.
func returning(res tool.Result) *rawTool {
	return newRaw(func(context.Context, string) (tool.Result, error) { return res, nil })
}

func artifact(typeName, js string) tool.Result {
	return tool.ArtifactResult("content", tool.Artifact{TypeName: typeName, JSON: []byte(js)})
}

// items is what a list sink received, as "type json" strings, or "type media type
// <n> bytes" for a blob.
func items(l *decorators.ListSink) []string {
	var out []string
	for _, e := range l.Items() {
		if e.IsBlob() {
			out = append(out, fmt.Sprintf("%s %s %d bytes", e.TypeName, e.MediaType, len(e.Data)))
			continue
		}
		out = append(out, e.TypeName+" "+string(e.JSON))
	}
	return out
}

func mustCall(t *testing.T, ctx context.Context, tl tool.Tool) tool.Result {
	t.Helper()
	res, err := tl.Call(ctx, `{"q":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSinkingSelectsArtifacts(t *testing.T) {
	people := `[{"name":"Ann","age":30},{"name":"Bob","age":17},{"_typeName":"zoo.Animal","name":"Rex"}]`
	upper := func(e tool.Entry) (tool.Entry, error) {
		return tool.Entry{TypeName: "Name", JSON: []byte(strings.ToUpper(string(e.JSON)))}, nil
	}
	adult := func(e tool.Entry) (bool, error) { return strings.Contains(string(e.JSON), `"age":30`), nil }
	tests := []struct {
		name string
		res  tool.Result
		sel  decorators.Selector
		want []string
	}{
		{"a single artifact", artifact("crm.Customer", `{"id":1}`), decorators.Selector{}, []string{`crm.Customer {"id":1}`}},
		{"by simple type name", artifact("crm.Customer", `{"id":1}`), decorators.Selector{TypeName: "Customer"}, []string{`crm.Customer {"id":1}`}},
		{"by qualified type name", artifact("crm.Customer", `{"id":1}`), decorators.Selector{TypeName: "crm.Customer"}, []string{`crm.Customer {"id":1}`}},
		{"another type is not taken", artifact("crm.Customer", `{"id":1}`), decorators.Selector{TypeName: "Order"}, nil},
		{"a list element by element", artifact("[]people.Person", people), decorators.Selector{},
			[]string{`people.Person {"name":"Ann","age":30}`, `people.Person {"name":"Bob","age":17}`, `zoo.Animal {"_typeName":"zoo.Animal","name":"Rex"}`}},
		{"list elements by type", artifact("people.Person[]", people), decorators.Selector{TypeName: "Person"},
			[]string{`people.Person {"name":"Ann","age":30}`, `people.Person {"name":"Bob","age":17}`}},
		{"an element's own type name", artifact("list<people.Person>", people), decorators.Selector{TypeName: "Animal"}, []string{`zoo.Animal {"_typeName":"zoo.Animal","name":"Rex"}`}},
		{"an empty list", artifact("[]X", `[]`), decorators.Selector{}, nil},
		{"filter", artifact("[]Person", people), decorators.Selector{TypeName: "Person", Filter: adult}, []string{`Person {"name":"Ann","age":30}`}},
		{"filter before transform, which may change the type", artifact("[]Person", people), decorators.Selector{TypeName: "Person", Filter: adult, Transform: upper},
			[]string{`Name {"NAME":"ANN","AGE":30}`}},
		{"text carries nothing", tool.Text("hello"), decorators.Selector{}, nil},
		{"an error carries nothing", tool.Error("boom"), decorators.Selector{}, nil},
		{"a blob is one entry", tool.ArtifactResult("png", tool.Artifact{TypeName: "Image", Data: []byte{1}, MediaType: "image/png"}), decorators.Selector{}, []string{"Image image/png 1 bytes"}},
		{"a blob by type name", tool.ArtifactResult("png", tool.Artifact{TypeName: "chart.Png", Data: []byte{1, 2}, MediaType: "image/png"}), decorators.Selector{TypeName: "Png"}, []string{"chart.Png image/png 2 bytes"}},
		{"a blob of another type is not taken", tool.ArtifactResult("png", tool.Artifact{TypeName: "chart.Png", Data: []byte{1}, MediaType: "image/png"}), decorators.Selector{TypeName: "Pdf"}, nil},
		{"a blob without a media type", tool.ArtifactResult("bin", tool.Artifact{TypeName: "Dump", Data: []byte{1}}), decorators.Selector{}, []string{"Dump application/octet-stream 1 bytes"}},
		{"a JSON-only selector takes no blob", tool.ArtifactResult("png", tool.Artifact{TypeName: "Image", Data: []byte{1}, MediaType: "image/png"}), decorators.Selector{JSONOnly: true}, nil},
		{"a Go filter sees a blob", tool.ArtifactResult("png", tool.Artifact{TypeName: "Image", Data: []byte{1, 2, 3}, MediaType: "image/png"}),
			decorators.Selector{Filter: func(e tool.Entry) (bool, error) { return e.MediaType == "image/png" && len(e.Data) == 3, nil }}, []string{"Image image/png 3 bytes"}},
		{"an in-process value", tool.ArtifactResult("v", tool.Artifact{TypeName: "Point", Value: struct{ X int }{3}}), decorators.Selector{}, []string{`Point {"X":3}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := &decorators.ListSink{}
			inner := returning(tt.res)
			w := decorators.SinkArtifacts(inner, tt.sel, list, "list")
			got := mustCall(t, context.Background(), w)
			if diff := cmp.Diff(tt.res, got); diff != "" {
				t.Errorf("the result changed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, items(list)); diff != "" {
				t.Errorf("sunk (-want +got):\n%s", diff)
			}
			if w.Definition().Name != "lookup" || !cmp.Equal(w.Metadata(), inner.Metadata()) || tool.Unwrap(w) != tool.Tool(inner) {
				t.Errorf("the wrapper does not forward definition, metadata and delegate")
			}
		})
	}
}

func TestSinkingPropagatesSignalsAndReportsFailures(t *testing.T) {
	replan := tool.ReplanRequested{Reason: "again"}
	w := decorators.SinkArtifacts(newRaw(func(context.Context, string) (tool.Result, error) { return tool.Result{}, replan }), decorators.Selector{}, &decorators.ListSink{}, "list")
	if _, err := w.Call(context.Background(), "{}"); err == nil || err.Error() != replan.Error() {
		t.Errorf("signal: %v", err)
	}
	failing := decorators.SinkFunc(func(context.Context, decorators.Capture) error { return errors.New("disk full") })
	res := mustCall(t, context.Background(), decorators.SinkArtifacts(returning(artifact("X", `1`)), decorators.Selector{}, failing, "archive"))
	if !res.IsError() || res.Content != "tool 'lookup' ran, but its artifact could not go to the archive sink: disk full. Its result was: content" {
		t.Errorf("failing sink: %q", res.Content)
	}
	badTransform := decorators.Selector{Transform: func(tool.Entry) (tool.Entry, error) { return tool.Entry{}, errors.New("no such field") }}
	res = mustCall(t, context.Background(), decorators.SinkArtifacts(returning(artifact("X", `1`)), badTransform, &decorators.ListSink{}, "list"))
	if !res.IsError() || !strings.Contains(res.Content, "the transform failed: no such field") {
		t.Errorf("failing transform: %q", res.Content)
	}
}

func TestListAndCompositeSinks(t *testing.T) {
	a, b := &decorators.ListSink{}, &decorators.ListSink{}
	w := decorators.SinkArtifacts(returning(artifact("[]N", `[1,2]`)), decorators.Selector{}, decorators.Composite(a, b), "both")
	mustCall(t, context.Background(), w)
	if diff := cmp.Diff([]string{"N 1", "N 2"}, items(a)); diff != "" {
		t.Errorf("first sink (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(items(a), items(b)); diff != "" {
		t.Errorf("second sink differs:\n%s", diff)
	}
	got := a.Items()
	got[0].TypeName = "changed"
	if a.Items()[0].TypeName != "N" {
		t.Error("Items returned the sink's own slice")
	}
	if err := decorators.Composite().Accept(context.Background(), decorators.Capture{}); err != nil {
		t.Errorf("empty composite: %v", err)
	}
}

func TestBlackboardSinkAndPublishVariants(t *testing.T) {
	res := artifact("[]crm.Customer", `[{"id":1},{"id":2}]`)
	// Without a run, the blackboard sink fails the call with a message the model reads.
	out := mustCall(t, context.Background(), decorators.PublishToBlackboard(returning(res)))
	if !out.IsError() || !strings.Contains(out.Content, "no run blackboard is available") {
		t.Errorf("without a run: %q", out.Content)
	}
	for _, tt := range []struct {
		name string
		wrap func(tool.Tool) tool.Tool
		want int
	}{
		{"publishToBlackboard", decorators.PublishToBlackboard, 2},
		{"publishToBlackboard(type)", func(t tool.Tool) tool.Tool { return decorators.PublishTypeToBlackboard(t, "Customer") }, 2},
		{"publishToBlackboard(other type)", func(t tool.Tool) tool.Tool { return decorators.PublishTypeToBlackboard(t, "Order") }, 0},
		{"publishToBlackboard(type, filter, transform)", func(t tool.Tool) tool.Tool {
			return decorators.PublishSelectedToBlackboard(t, decorators.Selector{TypeName: "Customer",
				Filter: func(e tool.Entry) (bool, error) { return string(e.JSON) == `{"id":2}`, nil },
				Transform: func(e tool.Entry) (tool.Entry, error) {
					return tool.Entry{TypeName: "CustomerRef", JSON: []byte(`2`)}, nil
				}})
		}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := process.New("run", process.Limits{}, process.Bounds{}, nil)
			ctx := toolcall.WithBlackboard(process.NewContext(context.Background(), p), p.Board(process.Origin{Tool: "lookup"}))
			if r := mustCall(t, ctx, tt.wrap(returning(res))); r.IsError() {
				t.Fatal(r.Content)
			}
			if n := len(p.Snapshot().Blackboard.Entries); n != tt.want {
				t.Errorf("%d entries on the blackboard, want %d", n, tt.want)
			}
		})
	}
}

func TestTrackAssets(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	ctx := process.NewContext(context.Background(), p)
	// Only artifacts of the type, lists unwrapped, the filter after the type check.
	res := artifact("[]Doc", `[{"_typeName":"Report","id":1},{"_typeName":"Note","id":2},{"_typeName":"Report","id":3}]`)
	sel := decorators.Selector{TypeName: "Report", Filter: func(e tool.Entry) (bool, error) {
		if !tool.SatisfiesType(e, "Report") {
			t.Errorf("the filter saw %s, which is not a Report", e.JSON)
		}
		return !strings.Contains(string(e.JSON), `"id":3`), nil
	}}
	mustCall(t, ctx, decorators.TrackAssets(returning(res), sel))
	mustCall(t, ctx, decorators.TrackAssets(returning(tool.Text("no artifact")), decorators.Selector{}))
	assets := p.Snapshot().Assets
	if len(assets) != 1 || string(assets[0].Entry.JSON) != `{"_typeName":"Report","id":1}` || assets[0].Tool != "lookup" {
		t.Errorf("assets %+v", assets)
	}
	out := mustCall(t, context.Background(), decorators.TrackAssets(returning(res), decorators.Selector{}))
	if !out.IsError() || !strings.Contains(out.Content, "no run is available to keep the asset") {
		t.Errorf("without a run: %q", out.Content)
	}
}

func TestCELExpressions(t *testing.T) {
	when, err := decorators.CompilePredicate(`value.age >= 18 && type_name == "Person"`)
	if err != nil {
		t.Fatal(err)
	}
	for js, want := range map[string]bool{`{"age":30}`: true, `{"age":3}`: false} {
		if got, err := when.Match(tool.Entry{TypeName: "Person", JSON: []byte(js)}); err != nil || got != want {
			t.Errorf("Match(%s) = %v, %v", js, got, err)
		}
	}
	if _, err := when.Match(tool.Entry{TypeName: "Person", JSON: []byte(`{"name":"x"}`)}); err == nil || !strings.Contains(err.Error(), "no such key") {
		t.Errorf("missing key: %v", err)
	}
	tr, err := decorators.CompileTransform(`{"who": value.name, "tags": [type_name]}`)
	if err != nil {
		t.Fatal(err)
	}
	e, err := tr.Apply(tool.Entry{TypeName: "Person", JSON: []byte(`{"name":"Ann"}`)}, "Ref")
	if err != nil || e.TypeName != "Ref" || string(e.JSON) != `{"tags":["Person"],"who":"Ann"}` {
		t.Errorf("Apply = %s %s, %v", e.TypeName, e.JSON, err)
	}
	for src, want := range map[string]string{
		`value.`:     "invalid CEL expression",
		`"a string"`: "yields string, not bool",
	} {
		if _, err := decorators.CompilePredicate(src); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CompilePredicate(%q) = %v, want %q", src, err, want)
		}
	}
	if _, err := decorators.CompilePredicate(strings.Repeat("1", decorators.MaxExpressionBytes+1)); err == nil {
		t.Error("an oversized expression compiled")
	}
}

func TestCompileRuleErrorsNameTheKey(t *testing.T) {
	for _, tt := range []struct {
		spec decorators.RuleSpec
		want string
	}{
		{decorators.RuleSpec{Key: "k", Sinks: []string{"blackboard", "archive"}}, `k.sinks[1]: unknown sink "archive" (known sinks: blackboard, assets, mine)`},
		{decorators.RuleSpec{Key: "k"}, "k.sinks: is empty"},
		{decorators.RuleSpec{Key: "k", Sinks: []string{"blackboard"}, FilterSpec: decorators.FilterSpec{When: "1 +"}}, "k.when: invalid CEL expression"},
		{decorators.RuleSpec{Key: "k", Sinks: []string{"blackboard"}, FilterSpec: decorators.FilterSpec{Transform: "}"}}, "k.transform: invalid CEL expression"},
		{decorators.RuleSpec{Key: "k", Sinks: []string{"blackboard"}, FilterSpec: decorators.FilterSpec{TransformType: "X"}}, "k.transform_type: is set without a transform"},
	} {
		_, err := decorators.CompileRule(tt.spec, map[string]decorators.Sink{"mine": &decorators.ListSink{}})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("CompileRule(%+v) = %v, want %q", tt.spec, err, tt.want)
		}
	}
}

func TestOutputBound(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes
	res := mustCall(t, context.Background(), decorators.OutputBound(decorators.Bounds{MaxTextBytes: 1024})(returning(tool.Text(long))))
	if len(res.Content) > 1024 || !strings.Contains(res.Content, "\n[truncated: the tool returned 2000 bytes; only the first ") {
		t.Errorf("truncated to %d bytes: %q", len(res.Content), res.Content[len(res.Content)-80:])
	}
	big := artifact("X", `"`+strings.Repeat("a", 2000)+`"`)
	res = mustCall(t, context.Background(), decorators.OutputBound(decorators.Bounds{MaxArtifactBytes: 1024})(returning(big)))
	if !res.IsError() || res.Content != "tool 'lookup' returned an artifact of 2002 bytes, over the 1024 bytes an artifact may have; it was dropped. Call it again in a way that returns less." {
		t.Errorf("oversized artifact: %q", res.Content)
	}
	small := artifact("X", `1`)
	if res := mustCall(t, context.Background(), decorators.OutputBound(decorators.Bounds{MaxTextBytes: 1024, MaxArtifactBytes: 1024})(returning(small))); res.IsError() {
		t.Errorf("small artifact: %q", res.Content)
	}
}

type recorder struct {
	calls    []decorators.Call
	captures []string
}

func (r *recorder) Called(c decorators.Call)                   { r.calls = append(r.calls, c) }
func (r *recorder) Captured(sink string, c decorators.Capture) { r.captures = append(r.captures, sink) }

func TestEventPublishing(t *testing.T) {
	rec := &recorder{}
	ctx := decorators.WithListener(context.Background(), rec)
	mustCall(t, ctx, decorators.EventPublishing(returning(tool.Text("ok"))))
	replan := tool.ReplanRequested{Reason: "r"}
	_, err := decorators.EventPublishing(newRaw(func(context.Context, string) (tool.Result, error) { return tool.Result{}, replan })).Call(ctx, "{}")
	if err == nil {
		t.Fatal("the signal was lost")
	}
	if len(rec.calls) != 2 || rec.calls[0].Result.Content != "ok" || rec.calls[0].Input != `{"q":"x"}` || rec.calls[0].Duration < 0 || rec.calls[1].Signal == nil {
		t.Errorf("calls %+v", rec.calls)
	}
	// No double wrapping is needed: without a listener nothing is reported and nothing fails.
	mustCall(t, context.Background(), decorators.EventPublishing(returning(tool.Text("ok"))))
}
