package agentic

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A simple agentic tool captures its sub-tools' blobs as it does JSON values: one blob is
// its artifact; several artifacts among which blobs are a multipart/mixed list, which
// reads back element by element.
func TestSimpleCapturesBlobs(t *testing.T) {
	png := []byte{0x89, 'P', 'N', 'G', 0, 7}
	cat := &catalog{}
	cat.add("chart", tool.ArtifactResult("rendered", tool.Artifact{TypeName: "chart.Png", Data: png, MediaType: "image/png"}))
	cat.add("lookup", tool.ArtifactResult("found", tool.Artifact{TypeName: "City", JSON: []byte(`{"name":"Oslo"}`)}))
	n := newNester(t,
		scripted.Rule{When: scripted.When{User: `"one"`, Turn: 1}, Reply: call("chart")},
		scripted.Rule{When: scripted.When{User: `"many"`, Turn: 1}, Reply: call("chart")},
		scripted.Rule{When: scripted.When{User: `"many"`, Turn: 2}, Reply: call("lookup")},
		scripted.Rule{Reply: scripted.Reply{Text: "done"}},
	)
	at := compileOne(t, cat, Spec{Name: "report", Description: "Report.", Tools: []string{"chart", "lookup"}})
	ctx := WithNester(ctxT(t), n)

	res, err := at.Call(ctx, `"one"`)
	if err != nil {
		t.Fatal(err)
	}
	want := &tool.Artifact{TypeName: "chart.Png", Data: png, MediaType: "image/png"}
	if diff := cmp.Diff(want, res.Artifact); diff != "" || res.Kind != tool.KindArtifact {
		t.Errorf("one blob (-want +got):\n%s", diff)
	}

	res, err = at.Call(ctx, `"many"`)
	if err != nil {
		t.Fatal(err)
	}
	a := res.Artifact
	if a == nil || a.TypeName != "[]any" || !bytes.HasPrefix([]byte(a.MediaType), []byte("multipart/mixed;")) || a.JSON != nil {
		t.Fatalf("several: %+v", a)
	}
	elems := []tool.Entry{{TypeName: "chart.Png", Data: png, MediaType: "image/png"}, {TypeName: "City", JSON: []byte(`{"name":"Oslo"}`)}}
	if diff := cmp.Diff(elems, decorators.Elements(a), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the list's elements (-want +got):\n%s", diff)
	}
}

// A playbook's artifact_type lock opens on a blob of that type.
func TestPlaybookUnlocksOnABlob(t *testing.T) {
	cat := &catalog{}
	cat.add("chart", tool.ArtifactResult("rendered", tool.Artifact{TypeName: "chart.Png", Data: []byte{1}, MediaType: "image/png"}))
	cat.add("publish", tool.Text("published"))
	n := newNester(t,
		turn(1, call("publish")),
		turn(2, call("chart")),
		turn(3, call("publish")),
		scripted.Rule{Reply: scripted.Reply{Text: "{{ results }}"}},
	)
	at := compileOne(t, cat, Spec{Name: "p", Description: "P.", Kind: KindPlaybook, Tools: []string{"chart"},
		Locks: []Lock{{Tool: "publish", ArtifactType: "Png"}}})
	res, err := at.Call(WithNester(ctxT(t), n), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if cat.called() != "chart,publish" || res.Artifact == nil || res.Artifact.MediaType != "image/png" {
		t.Errorf("calls %s, result %+v", cat.called(), res)
	}
}
