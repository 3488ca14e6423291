package loop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"testing/synctest"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestRunEvents checks the events of a loop whose one turn calls a remote-looking tool,
// an unknown tool, a tool with invalid arguments and a failing tool.
func TestRunEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		work := tool.New("work", "works", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			time.Sleep(5 * time.Millisecond)
			d := toolinternal.DispatchFrom(ctx)
			d.WorkerID, d.Attempts = "w1", 2
			return tool.Text("worked"), nil
		})
		strict := tool.New("strict", "needs a", schema.Params(schema.Integer("a", "a number")), func(context.Context, string) (tool.Result, error) {
			t.Error("strict was called with invalid arguments")
			return tool.Text("no"), nil
		})
		fail := tool.New("fail", "fails", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			toolinternal.DispatchFrom(ctx).WorkerID = "w2"
			return tool.Error("broken"), nil
		})
		p := newScript(t,
			onTurn(1, scripted.Reply{Text: "Working on it.", ToolCalls: []scripted.ToolCall{
				raw("work", `{}`), raw("nope", `{}`), raw("strict", `{"a":"x"}`), raw("fail", `{}`),
			}}),
			onTurn(2, text("done")),
		)
		ev := &events{}
		_, err := loop.Run(t.Context(), loop.Options{Provider: p, LoopID: "loop-1", Observer: ev.observe}, loop.Input{
			Messages: []llm.Message{user("go")}, Tools: []tool.Tool{work, strict, fail},
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		invalid := `Error: invalid arguments for tool 'strict': property "a": expected integer, got string. Call it again with arguments that match its schema.`
		want := []loop.Event{
			loop.ModelCalled{Iteration: 1, Model: "scripted/test", FinishReason: "tool_calls"},
			loop.AssistantText{Iteration: 1, LoopID: "loop-1", Text: "Working on it."},
			loop.ToolCallStarted{Iteration: 1, LoopID: "loop-1", Call: call("call_1_0", "work", `{}`)},
			loop.ToolCallStarted{Iteration: 1, LoopID: "loop-1", Call: call("call_1_1", "nope", `{}`)},
			loop.ToolCallFinished{Iteration: 1, LoopID: "loop-1", Call: call("call_1_1", "nope", `{}`), Outcome: loop.OutcomeUnknownTool,
				Content: notFoundText("nope", "", "work, strict, fail")},
			loop.ToolCallStarted{Iteration: 1, LoopID: "loop-1", Call: call("call_1_2", "strict", `{"a":"x"}`)},
			loop.ToolCallFinished{Iteration: 1, LoopID: "loop-1", Call: call("call_1_2", "strict", `{"a":"x"}`), Outcome: loop.OutcomeInvalidArguments,
				Content: invalid},
			loop.ToolCallStarted{Iteration: 1, LoopID: "loop-1", Call: call("call_1_3", "fail", `{}`)},
			// fail returns at once; work sleeps 5ms of fake time.
			loop.ToolCallFinished{Iteration: 1, LoopID: "loop-1", Call: call("call_1_3", "fail", `{}`), Outcome: loop.OutcomeError,
				Content: "Error: broken", Result: tool.Error("broken"), WorkerID: "w2"},
			loop.ToolCallFinished{Iteration: 1, LoopID: "loop-1", Call: call("call_1_0", "work", `{}`), Outcome: loop.OutcomeOK,
				Content: "worked", Result: tool.Text("worked"), WorkerID: "w1", Attempts: 2, Duration: 5 * time.Millisecond},
			loop.ModelCalled{Iteration: 2, Model: "scripted/test", FinishReason: "stop"},
		}
		if diff := cmp.Diff(want, ev.all(), cmpopts.IgnoreFields(loop.ModelCalled{}, "Usage")); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		for _, e := range ev.all() {
			if m, ok := e.(loop.ModelCalled); ok && (m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0) {
				t.Errorf("ModelCalled %d has no usage", m.Iteration)
			}
		}
	})
}

// TestRunEventsSignal checks that a call ending in a signal is reported as finished with
// an error outcome.
func TestRunEventsSignal(t *testing.T) {
	stop := tool.New("stop", "stops", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, tool.Terminate{Scope: tool.TerminateAgent, Reason: "enough"}
	})
	p := newScript(t, onTurn(1, calls(raw("stop", `{}`))))
	ev := &events{}
	_, err := loop.Run(t.Context(), loop.Options{Provider: p, Observer: ev.observe}, loop.Input{
		Messages: []llm.Message{user("go")}, Tools: []tool.Tool{stop},
	})
	if err == nil {
		t.Fatal("Run succeeded, want a *SignalError")
	}
	want := []loop.Event{
		loop.ModelCalled{Iteration: 1, Model: "scripted/test", FinishReason: "tool_calls"},
		loop.ToolCallStarted{Iteration: 1, Call: call("call_1_0", "stop", `{}`)},
		loop.ToolCallFinished{Iteration: 1, Call: call("call_1_0", "stop", `{}`), Outcome: loop.OutcomeError, Content: "terminate agent: enough"},
	}
	if diff := cmp.Diff(want, ev.all(), cmpopts.IgnoreFields(loop.ModelCalled{}, "Usage"), cmpopts.IgnoreFields(loop.ToolCallFinished{}, "Duration")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestRunNotFoundLimitFinishesTheCall: the unknown call that ends the loop still gets its
// finished event, so a client never sees a call that started and never ended.
func TestRunNotFoundLimitFinishesTheCall(t *testing.T) {
	r := &recorder{}
	known := r.fixed("known", tool.Text("ok"))
	p := newScript(t, always(calls(raw("nope", `{}`))))
	ev := &events{}
	_, err := loop.Run(t.Context(), loop.Options{Provider: p, LoopID: "l", Observer: ev.observe}, loop.Input{
		Messages: []llm.Message{user("go")}, Tools: []tool.Tool{known},
	})
	var nf *loop.ToolNotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("err = %v, want *ToolNotFoundError", err)
	}
	started, fins := 0, 0
	var last loop.ToolCallFinished
	for _, e := range ev.all() {
		switch x := e.(type) {
		case loop.ToolCallStarted:
			started++
		case loop.ToolCallFinished:
			fins++
			last = x
		}
	}
	if started != 4 || fins != 4 {
		t.Fatalf("started %d, finished %d; want 4 and 4", started, fins)
	}
	if last.Outcome != loop.OutcomeUnknownTool || last.Content != "Tool 'nope' not found. Available tools: [known]" {
		t.Errorf("last finished event = %+v", last)
	}
}
