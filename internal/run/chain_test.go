package run

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/config"
)

// tools.<name>.replan.add_type without add is refused like transform_type without
// transform, naming the key.
func TestReplanAddTypeWithoutAdd(t *testing.T) {
	cfg := config.Default()
	cfg.Tools = map[string]config.Tool{"find": {Replan: &config.Replan{Type: "Customer", AddType: "Hold"}}}
	_, err := compileChain(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "tools.find.replan.add_type") {
		t.Errorf("compileChain: %v, want an error naming tools.find.replan.add_type", err)
	}
}

// A config agentic tool that is wrong in itself is refused when the service starts,
// naming the key.
func TestConfigAgenticRefused(t *testing.T) {
	for _, tc := range []struct {
		tool config.AgenticTool
		key  string
	}{
		{config.AgenticTool{Kind: "swarm", Description: "X.", Tools: []string{"a"}}, "agentic_tools.x.kind"},
		{config.AgenticTool{Kind: "state_machine", Description: "X.", StateMachine: &config.StateMachine{
			States: []config.MachineState{{Name: "A", Tools: []config.MachineStateTool{{Tool: "a"}}}}}}, "agentic_tools.x.state_machine.initial_state"},
		{config.AgenticTool{Kind: "playbook", Description: "X.", Tools: []string{"a"}, LockedTools: []config.LockedTool{{Tool: "b", When: "1 +"}}}, "agentic_tools.x.locked_tools[0].when"},
		{config.AgenticTool{Description: "X.", Tools: []string{"a"}, Parameters: map[string]any{"type": "objekt"}}, "agentic_tools.x.parameters"},
	} {
		cfg := config.Default()
		cfg.AgenticTools = map[string]config.AgenticTool{"x": tc.tool}
		_, err := configSpecs(cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
			t.Errorf("%+v: %v, want an error naming %s", tc.tool, err, tc.key)
		}
	}
}
