package compose

import (
	"log/slog"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/mcp"
)

// TestMCPFilterAllMustKeep: an MCP group keeps a tool only when its include and exclude
// globs, its CEL filter and the program's predicate all keep it; a CEL filter that fails
// on a tool leaves it out.
func TestMCPFilterAllMustKeep(t *testing.T) {
	f, err := mcpFilter(&config.GroupMCP{Include: []string{"get_*", "list_*"}, Exclude: []string{"get_secret"},
		Filter: `!annotations.?destructive.orValue(true)`, ExcludeWhen: `description.contains("internal") || annotations.?open_world.orValue(false)`},
		func(tl mcp.ToolInfo) bool { return tl.Name != "list_all" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	safe := map[string]any{"destructive": false}
	for _, tc := range []struct {
		tool mcp.ToolInfo
		keep bool
	}{
		{mcp.ToolInfo{Name: "get_user", Annotations: safe}, true},
		{mcp.ToolInfo{Name: "list_users", Annotations: safe}, true},
		{mcp.ToolInfo{Name: "delete_user", Annotations: safe}, false},                             // no include matches
		{mcp.ToolInfo{Name: "get_secret", Annotations: safe}, false},                              // excluded
		{mcp.ToolInfo{Name: "get_drop", Annotations: map[string]any{"destructive": true}}, false}, // the CEL filter
		{mcp.ToolInfo{Name: "get_unknown", Annotations: map[string]any{}}, false},                 // no hint: not known safe
		{mcp.ToolInfo{Name: "list_all", Annotations: safe}, false},                                // the program's predicate
		{mcp.ToolInfo{Name: "get_audit", Description: "internal audit log", Annotations: safe}, false},
		{mcp.ToolInfo{Name: "get_web", Annotations: map[string]any{"destructive": false, "open_world": true}}, false},
		{mcp.ToolInfo{Name: "get_odd", Annotations: map[string]any{"destructive": false, "open_world": "yes"}}, false}, // exclude_when fails: left out
	} {
		if got := f(tc.tool); got != tc.keep {
			t.Errorf("%s: kept %v, want %v", tc.tool.Name, got, tc.keep)
		}
	}
	if _, err := mcpFilter(&config.GroupMCP{Filter: `name +`}, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a filter that does not compile was accepted")
	}
	if _, err := mcpFilter(&config.GroupMCP{ExcludeWhen: `1`}, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("an exclude_when that is not a bool was accepted")
	}
}
