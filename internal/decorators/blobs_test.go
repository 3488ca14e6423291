package decorators_test

import (
	"bytes"
	"context"
	"mime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

var pngBytes = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0}

func pngResult() tool.Result {
	return tool.ArtifactResult("Rendered the chart", tool.Artifact{TypeName: "chart.Png", Data: pngBytes, MediaType: "image/png"})
}

// A blob artifact goes to the blackboard sink, the assets and a program's own sink, its
// bytes whole; a rule with a CEL predicate or transform takes none (CEL sees JSON only).
func TestBlobArtifactsReachSinks(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	ctx := toolcall.WithBlackboard(process.NewContext(context.Background(), p), p.Board(process.Origin{Tool: "lookup"}))
	var custom []decorators.Capture
	mine := decorators.SinkFunc(func(_ context.Context, c decorators.Capture) error { custom = append(custom, c); return nil })
	list := &decorators.ListSink{}
	rule, err := decorators.CompileRule(decorators.RuleSpec{Key: "k", FilterSpec: decorators.FilterSpec{TypeName: "Png"}, Sinks: []string{"blackboard", "mine", "list"}},
		map[string]decorators.Sink{"mine": mine, "list": list})
	if err != nil {
		t.Fatal(err)
	}
	withWhen, err := decorators.CompileRule(decorators.RuleSpec{Key: "w", FilterSpec: decorators.FilterSpec{When: "true"}, Sinks: []string{"list"}},
		map[string]decorators.Sink{"list": list})
	if err != nil {
		t.Fatal(err)
	}
	withTransform, err := decorators.CompileRule(decorators.RuleSpec{Key: "t", FilterSpec: decorators.FilterSpec{Transform: "1"}, Sinks: []string{"list"}},
		map[string]decorators.Sink{"list": list})
	if err != nil {
		t.Fatal(err)
	}
	c := &decorators.Chain{Sinks: []decorators.Rule{rule, withWhen, withTransform}, Assets: []decorators.Rule{rule}}
	res := mustCall(t, ctx, c.Decorate(returning(pngResult())))
	if diff := cmp.Diff(pngResult(), res); diff != "" {
		t.Fatalf("the result changed (-want +got):\n%s", diff)
	}
	want := tool.Entry{TypeName: "chart.Png", Data: pngBytes, MediaType: "image/png"}
	st := p.Snapshot()
	if len(st.Blackboard.Entries) != 1 || !cmp.Equal(want, st.Blackboard.Entries[0]) || st.Blackboard.Bytes != len(pngBytes) {
		t.Errorf("blackboard %+v (%d bytes)", st.Blackboard.Entries, st.Blackboard.Bytes)
	}
	if len(st.Assets) != 1 || !cmp.Equal(want, st.Assets[0].Entry) || st.AssetBytes != len(pngBytes) || st.Assets[0].Tool != "lookup" {
		t.Errorf("assets %+v (%d bytes)", st.Assets, st.AssetBytes)
	}
	if len(custom) != 1 || !cmp.Equal(want, custom[0].Entry) || custom[0].Tool != "lookup" {
		t.Errorf("the program's sink got %+v", custom)
	}
	if diff := cmp.Diff([]tool.Entry{want}, list.Items()); diff != "" {
		t.Errorf("the list sink, whose CEL rules take no blob (-want +got):\n%s", diff)
	}
	// A JSON artifact still reaches the CEL rules.
	list2 := &decorators.ListSink{}
	r2, err := decorators.CompileRule(decorators.RuleSpec{Key: "w", FilterSpec: decorators.FilterSpec{When: "value > 1"}, Sinks: []string{"list"}}, map[string]decorators.Sink{"list": list2})
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, ctx, (&decorators.Chain{Sinks: []decorators.Rule{r2}}).Decorate(returning(artifact("N", `2`))))
	if diff := cmp.Diff([]string{"N 2"}, items(list2)); diff != "" {
		t.Errorf("a JSON artifact under a CEL rule (-want +got):\n%s", diff)
	}
}

