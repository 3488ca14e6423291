package decorators_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// A list artifact given as a Go value (Artifact.Value, no JSON; the in-process form
// pkg/tool documents) replans adding the list's JSON, which the blackboard accepts.
func TestReplanAlwaysWithValueListArtifact(t *testing.T) {
	res := tool.ArtifactResult("two", tool.Artifact{TypeName: "[]Customer", Value: []map[string]int{{"id": 1}, {"id": 2}}})
	r, _ := replanOf(t, decorators.ReplanAlways(returning(res)))
	if r == nil || len(r.Add) != 1 || string(r.Add[0].Entry.JSON) != `[{"id":1},{"id":2}]` {
		t.Fatalf("replan adds %+v, want the list's JSON added", r.Add)
	}
}

// A list artifact is one thing to replan on, whatever its length: ReplanWhen(t,
// "[]Customer", …) fires on a list of one as on a list of two.
func TestReplanWhenListOfOne(t *testing.T) {
	for _, js := range []string{`[{"id":1},{"id":2}]`, `[{"id":1}]`} {
		r, _ := replanOf(t, decorators.ReplanWhen(returning(artifact("[]Customer", js)), "[]Customer", nil))
		if r == nil {
			t.Errorf("%s of type []Customer did not replan under ReplanWhen(\"[]Customer\")", js)
		}
	}
}

// loop.max_artifact_bytes bounds an artifact given as a Go value (Artifact.Value) too:
// it is measured as the JSON it travels as.
func TestOutputBoundMeasuresValueArtifacts(t *testing.T) {
	big := make([]int, 100000) // ~200 KB of JSON
	res := tool.ArtifactResult("big", tool.Artifact{TypeName: "Ints", Value: big})
	got, err := decorators.OutputBound(decorators.Bounds{MaxArtifactBytes: 1024})(returning(res)).Call(t.Context(), `{}`)
	if err != nil || !got.IsError() {
		t.Errorf("a ~200 KB value artifact passed a 1 KiB bound: %v %v", got.Kind, err)
	}
}
