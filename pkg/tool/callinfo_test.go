package tool_test

import (
	"crypto/sha256"
	"encoding/hex"
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
		{tool.CallInfo{RunID: "run_1", LoopID: "loop_a", CallID: "call_1", ArgumentsDigest: "0123456789abcdef"}, "run_1/loop_a/call_1/0123456789abcdef"},
		{tool.CallInfo{RunID: "run_1", CallID: "call_1", ArgumentsDigest: "0123456789abcdef"}, "run_1/call_1/0123456789abcdef"},
		{tool.CallInfo{}, ""},
	} {
		if got := tt.info.IdempotencyKey(); got != tt.want {
			t.Errorf("%+v: key %q, want %q", tt.info, got, tt.want)
		}
	}
}

// TestArgumentsDigest pins the digest as docs/contract.md states it: the first 8 bytes of
// the SHA-256 of the name, a zero byte and the arguments, in lowercase hexadecimal.
func TestArgumentsDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("add\x00{\"a\":1}"))
	if got, want := tool.ArgumentsDigest("add", `{"a":1}`), hex.EncodeToString(sum[:8]); got != want {
		t.Errorf("digest %q, want %q", got, want)
	}
	if tool.ArgumentsDigest("ad", `d{"a":1}`) == tool.ArgumentsDigest("add", `{"a":1}`) {
		t.Error("the name and the arguments run together")
	}
}

// BenchmarkArgumentsDigest: the digest is taken at every call a loop sends.
func BenchmarkArgumentsDigest(b *testing.B) {
	args := `{"a":1234,"b":5678,"note":"the arguments of a usual call, about a hundred bytes long"}`
	b.ReportAllocs()
	for b.Loop() {
		_ = tool.ArgumentsDigest("add", args)
	}
}
