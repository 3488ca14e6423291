package run

import (
	"context"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
)

// The last event of a run a tool ended (here a configured replan of the built-in
// progress tool) goes out once the run's record says how it ended: an observer that asks
// for the run on that event sees it REPLAN_REQUESTED, not still running.
func TestOutcomeEventAfterTheRecord(t *testing.T) {
	cfg := config.Default()
	cfg.Tools = map[string]config.Tool{"progress": {Replan: &config.Replan{Reason: "plan again"}}}
	model, err := scripted.New(scripted.Script{Name: "r", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "progress", ArgumentsRaw: `{"status":"working"}`}}}},
		{Reply: scripted.Reply{Text: "unreachable"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := scriptedService(t, cfg, model)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen runlog.State
	res, err := s.Run(ctx, Request{ID: "r1", Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Groups: []string{"communication"}}, func(ev Event) {
		if _, ok := ev.(Replanned); ok {
			snap, err := s.Get("r1")
			if err != nil {
				t.Error(err)
			}
			seen = snap.State
		}
	})
	if err != nil || res.Outcome == nil || res.Outcome.Replan == nil {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if seen != runlog.StateReplanRequested {
		t.Errorf("on the replan event the run was %v, want %v", seen, runlog.StateReplanRequested)
	}
}
