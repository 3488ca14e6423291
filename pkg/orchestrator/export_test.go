package orchestrator

import "github.com/toolmesh/toolmesh/internal/toolcall"

// LayerForTest is l as the run service's pipeline holds it.
func LayerForTest(l Layer) toolcall.Layer { return l.placed().Layer }
