package tool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// CallInfo identifies one tool call: the run and the loop it belongs to, and the id the
// model gave it. The orchestrator puts it in the context of every call and sends it to
// the worker with the call, which puts it back into the tool function's context.
type CallInfo struct {
	RunID  string
	LoopID string
	CallID string
	// Iteration is the loop iteration whose model turn asked for the call (from 1); 0
	// outside a loop.
	Iteration int
	// ArgumentsDigest names what the model asked the call to do: ArgumentsDigest of the
	// tool's name and the arguments as the model gave them, which the orchestrator's loop
	// sets and pkg/worker reads back from the key it is sent. Empty for a call of no model
	// turn.
	ArgumentsDigest string
}

// IdempotencyKey names the logical call: the same key means the same call, however many
// times it is delivered. A model asked a step again (its first answer was not kept when
// the orchestrator stopped) may give a call of the new answer the id of a call of the
// first with other arguments: the arguments' digest at the key's end makes it another
// call, never answered with the first call's result.
func (c CallInfo) IdempotencyKey() string {
	if c.RunID == "" && c.CallID == "" {
		return ""
	}
	// One concatenation each: a call's key is made at every call it sends.
	switch {
	case c.LoopID == "" && c.ArgumentsDigest == "":
		return c.RunID + "/" + c.CallID
	case c.LoopID == "":
		return c.RunID + "/" + c.CallID + "/" + c.ArgumentsDigest
	case c.ArgumentsDigest == "":
		// A run's nested loops number their calls like the run's own loop does.
		return c.RunID + "/" + c.LoopID + "/" + c.CallID
	}
	return c.RunID + "/" + c.LoopID + "/" + c.CallID + "/" + c.ArgumentsDigest
}

// ArgumentsDigest is CallInfo.ArgumentsDigest for a call of tool name with arguments args (the
// JSON text as the model gave it): 16 lowercase hexadecimal digits, the first 8 bytes of
// the SHA-256 of the name, a zero byte and the arguments.
func ArgumentsDigest(name, args string) string {
	var buf [512]byte // on the stack for the usual call's arguments
	b := append(append(append(buf[:0], name...), 0), args...)
	sum := sha256.Sum256(b)
	var out [16]byte
	hex.Encode(out[:], sum[:8])
	return string(out[:])
}

// CallInfoFrom returns the call info in ctx, if any.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	switch info := ctx.Value(toolinternal.CallInfoKey{}).(type) {
	case CallInfo:
		return info, true
	case *CallInfo: // a call scope's, which the worker SDK builds
		return *info, true
	}
	return CallInfo{}, false
}
