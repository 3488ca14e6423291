package run

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
)

// A config agent's output schema is checked when the service starts, naming the key; a
// good one reaches the spec as JSON.
func TestConfigAgentOutputSchema(t *testing.T) {
	for _, tc := range []struct {
		tool config.AgenticTool
		key  string
	}{
		{config.AgenticTool{Kind: "agent", Tools: []string{"a"}, OutputSchema: map[string]any{"type": "array"}}, "agentic_tools.x.output_schema"},
		{config.AgenticTool{Description: "X.", Tools: []string{"a"}, OutputSchema: map[string]any{"type": "object"}}, "agentic_tools.x.output_schema"},
		{config.AgenticTool{Kind: "agent", Tools: []string{"a"}, OutputType: "Quote"}, "agentic_tools.x.output_type"},
	} {
		cfg := config.Default()
		cfg.AgenticTools = map[string]config.AgenticTool{"x": tc.tool}
		if _, err := configSpecs(cfg); err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
			t.Errorf("%+v: %v, want an error naming %s", tc.tool, err, tc.key)
		}
	}
	cfg := config.Default()
	cfg.AgenticTools = map[string]config.AgenticTool{"x": {Kind: "agent", Tools: []string{"a"}, OutputType: "Quote",
		OutputSchema: map[string]any{"type": "object", "required": []any{"total"}}}}
	specs, err := configSpecs(cfg)
	if err != nil || specs[0].OutputSchema != `{"required":["total"],"type":"object"}` || specs[0].OutputType != "Quote" {
		t.Errorf("%+v, %v", specs, err)
	}
}
