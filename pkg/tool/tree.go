package tool

import (
	"strconv"
	"strings"
)

// parent is a tool that holds inner tools, such as a progressive tool that unfolds
// into several.
type parent interface {
	Children() []Tool
}

// FormatTree draws tools as a tree for people (logs, debugging pages), as Embabel's
// formatToolTree does:
//
//	name
//	├── a
//	└── group (2 inner tools)
//	    ├── b
//	    └── c
//
// A tool with inner tools (a method Children() []Tool, found also beneath wrappers)
// shows how many it has and its inner tools below it. With no tools it returns
// "<name> has no tools".
func FormatTree(name string, tools []Tool) string {
	if len(tools) == 0 {
		return name + " has no tools"
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('\n')
	writeTree(&b, tools, "")
	return strings.TrimSpace(b.String())
}

func writeTree(b *strings.Builder, tools []Tool, indent string) {
	for i, t := range tools {
		last := i == len(tools)-1
		branch, childIndent := "├── ", indent+"│   "
		if last {
			branch, childIndent = "└── ", indent+"    "
		}
		b.WriteString(indent)
		b.WriteString(branch)
		b.WriteString(t.Definition().Name)
		if p, ok := As[parent](t); ok {
			children := p.Children()
			b.WriteString(" (" + strconv.Itoa(len(children)) + " inner tools)\n")
			writeTree(b, children, childIndent)
			continue
		}
		b.WriteByte('\n')
	}
}
