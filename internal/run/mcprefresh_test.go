package run

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func plainTool(name, desc string) tool.Tool {
	return tool.New(name, desc, schema.Schema{}, func(context.Context, string) (tool.Result, error) { return tool.Text(name), nil })
}

// follow, for the cases the end-to-end tests do not reach: tools that leave, a changed
// description, an opened facade that leaves with its children.
func TestFollow(t *testing.T) {
	names := func(ts []tool.Tool) string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Definition().Name)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	a, b, c := plainTool("a", "A."), plainTool("b", "B."), plainTool("c", "C.")
	box := tool.Of("box", "A box.", []tool.Tool{b, c})
	for _, tc := range []struct {
		name           string
		old, fresh     []tool.Tool
		current        []tool.Tool
		added, removed string
	}{
		{"a tool leaves", []tool.Tool{a, b}, []tool.Tool{b}, []tool.Tool{a, b}, "", "a"},
		{"a description changes", []tool.Tool{a}, []tool.Tool{plainTool("a", "A, changed.")}, []tool.Tool{a}, "a", "a"},
		{"unchanged", []tool.Tool{a, box}, []tool.Tool{a, box}, []tool.Tool{a, box}, "", ""},
		{"an unopened facade leaves", []tool.Tool{a, box}, []tool.Tool{a}, []tool.Tool{a, box}, "", "box"},
		// opened: the guide tool takes the facade's name, the children are in the set
		{"an opened facade leaves", []tool.Tool{box}, nil, []tool.Tool{plainTool("box", "Guide."), b, c}, "", "b,box,c"},
		{"an opened facade loses a child", []tool.Tool{box}, []tool.Tool{tool.Of("box", "A box.", []tool.Tool{b})}, []tool.Tool{plainTool("box", "Guide."), b, c}, "", "c"},
		{"a tool the model no longer has is not added back", []tool.Tool{a}, []tool.Tool{a}, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inj loop.Injection
			follow(tc.old, tc.fresh, byName(tc.current), &inj)
			if got := names(inj.Add); got != tc.added {
				t.Errorf("added %q, want %q", got, tc.added)
			}
			if got := names(inj.Remove); got != tc.removed {
				t.Errorf("removed %q, want %q", got, tc.removed)
			}
		})
	}
}
