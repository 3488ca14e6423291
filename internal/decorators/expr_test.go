package decorators

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// What a transform yields is bounded as it is written out: a 20-byte expression that
// repeats a 600 KB part of its artifact 200 times (120 MB of JSON) fails instead of
// building it, so that one request-level artifact_sinks transform cannot exhaust the
// orchestrator's memory.
func TestTransformOutputIsBounded(t *testing.T) {
	list := "[" + strings.Repeat("0,", 199) + "0]"
	a := tool.Entry{TypeName: "X", JSON: []byte(`{"s":"` + strings.Repeat("a", 600<<10) + `","l":` + list + `}`)}
	x, err := CompileTransform(`value.l.map(x, value.s)`)
	if err != nil {
		t.Fatal(err)
	}
	e, err := x.Apply(a, "")
	if err == nil && len(e.JSON) > 8<<20 {
		t.Fatalf("a %d-byte artifact transformed into %d bytes of JSON without error", len(a.JSON), len(e.JSON))
	}
}

// A transform keeps the artifact's numbers exact: JSON integers above 2^53 (ids) are
// ints, not doubles, through the identity transform and into a new object.
func TestTransformKeepsLargeIntegers(t *testing.T) {
	a := tool.Entry{TypeName: "Customer", JSON: []byte(`{"id":9007199254740993}`)}
	for _, src := range []string{`value`, `{"id": value.id}`} {
		x, err := CompileTransform(src)
		if err != nil {
			t.Fatal(err)
		}
		e, err := x.Apply(a, "")
		if err != nil || string(e.JSON) != `{"id":9007199254740993}` {
			t.Errorf("%s: %s %v, want the id unchanged", src, e.JSON, err)
		}
	}
}
