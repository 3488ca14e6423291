package main

import (
	"testing"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func TestDescribeToolsChanged(t *testing.T) {
	ev := &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolsChanged{ToolsChanged: &toolpb.ToolsChanged{
		Added: []string{"add", "math_context"}, Removed: []string{"math"}}}}
	if got, want := Describe(ev), "  ⇄ tools changed: +[add, math_context] -[math]"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
}
