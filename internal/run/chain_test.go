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
