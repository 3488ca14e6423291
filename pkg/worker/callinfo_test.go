package worker

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestCallInfoReadsTheKeysDigest: a tool's call info holds the digest of its arguments
// read from the key the orchestrator sent, so that IdempotencyKey there is that key; a
// key that is not the call's own ids with a digest after it leaves none.
func TestCallInfoReadsTheKeysDigest(t *testing.T) {
	for _, tt := range []struct {
		key, want string
	}{
		{"acme/run_1/loop_a/call_1/0123456789abcdef", "0123456789abcdef"},
		{"acme/run_1/loop_a/call_1", ""},
		{"acme/run_1/loop_a/call_2/0123456789abcdef", ""},
		{"acme/run_1/loop_a/call_1/0123", ""},
		{"acme/run_1/loop_a/call_1/0123456789ABCDEF", ""},
		{"acme/run_1/loop_a/call_1/x/0123456789abcde", ""},
	} {
		req := &toolpb.InvokeRequest{RunId: "acme/run_1", LoopId: "loop_a", CallId: "call_1", IdempotencyKey: tt.key}
		got := callInfo(req)
		if got.ArgumentsDigest != tt.want {
			t.Errorf("key %q: arguments %q, want %q", tt.key, got.ArgumentsDigest, tt.want)
		}
		if tt.want != "" && got.IdempotencyKey() != tt.key {
			t.Errorf("key %q: the call's key became %q", tt.key, got.IdempotencyKey())
		}
	}
	if got := callInfo(&toolpb.InvokeRequest{IdempotencyKey: "/0123456789abcdef"}); got.ArgumentsDigest != "" {
		t.Errorf("a call of no run took arguments %q from a key", got.ArgumentsDigest)
	}
}
