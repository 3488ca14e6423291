package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestEventWithTextThatIsNotUTF8: an event whose text is not UTF-8 (a layer of the
// program's own returned it) is journaled and sent with its bad bytes replaced; protocol
// buffers refuse to encode it, and it was dropped, never reaching the client.
func TestEventWithTextThatIsNotUTF8(t *testing.T) {
	b, ok := codec{}.AppendEvent(nil, run.MessageSent{LoopID: "l", CallID: "c", Text: "caf\xe9"})
	if !ok {
		t.Fatal("the event was dropped")
	}
	got := &toolpb.RunResponse{}
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if text := got.GetMessageToUser().GetText(); text != "caf\uFFFD" {
		t.Errorf("text = %q, want %q", text, "caf\uFFFD")
	}
}
