package tool_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

func TestFormatTree(t *testing.T) {
	leaf := func(name string) tool.Tool { return echoTool(name, "") }
	nested := group{Tool: leaf("files"), inner: []tool.Tool{
		leaf("read"),
		group{Tool: leaf("admin"), inner: []tool.Tool{leaf("chmod"), leaf("chown")}},
		leaf("write"),
	}}
	tests := []struct {
		name  string
		root  string
		tools []tool.Tool
		want  string
	}{
		{"no tools", "agent", nil, "agent has no tools"},
		{"one tool", "agent", []tool.Tool{leaf("a")}, "agent\n└── a"},
		{"flat", "agent", []tool.Tool{leaf("a"), leaf("b"), leaf("c")}, "agent\n├── a\n├── b\n└── c"},
		{
			"nested, last",
			"agent",
			[]tool.Tool{leaf("search"), nested},
			"agent\n" +
				"├── search\n" +
				"└── files (3 inner tools)\n" +
				"    ├── read\n" +
				"    ├── admin (2 inner tools)\n" +
				"    │   ├── chmod\n" +
				"    │   └── chown\n" +
				"    └── write",
		},
		{
			"nested, not last",
			"agent",
			[]tool.Tool{nested, leaf("search")},
			"agent\n" +
				"├── files (3 inner tools)\n" +
				"│   ├── read\n" +
				"│   ├── admin (2 inner tools)\n" +
				"│   │   ├── chmod\n" +
				"│   │   └── chown\n" +
				"│   └── write\n" +
				"└── search",
		},
		{
			"group under a wrapper shows the wrapper's name",
			"agent",
			[]tool.Tool{tool.WithName(group{Tool: leaf("g"), inner: []tool.Tool{leaf("x")}}, "renamed")},
			"agent\n└── renamed (1 inner tools)\n    └── x",
		},
		{"empty group", "agent", []tool.Tool{group{Tool: leaf("g")}}, "agent\n└── g (0 inner tools)"},
		{"output trimmed", "  agent  ", []tool.Tool{leaf("a")}, "agent  \n└── a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tool.FormatTree(tt.root, tt.tools); got != tt.want {
				t.Errorf("FormatTree:\n got %q\nwant %q\n%s", got, tt.want, got)
			}
		})
	}
}
