package mcp

import (
	"context"
	"testing"
)

// The mark of Connect's context ends when Connect returns: the SDK keeps that context's
// values for the session, whose responses to the server's requests (a ping, an
// elicitation's answer, during a call of any tool) were then sent again too.
func TestReplayableUntilEnds(t *testing.T) {
	ctx, done := replayableUntil(context.Background())
	kept := context.WithoutCancel(ctx) // as the SDK keeps it
	if !isReplayable(ctx) || !isReplayable(kept) {
		t.Fatal("not replayable before done")
	}
	done()
	if isReplayable(ctx) || isReplayable(kept) {
		t.Error("still replayable after done")
	}
	if isReplayable(context.Background()) || !isReplayable(replayable(context.Background())) {
		t.Error("replayable marks the wrong contexts")
	}
}
