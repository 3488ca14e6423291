package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func reviewScript() scripted.Script {
	return scripted.Script{Name: "rv", Rules: []scripted.Rule{
		{Name: "done", When: scripted.When{Tool: "gate"}, Reply: scripted.Reply{Text: `gate said {{ result "gate" }}`}},
		{Name: "then", When: scripted.When{Tool: "wipe"}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "gate", Arguments: map[string]any{}}}}},
		{Name: "first", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "wipe", Arguments: map[string]any{}}}}},
	}}
}

func reviewGroup(release chan struct{}) worker.Group {
	gate := tool.New("gate", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		select {
		case <-release:
			return tool.Text("open"), nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}, tool.Idempotent())
	wipe := tool.New("wipe", "Wipes.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("wiped"), nil }, tool.RequiresApproval())
	return worker.Group{Role: "danger", Tools: []tool.Tool{gate, wipe}}
}

func describe(ev *toolpb.RunResponse) string {
	s := fmt.Sprintf("%T", ev.GetEvent())
	s = strings.TrimPrefix(s, "*toolpb.RunResponse_")
	if f := ev.GetToolCallFinished(); f != nil {
		s += "(" + f.GetTool() + ": " + f.GetContent() + ")"
	}
	if f := ev.GetFinalResult(); f != nil {
		s += "(" + f.GetText() + ")"
	}
	return fmt.Sprintf("%d:%s", ev.GetSequence(), s)
}

// A run that was approved, then stopped by a shutdown mid-call, resumed on a second
// orchestrator: what does WatchRun show?
func TestReplayAfterApprovalAndShutdown(t *testing.T) {
	ctx := testContext(t)
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })

	e1 := newEnv(t, envOptions{journal: j, script: reviewScript()})
	e1.startWorker("w-1", reviewGroup(make(chan struct{})))
	first, stop := context.WithCancel(ctx)
	var seen []string
	approved := false
	for ev, err := range e1.cl.Run(first, &toolpb.RunRequest{RunId: "rv-1", Prompt: "go", ToolGroups: []string{"danger"}, Detached: true}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, describe(ev))
		if a := ev.GetApprovalRequested(); a != nil && !approved {
			approved = true
			if err := e1.cl.ApproveToolCall(ctx, "rv-1", a.GetCallId(), "", true, "ok"); err != nil {
				t.Fatal(err)
			}
		}
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "gate" {
			break
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx) // SIGTERM past --shutdown-timeout: runs stop unfinished
	cancel()
	var afterShutdown []string
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	for ev, err := range e1.cl.Watch(wctx, "rv-1", 0) {
		_ = err
		if ev != nil {
			afterShutdown = append(afterShutdown, describe(ev))
		}
		if len(afterShutdown) > 30 || err != nil {
			break
		}
	}

	release := make(chan struct{})
	close(release)
	e2 := newEnv(t, envOptions{journal: j, script: reviewScript()})
	e2.startWorker("w-2", reviewGroup(release))
	n, err := e2.srv.Resume(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	var all []string
	var last *toolpb.RunResponse
	for ev, err := range e2.cl.Watch(ctx, "rv-1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, describe(ev))
		last = ev
	}
	snap, _ := e2.cl.GetRun(ctx, "rv-1")
	if snap.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("GetRun after the resume: %v %q, want SUCCEEDED", snap.GetState(), snap.GetFinalText())
	}
	if !strings.Contains(strings.Join(all, "\n"), "ToolCallFinished(gate: open)") {
		t.Errorf("the resumed run's gate call finished with \"open\", but no watcher ever sees its tool_call_finished event")
	}
	if last.GetFinalResult() == nil {
		t.Errorf("the watch of a run that succeeded (%v) ends without its final_result event", snap.GetState())
	}
	if t.Failed() {
		t.Logf("first life, seen by the client:\n  %s\njournal after the shutdown:\n  %s\nwhole watch after resume:\n  %s",
			strings.Join(seen, "\n  "), strings.Join(afterShutdown, "\n  "), strings.Join(all, "\n  "))
	}
}

// Same, with a tool that reports progress instead of one that needs approval.
func TestReplayAfterProgress(t *testing.T) {
	ctx := testContext(t)
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	group := func(release chan struct{}) worker.Group {
		g := reviewGroup(release)
		g.Tools[1] = tool.New("wipe", "Wipes.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			for _, s := range []string{"10%", "50%", "90%"} {
				tool.Progress(ctx, s)
			}
			return tool.Text("wiped"), nil
		}, tool.ReportsProgress())
		return g
	}
	e1 := newEnv(t, envOptions{journal: j, script: reviewScript()})
	e1.startWorker("w-1", group(make(chan struct{})))
	first, stop := context.WithCancel(ctx)
	var seen []string
	for ev, err := range e1.cl.Run(first, &toolpb.RunRequest{RunId: "rv-2", Prompt: "go", ToolGroups: []string{"danger"}, Detached: true}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, describe(ev))
		if s := ev.GetToolCallStarted(); s != nil && s.GetTool() == "gate" {
			break
		}
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx)
	cancel()
	release := make(chan struct{})
	close(release)
	e2 := newEnv(t, envOptions{journal: j, script: reviewScript()})
	e2.startWorker("w-2", group(release))
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	var all []string
	for ev, err := range e2.cl.Watch(ctx, "rv-2", 0) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, describe(ev))
	}
	if !strings.Contains(strings.Join(all, "\n"), "FinalResult") || !strings.Contains(strings.Join(all, "\n"), "ToolCallFinished(gate: open)") {
		t.Errorf("events of the resumed run are missing; first life:\n  %s\nwhole watch after resume:\n  %s", strings.Join(seen, "\n  "), strings.Join(all, "\n  "))
	}
}
