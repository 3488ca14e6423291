package progressive_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/progressive"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// recordTools returns n tools of a typical size: a line of description and two
// parameters, one optional.
func recordTools(prefix string, n int) []tool.Tool {
	out := make([]tool.Tool, n)
	for i := range out {
		out[i] = tool.New(fmt.Sprintf("%s_%03d", prefix, i),
			fmt.Sprintf("Runs operation %d on one %s record and returns the record as JSON.", i, prefix),
			schema.Params(
				schema.String("record_id", "Identifier of the record to work on"),
				schema.Integer("limit", "Maximum number of entries to return").AsOptional(),
			),
			func(context.Context, string) (tool.Result, error) { return tool.Text("{}"), nil })
	}
	return out
}

// offeredWith is what a loop offers besides the facade: a few plain tools.
func offeredWith(f tool.Tool) []tool.Tool {
	return append(recordTools("misc", 9), f)
}

func BenchmarkUnfold(b *testing.B) {
	of := tool.Of("orders", "Operations on orders (100 tools). Call this tool to see them.", recordTools("orders", 100),
		tool.UsageNotes("Look a record up before you change it."))
	cats := make([]tool.Category, 5)
	for i, name := range []string{"contacts", "deals", "tasks", "notes", "reports"} {
		cats[i] = tool.Category{Name: name, Tools: recordTools(name, 20)}
	}
	byCategory := tool.ByCategory("crm", "CRM operations by category.", cats)

	for _, c := range []struct {
		name      string
		facade    tool.Tool
		input     string
		wantFirst string
		selected  int
	}{
		{"of-100", of, `{}`, "orders_000", 100},
		{"by-category", byCategory, `{"category":"deals"}`, "deals_000", 20},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			current := offeredWith(c.facade)
			u, err := progressive.Unfold(ctx, c.facade, c.input, current)
			if err != nil {
				b.Fatal(err)
			}
			facade := c.facade.Definition().Name
			got := toolNames(u.Add)
			want := []string{c.wantFirst, facade, facade + progressive.ContextSuffix}
			if len(u.Selected) != c.selected || len(got) != c.selected+2 || got[0] != want[0] || !slices.Equal(got[c.selected:], want[1:]) ||
				!slices.Equal(toolNames(u.Remove), []string{facade}) {
				b.Fatalf("Unfold: %d selected, add %v, remove %v", len(u.Selected), got, toolNames(u.Remove))
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = progressive.Unfold(ctx, c.facade, c.input, current)
			}
		})
	}
}

// BenchmarkEvaluate is the common case: the loop asks the strategy about a call of a
// tool that is not a facade, which changes nothing.
func BenchmarkEvaluate(b *testing.B) {
	b.Run("not-a-facade", func(b *testing.B) {
		ctx := context.Background()
		current := offeredWith(tool.Of("orders", "Operations on orders.", recordTools("orders", 100)))
		ic := loop.InjectionContext{
			Tool: current[0], Input: `{"record_id":"r-1042","limit":10}`, Result: tool.Text("{}"), Content: "{}",
			Iteration: 2, Current: current,
		}
		s := progressive.New()
		inj, err := s.Evaluate(ctx, ic)
		if err != nil || !inj.IsZero() {
			b.Fatalf("Evaluate of a plain tool = %+v, %v; want no change", inj, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			_, _ = s.Evaluate(ctx, ic)
		}
	})
}