// A blob with a media type the blackboard refuses turns the call into an error that
// names the sink and the problem.
func TestBlobWithABadMediaType(t *testing.T) {
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	ctx := toolcall.WithBlackboard(process.NewContext(context.Background(), p), p.Board(process.Origin{Tool: "lookup"}))
	bad := tool.ArtifactResult("done", tool.Artifact{TypeName: "chart.Png", Data: pngBytes, MediaType: "png"})
	res := mustCall(t, ctx, decorators.PublishToBlackboard(returning(bad)))
	want := `tool 'lookup' ran, but its artifact could not go to the blackboard sink: blackboard object of type "chart.Png": the media type "png" is not of the form type/subtype. Its result was: done`
	if !res.IsError() || res.Content != want {
		t.Errorf("got %q\nwant %q", res.Content, want)
	}
	res = mustCall(t, ctx, decorators.TrackAssets(returning(bad), decorators.Selector{}))
	if !res.IsError() || !strings.Contains(res.Content, `could not go to the assets sink: asset of type "chart.Png": the media type "png" is not of the form type/subtype`) {
		t.Errorf("assets: %q", res.Content)
	}
}

// A list of values some of which are blobs is a multipart/mixed blob, which Elements
// reads back element by element, each with its type name and media type; a list of
// JSON values stays a JSON array.
func TestListArtifact(t *testing.T) {
	entries := []tool.Entry{
		{TypeName: "chart.Png", Data: pngBytes, MediaType: "image/png"},
		{TypeName: "crm.Customer", JSON: []byte(`{"id":1}`)},
		{TypeName: "odd\r\nX-Injected: 1 ✓", Data: []byte("--toolmesh-\r\n"), MediaType: "text/plain; charset=utf-8"},
		{TypeName: "Empty", Data: []byte{}, MediaType: "application/pdf"},
	}
	a := decorators.ListArtifact(entries)
	mt, params, err := mime.ParseMediaType(a.MediaType)
	if a.TypeName != "[]any" || err != nil || mt != "multipart/mixed" || params["boundary"] == "" || a.JSON != nil {
		t.Fatalf("list artifact %s %q, %v", a.TypeName, a.MediaType, err)
	}
	if again := decorators.ListArtifact(entries); !bytes.Equal(again.Data, a.Data) || again.MediaType != a.MediaType {
		t.Error("the same entries made different bytes")
	}
	if diff := cmp.Diff(entries, decorators.Elements(&a), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Elements (-want +got):\n%s", diff)
	}
	same := decorators.ListArtifact([]tool.Entry{entries[0], entries[0]})
	if same.TypeName != "[]chart.Png" || len(decorators.Elements(&same)) != 2 {
		t.Errorf("two blobs of one type: %s, %d elements", same.TypeName, len(decorators.Elements(&same)))
	}
	js := decorators.ListArtifact([]tool.Entry{entries[1], {TypeName: "crm.Customer", JSON: []byte(`{"id":2}`)}})
	if js.TypeName != "[]crm.Customer" || string(js.JSON) != `[{"id":1},{"id":2}]` || js.Data != nil {
		t.Errorf("a JSON list: %+v", js)
	}

	// A multipart blob that is no list, or does not read, is one blob.
	notList := tool.Artifact{TypeName: "Mail", Data: a.Data, MediaType: a.MediaType}
	broken := tool.Artifact{TypeName: "[]any", Data: a.Data[:len(a.Data)/2], MediaType: a.MediaType}
	for _, x := range []tool.Artifact{notList, broken} {
		if got := decorators.Elements(&x); len(got) != 1 || got[0].TypeName != x.TypeName || !bytes.Equal(got[0].Data, x.Data) {
			t.Errorf("%s: %d elements", x.TypeName, len(got))
		}
	}
	// A part without headers has the list's element type and DefaultMediaType.
	plain := tool.Artifact{TypeName: "[]Scan", MediaType: "multipart/mixed; boundary=b", Data: []byte("--b\r\n\r\nraw\r\n--b--\r\n")}
	if diff := cmp.Diff([]tool.Entry{{TypeName: "Scan", Data: []byte("raw"), MediaType: decorators.DefaultMediaType}}, decorators.Elements(&plain)); diff != "" {
		t.Errorf("a bare part (-want +got):\n%s", diff)
	}
}
