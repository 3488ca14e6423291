package server

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// TestOncePerLoopAcrossReplicas: a worker tool made one-shot with toolctx.OneShotPerLoop
// runs once per loop whichever replica a call goes to: the orchestrator answers the
// repeated calls with the ALREADY LOADED text and the tool's advice; the next run's loop
// runs it again.
func TestOncePerLoopAcrossReplicas(t *testing.T) {
	var runs atomic.Int32
	// Each replica has a tool of its own, as worker processes would.
	manual := func() tool.Tool {
		return toolctx.OneShotPerLoop(tool.New("manual", "Returns the manual.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			runs.Add(1)
			return tool.Text("the manual"), nil
		}, tool.Idempotent()), "Read the manual above.")
	}
	call := scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "manual", ArgumentsRaw: `{}`}}}
	script := scripted.Script{Name: "again", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: call},
		{When: scripted.When{Turn: 2}, Reply: call},
		{When: scripted.When{Turn: 3}, Reply: call},
		{When: scripted.When{Turn: 4}, Reply: scripted.Reply{Text: "read"}},
	}}
	e := newEnv(t, envOptions{script: script})
	e.startWorker("w1", worker.Group{Role: "docs", Description: "Docs.", Tools: []tool.Tool{manual()}})
	e.startWorker("w2", worker.Group{Role: "docs", Description: "Docs.", Tools: []tool.Tool{manual()}})
	const again = "ALREADY LOADED. The body of 'manual' was returned earlier in this turn \u2014 read it from your conversation history above. Do not call this tool again. Read the manual above."
	for run := 1; run <= 2; run++ {
		var contents []string
		if _, err := e.cl.RunAndWait(testContext(t), &toolpb.RunRequest{Prompt: "read", ToolGroups: []string{"docs"}}, func(ev *toolpb.RunResponse) {
			if f := ev.GetToolCallFinished(); f != nil {
				contents = append(contents, f.GetContent())
			}
		}); err != nil {
			t.Fatal(err)
		}
		if len(contents) != 3 || contents[0] != "the manual" || contents[1] != again || contents[2] != again {
			t.Errorf("run %d: the calls answered %q", run, contents)
		}
		if got := runs.Load(); got != int32(run) {
			t.Errorf("after run %d the tool ran %d times, want %d", run, got, run)
		}
	}
}
