package run

import (
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// quietTools names the tools of ts (facades' children included) whose calls the run's
// event stream leaves out: the orchestrator's own progress and communicate tools, whose
// reports reach the client as progress and message events of their own. A worker's or an
// MCP server's tool of the same name is not one of them. The calls still count in the
// run's tool calls and the process's history.
func quietTools(ts []tool.Tool) map[string]bool {
	own, _ := process.GroupTools(process.GroupCommunication, nil)
	var quiet map[string]bool
	var walk func([]tool.Tool)
	walk = func(ts []tool.Tool) {
		for _, t := range ts {
			if f, ok := tool.As[tool.Facade](t); ok {
				walk(f.Children())
				continue
			}
			name := t.Definition().Name
			if _, served := groupOf(t); served {
				continue
			}
			if _, builtin := findTool(own, name); !builtin {
				continue
			}
			if quiet == nil {
				quiet = map[string]bool{}
			}
			quiet[name] = true
		}
	}
	walk(ts)
	return quiet
}

// quietCall reports whether ev is the start or the end of a call of a quiet tool.
func quietCall(quiet map[string]bool, ev loop.Event) bool {
	if len(quiet) == 0 {
		return false
	}
	switch x := ev.(type) {
	case loop.ToolCallStarted:
		return quiet[x.Call.Name]
	case loop.ToolCallFinished:
		return quiet[x.Call.Name]
	}
	return false
}
