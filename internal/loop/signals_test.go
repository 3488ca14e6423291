package loop_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func signalling(r *recorder, name string, sig error) tool.Tool {
	return r.fn(name, schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Result{}, sig })
}

// TestSignalPriority: every call of the turn runs; then an agent termination wins over an
// action termination, which wins over a replan; among equals the first in call order.
func TestSignalPriority(t *testing.T) {
	replan1 := tool.ReplanRequested{Reason: "first"}
	replan2 := tool.ReplanRequested{Reason: "second"}
	action := tool.Terminate{Scope: tool.TerminateAction, Reason: "action"}
	agent := tool.Terminate{Scope: tool.TerminateAgent, Reason: "agent"}
	for _, tt := range []struct {
		name  string
		order []string
		want  string
	}{
		{"two replans: the first", []string{"replan1", "replan2"}, "replan1"},
		{"replan then action termination", []string{"replan1", "action"}, "action"},
		{"action then agent termination", []string{"plain", "action", "agent"}, "agent"},
		{"agent before everything", []string{"agent", "replan1", "action"}, "agent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{}
			tools := []tool.Tool{
				signalling(r, "replan1", replan1), signalling(r, "replan2", replan2),
				signalling(r, "action", action), signalling(r, "agent", agent), r.fixed("plain", tool.Text("ok")),
			}
			var cs []scripted.ToolCall
			for _, n := range tt.order {
				cs = append(cs, raw(n, `{}`))
			}
			_, err := loop.Run(context.Background(), loop.Options{Provider: newScript(t, always(calls(cs...)))},
				loop.Input{Messages: []llm.Message{user("go")}, Tools: tools})
			var se *loop.SignalError
			if !errors.As(err, &se) || se.Tool != tt.want || se.CallID == "" {
				t.Fatalf("error %v, want a signal from %s", err, tt.want)
			}
			if n := len(r.invocations()); n != len(tt.order) {
				t.Errorf("%d calls ran, want all %d", n, len(tt.order))
			}
		})
	}
}

// TestActionBudget: an action is a dispatched call; the call that would exceed the
// budget, and those after it in its turn, are not run, and the loop ends with the budget
// message. Calls refused before dispatch do not count.
func TestActionBudget(t *testing.T) {
	r := &recorder{}
	ev := &events{}
	tools := []tool.Tool{r.fixed("a", tool.Text("x"))}
	p := newScript(t,
		onTurn(1, calls(raw("a", `{}`), raw("nope", `{}`), raw("a", `{}`))),
		onTurn(2, calls(raw("a", `{}`), raw("a", `{}`), raw("a", `{}`))),
		always(text("unreachable")))
	_, err := loop.Run(context.Background(), loop.Options{Provider: p, Budget: loop.Budget{MaxActions: 3}, Observer: ev.observe},
		loop.Input{Messages: []llm.Message{user("go")}, Tools: tools})
	var be *loop.BudgetExceededError
	if !errors.As(err, &be) || be.What != "actions" {
		t.Fatalf("error %v, want an action budget error", err)
	}
	const msg = "run budget exceeded: the action budget of 3 tool calls is used up; tool 'a' was not run"
	if err.Error() != msg {
		t.Errorf("message %q", err.Error())
	}
	if n := len(r.invocations()); n != 3 {
		t.Errorf("%d calls ran, want 3", n)
	}
	var notRun []string
	for _, e := range ev.all() {
		if f, ok := e.(loop.ToolCallFinished); ok && strings.HasPrefix(f.Content, "Error: not run:") {
			notRun = append(notRun, f.Call.ID+" "+f.Content)
		}
	}
	want := []string{"call_2_1 Error: not run: " + msg, "call_2_2 Error: not run: " + msg} // the script numbers calls from 0
	if diff := cmp.Diff(want, notRun); diff != "" {
		t.Errorf("calls not run (-want +got):\n%s", diff)
	}
}

// TestStreamText: with StreamText the model's text arrives as deltas, in order, and they
// add up to the answer; without it there are none.
func TestStreamText(t *testing.T) {
	for _, stream := range []bool{true, false} {
		ev := &events{}
		res, err := loop.Run(context.Background(), loop.Options{Provider: newScript(t, always(text("The answer is forty-two, as computed."))), StreamText: stream, LoopID: "loop_1", Observer: ev.observe},
			loop.Input{Messages: []llm.Message{user("go")}})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		n := 0
		for _, e := range ev.all() {
			if d, ok := e.(loop.TextDelta); ok {
				if d.LoopID != "loop_1" || d.Iteration != 1 {
					t.Errorf("delta %+v", d)
				}
				b.WriteString(d.Text)
				n++
			}
		}
		if stream && (n < 2 || b.String() != res.Text) {
			t.Errorf("%d deltas adding up to %q, want several adding up to %q", n, b.String(), res.Text)
		}
		if !stream && n != 0 {
			t.Errorf("%d deltas without StreamText", n)
		}
	}
}
