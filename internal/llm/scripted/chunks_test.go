package scripted

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/llm"
)

// TestChunksStreamTheArgumentsWhole: a reply's tool-call deltas carry each call's
// arguments in pieces of at most 16 bytes, never inside a UTF-8 sequence, that join to
// the arguments exactly; short arguments come whole.
func TestChunksStreamTheArgumentsWhole(t *testing.T) {
	for _, args := range []string{"", "{}", `{"a":1}`, `{"text":"héllo wörld, ünïcödé ✓✓✓ and more text to cut"}`, strings.Repeat(`{"k":"v"}`, 40)} {
		a := &answer{calls: []llm.ToolCall{{ID: "c1", Name: "t", Arguments: args}, {ID: "c2", Name: "u", Arguments: args}}}
		joined := map[int]string{}
		for _, c := range a.chunks() {
			d := c.ToolCallDelta
			if d == nil {
				continue
			}
			if len(d.Arguments) > 16 && len(args) > 4 || !utf8.ValidString(d.Arguments) {
				t.Errorf("a piece %q of %q", d.Arguments, args)
			}
			joined[d.Index] += d.Arguments
		}
		if joined[0] != args || joined[1] != args {
			t.Errorf("the pieces of %q join to %q and %q", args, joined[0], joined[1])
		}
	}
}
