package tool_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestIdempotencyKey pins the key as docs/architecture.md and docs/contract.md describe
// it: run, loop and call id joined by '/', the run id of a tenant's run holding the
// tenant; none for a call that belongs to no run.
func TestIdempotencyKey(t *testing.T) {
	for _, tt := range []struct {
		info tool.CallInfo
		want string
	}{
		{tool.CallInfo{RunID: "acme/run_1", LoopID: "loop_a", CallID: "call_1"}, "acme/run_1/loop_a/call_1"},
		{tool.CallInfo{RunID: "run_1", LoopID: "loop_a", CallID: "call_1", Iteration: 3}, "run_1/loop_a/call_1"},
		{tool.CallInfo{}, ""},
	} {
		if got := tt.info.IdempotencyKey(); got != tt.want {
			t.Errorf("%+v: key %q, want %q", tt.info, got, tt.want)
		}
	}
}
