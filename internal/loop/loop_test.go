package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/loop/looptest"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestRun covers loops that end with an answer: the result, the history and what the
// tools received.
func TestRun(t *testing.T) {
	echoSchema := schema.Params(schema.Integer("a", "a number"), schema.String("b", "a word").AsOptional())
	tests := []struct {
		name      string
		tools     func(r *recorder) []tool.Tool
		rules     []scripted.Rule
		want      *loop.Result
		wantCalls []invocation
	}{
		{
			name:  "no tool calls: the text is the answer after one iteration",
			tools: func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("unused", tool.Text("x"))} },
			rules: []scripted.Rule{onTurn(1, text("42"))},
			want: &loop.Result{Text: "42", Iterations: 1, History: []llm.Message{
				user("hi"), assistant("42"),
			}},
		},
		{
			name: "one tool call: the tool gets the canonical arguments, two iterations",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fn("echo", echoSchema, func(context.Context, string) (tool.Result, error) { return tool.Text("echoed"), nil })}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("echo", `{"b": "x",  "a": 1}`))),
				onTurn(2, text(`got {{ result "echo" }}`)),
			},
			want: &loop.Result{Text: "got echoed", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "echo", `{"b": "x",  "a": 1}`)),
				toolMsg("call_1_0", "echo", "echoed", false),
				assistant("got echoed"),
			}},
			wantCalls: []invocation{{"echo", `{"a":1,"b":"x"}`}},
		},
		{
			name: "blank arguments reach a tool as {}",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("now", tool.Text("noon"))}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("now", " "))),
				onTurn(2, text("it is noon")),
			},
			want: &loop.Result{Text: "it is noon", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "now", " ")),
				toolMsg("call_1_0", "now", "noon", false),
				assistant("it is noon"),
			}},
			wantCalls: []invocation{{"now", "{}"}},
		},
		{
			name:  "an error result reaches the model as Error: <message>",
			tools: func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("fail", tool.Error("Something went wrong"))} },
			rules: []scripted.Rule{
				onTurn(1, calls(raw("fail", `{}`))),
				onTurn(2, text("sorry")),
			},
			want: &loop.Result{Text: "sorry", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "fail", `{}`)),
				toolMsg("call_1_0", "fail", "Error: Something went wrong", true),
				assistant("sorry"),
			}},
			wantCalls: []invocation{{"fail", "{}"}},
		},
		{
			name: "an ordinary error returned by a tool becomes an error result",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{rawTool{name: "disk", call: func(context.Context, string) (tool.Result, error) {
					return tool.Text("ignored"), errors.New("disk full")
				}}}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("disk", `{}`))),
				onTurn(2, text("no space")),
			},
			want: &loop.Result{Text: "no space", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "disk", `{}`)),
				toolMsg("call_1_0", "disk", "Error: disk full", true),
				assistant("no space"),
			}},
		},
		{
			name: "a panicking tool becomes an error result and the run continues",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{
					rawTool{name: "boom", call: func(context.Context, string) (tool.Result, error) { panic("kaboom") }},
					r.fixed("fine", tool.Text("still fine")),
				}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("boom", `{}`), raw("fine", `{}`))),
				onTurn(2, text("recovered")),
			},
			want: &loop.Result{Text: "recovered", Iterations: 2, ToolCalls: 2, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "boom", `{}`), call("call_1_1", "fine", `{}`)),
				toolMsg("call_1_0", "boom", "Error: tool 'boom' panicked: kaboom", true),
				toolMsg("call_1_1", "fine", "still fine", false),
				assistant("recovered"),
			}},
			wantCalls: []invocation{{"fine", "{}"}},
		},
		{
			name: "an artifact result shows the model its content",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("report", tool.ArtifactResult("the report", tool.Artifact{TypeName: "Report", JSON: []byte(`{"pages":3}`)}))}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("report", `{}`))),
				onTurn(2, text("done")),
			},
			want: &loop.Result{Text: "done", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "report", `{}`)),
				toolMsg("call_1_0", "report", "the report", false),
				assistant("done"),
			}},
			wantCalls: []invocation{{"report", "{}"}},
		},
		{
			name: "returnDirect: the tool's content is the answer after one iteration",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("direct", tool.Text("direct answer"), tool.ReturnDirect())}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("direct", `{}`))),
				onTurn(2, text("the model must not be asked again")),
			},
			want: &loop.Result{Text: "direct answer", Iterations: 1, ReturnDirect: true, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "direct", `{}`)),
				toolMsg("call_1_0", "direct", "direct answer", false),
			}},
			wantCalls: []invocation{{"direct", "{}"}},
		},
		{
			name: "returnDirect in a batch: every call runs, the last returnDirect result in call order wins",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{
					r.fixed("d1", tool.Text("first"), tool.ReturnDirect()),
					r.fixed("plain", tool.Text("plain")),
					r.fixed("d2", tool.Text("second"), tool.ReturnDirect()),
					r.fixed("plain2", tool.Text("plain2")),
				}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("d1", `{}`), raw("plain", `{}`), raw("d2", `{}`), raw("plain2", `{}`))),
				onTurn(2, text("the model must not be asked again")),
			},
			want: &loop.Result{Text: "second", Iterations: 1, ReturnDirect: true, ToolCalls: 4, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "d1", `{}`), call("call_1_1", "plain", `{}`), call("call_1_2", "d2", `{}`), call("call_1_3", "plain2", `{}`)),
				toolMsg("call_1_0", "d1", "first", false),
				toolMsg("call_1_1", "plain", "plain", false),
				toolMsg("call_1_2", "d2", "second", false),
				toolMsg("call_1_3", "plain2", "plain2", false),
			}},
			wantCalls: []invocation{{"d1", "{}"}, {"plain", "{}"}, {"d2", "{}"}, {"plain2", "{}"}},
		},
		{
			name: "returnDirect in a batch: a failed returnDirect call does not win",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{
					r.fixed("d1", tool.Text("first"), tool.ReturnDirect()),
					r.fixed("broken", tool.Error("nope"), tool.ReturnDirect()),
				}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("d1", `{}`), raw("broken", `{}`))),
			},
			want: &loop.Result{Text: "first", Iterations: 1, ReturnDirect: true, ToolCalls: 2, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "d1", `{}`), call("call_1_1", "broken", `{}`)),
				toolMsg("call_1_0", "d1", "first", false),
				toolMsg("call_1_1", "broken", "Error: nope", true),
			}},
			wantCalls: []invocation{{"d1", "{}"}, {"broken", "{}"}},
		},
		{
			name: "a failed returnDirect call does not end the loop",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("broken", tool.Error("nope"), tool.ReturnDirect())}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("broken", `{}`))),
				onTurn(2, text("gave up")),
			},
			want: &loop.Result{Text: "gave up", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "broken", `{}`)),
				toolMsg("call_1_0", "broken", "Error: nope", true),
				assistant("gave up"),
			}},
			wantCalls: []invocation{{"broken", "{}"}},
		},
		{
			name: "a tool without returnDirect lets the loop continue",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("plain", tool.Text("data"))}
			},
			rules: []scripted.Rule{
				onTurn(1, scripted.Reply{Text: "Let me look.", ToolCalls: []scripted.ToolCall{raw("plain", `{}`)}}),
				onTurn(2, text("answer from data")),
			},
			want: &loop.Result{Text: "answer from data", Iterations: 2, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("Let me look.", call("call_1_0", "plain", `{}`)),
				toolMsg("call_1_0", "plain", "data", false),
				assistant("answer from data"),
			}},
			wantCalls: []invocation{{"plain", "{}"}},
		},
		{
			name: "an unknown tool gets the feedback and the model's next answer is the result",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("vectorSearch", tool.Text("3 hits")), r.fixed("webSearch", tool.Text("web"))}
			},
			rules: []scripted.Rule{
				onTurn(1, calls(raw("ragbot_vectorSearch", `{}`))),
				{When: scripted.When{Turn: 2, Result: `Did you mean 'vectorSearch'\?`, Error: new(true)}, Reply: calls(raw("vectorSearch", `{}`))},
				onTurn(3, text(`found {{ result "vectorSearch" }}`)),
			},
			want: &loop.Result{Text: "found 3 hits", Iterations: 3, ToolCalls: 1, History: []llm.Message{
				user("hi"),
				assistant("", call("call_1_0", "ragbot_vectorSearch", `{}`)),
				toolMsg("call_1_0", "ragbot_vectorSearch", notFoundText("ragbot_vectorSearch", " Did you mean 'vectorSearch'?", "vectorSearch, webSearch"), true),
				assistant("", call("call_2_0", "vectorSearch", `{}`)),
				toolMsg("call_2_0", "vectorSearch", "3 hits", false),
				assistant("found 3 hits"),
			}},
			wantCalls: []invocation{{"vectorSearch", "{}"}},
		},
		{
			name: "an empty tool-call list is a final answer",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("unused", tool.Text("x"))}
			},
			rules: []scripted.Rule{onTurn(1, scripted.Reply{Text: "final", ToolCalls: []scripted.ToolCall{}})},
			want:  &loop.Result{Text: "final", Iterations: 1, History: []llm.Message{user("hi"), assistant("final")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			p := newScript(t, tt.rules...)
			got, err := loop.Run(t.Context(), loop.Options{Provider: p, Logger: discard}, loop.Input{
				Messages: []llm.Message{user("hi")},
				Tools:    tt.tools(rec),
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, ignoreUsage); diff != "" {
				t.Errorf("Run result (-want +got):\n%s", diff)
			}
			if got.Usage.InputTokens == 0 || got.Usage.OutputTokens == 0 {
				t.Errorf("Run usage = %+v, want the model calls' usage added up", got.Usage)
			}
			if diff := cmp.Diff(tt.wantCalls, rec.invocations(), cmpopts.EquateEmpty(), sortInvocations); diff != "" {
				t.Errorf("tool invocations (-want +got):\n%s", diff)
			}
			if n := len(p.Requests()); n != tt.want.Iterations {
				t.Errorf("model calls = %d, want %d", n, tt.want.Iterations)
			}
		})
	}
}

// TestRunRequests checks what the model is sent: the system prompt, the history so far
// and the tools, the first of each name.
func TestRunRequests(t *testing.T) {
	rec := &recorder{}
	first := tool.New("dup", "first", schema.Params(schema.String("q", "query")), func(_ context.Context, in string) (tool.Result, error) {
		rec.add("first", in)
		return tool.Text("from first"), nil
	})
	second := tool.New("dup", "second", schema.Empty(), func(_ context.Context, in string) (tool.Result, error) {
		rec.add("second", in)
		return tool.Text("from second"), nil
	})
	other := tool.New("other", "another tool", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text("unused"), nil
	})
	p := newScript(t,
		onTurn(1, calls(raw("dup", `{"q":"x"}`))),
		onTurn(2, text("done")),
	)
	temp := 0.5
	_, err := loop.Run(t.Context(), loop.Options{Provider: p, Model: "m1", Temperature: &temp, MaxOutputTokens: 100}, loop.Input{
		System:   "be brief",
		Messages: []llm.Message{user("hi")},
		Tools:    []tool.Tool{first, second, other},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	specs := []llm.ToolSpec{
		{Name: "dup", Description: "first", Parameters: []byte(`{"type":"object","properties":{"q":{"type":"string","description":"query"}},"required":["q"]}`)},
		{Name: "other", Description: "another tool", Parameters: []byte(`{"type":"object","properties":{}}`)},
	}
	want := []llm.Request{
		{Model: "m1", System: "be brief", Temperature: &temp, MaxOutputTokens: 100, Tools: specs, Messages: []llm.Message{user("hi")}},
		{Model: "m1", System: "be brief", Temperature: &temp, MaxOutputTokens: 100, Tools: specs, Messages: []llm.Message{
			user("hi"),
			assistant("", call("call_1_0", "dup", `{"q":"x"}`)),
			toolMsg("call_1_0", "dup", "from first", false),
		}},
	}
	if diff := cmp.Diff(want, p.Requests()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]invocation{{"first", `{"q":"x"}`}}, rec.invocations()); diff != "" {
		t.Errorf("invocations (-want +got):\n%s", diff)
	}
}

// TestRunInvalidArguments checks that arguments are validated before dispatch: the model
// reads what is wrong, and the tool is never called.
func TestRunInvalidArguments(t *testing.T) {
	schema := schema.Params(schema.Integer("a", "a number"), schema.String("b", "a word").AsOptional())
	const prefix, suffix = "Error: invalid arguments for tool 'add': ", ". Call it again with arguments that match its schema."
	tests := []struct {
		name    string
		args    string
		problem string // the whole problem, or with partial the start of it
		partial bool
	}{
		{name: "schema violation", args: `{"a": "one"}`, problem: `property "a": expected integer, got string`},
		{name: "missing required property", args: `{"b": "x"}`, problem: `missing required property "a"`},
		{name: "duplicate keys", args: `{"a": 1, "a": 2}`, problem: `duplicate key "a"`},
		{name: "not an object", args: `[1]`, problem: `arguments must be a JSON object, got array`},
		{name: "invalid JSON", args: `{"a": 1,`, problem: "invalid JSON", partial: true},
		{name: "data after the value", args: `{"a": 1} {}`, problem: "invalid JSON", partial: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			add := tool.New("add", "adds", schema, func(context.Context, string) (tool.Result, error) {
				called = true
				return tool.Text("3"), nil
			})
			p := newScript(t,
				onTurn(1, calls(raw("add", tt.args))),
				onTurn(2, text("ok")),
			)
			ev := &events{}
			res, err := loop.Run(t.Context(), loop.Options{Provider: p, Observer: ev.observe}, loop.Input{
				Messages: []llm.Message{user("add")}, Tools: []tool.Tool{add},
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if called {
				t.Error("the tool was called with invalid arguments")
			}
			if res.ToolCalls != 0 {
				t.Errorf("ToolCalls = %d, want 0", res.ToolCalls)
			}
			got := res.History[2]
			if !got.IsError || got.ToolCallID != "call_1_0" || got.ToolName != "add" {
				t.Errorf("tool message = %+v, want an error answering call_1_0 of add", got)
			}
			problem, ok := strings.CutPrefix(got.Text, prefix)
			if ok {
				problem, ok = strings.CutSuffix(problem, suffix)
			}
			switch {
			case !ok:
				t.Errorf("tool message text = %q, want %q + problem + %q", got.Text, prefix, suffix)
			case tt.partial && !strings.HasPrefix(problem, tt.problem):
				t.Errorf("problem = %q, want it to start with %q", problem, tt.problem)
			case !tt.partial && problem != tt.problem:
				t.Errorf("problem = %q, want %q", problem, tt.problem)
			}
			var fin []loop.ToolCallFinished
			for _, e := range ev.all() {
				if f, ok := e.(loop.ToolCallFinished); ok {
					fin = append(fin, f)
				}
			}
			want := []loop.ToolCallFinished{{Iteration: 1, Call: call("call_1_0", "add", tt.args), Outcome: loop.OutcomeInvalidArguments, Content: got.Text}}
			if diff := cmp.Diff(want, fin); diff != "" {
				t.Errorf("finished events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunErrors covers the ways a loop fails.
func TestRunErrors(t *testing.T) {
	type check func(t *testing.T, err error)
	isMaxIterations := func(n int) check {
		return func(t *testing.T, err error) {
			var e *loop.MaxIterationsError
			if !errors.As(err, &e) || e.Max != n {
				t.Fatalf("error = %v, want a *MaxIterationsError with Max %d", err, n)
			}
			want := fmt.Sprintf("Tool loop exceeded maximum iterations (%d). This may indicate a loop in tool calls or an overly complex task.", n)
			if err.Error() != want {
				t.Errorf("message = %q, want %q", err.Error(), want)
			}
		}
	}
	tests := []struct {
		name        string
		opts        loop.Options
		tools       func(r *recorder) []tool.Tool
		rules       []scripted.Rule
		check       check
		wantMessage string
		wantModel   int          // model calls
		wantCalls   []invocation // tool invocations, in any order
	}{
		{
			name:        "max iterations 3: the tools of the last iteration run first",
			opts:        loop.Options{MaxIterations: 3},
			tools:       func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("again", tool.Text("more"))} },
			rules:       []scripted.Rule{always(calls(raw("again", `{}`)))},
			check:       isMaxIterations(3),
			wantMessage: "Tool loop exceeded maximum iterations (3). This may indicate a loop in tool calls or an overly complex task.",
			wantModel:   3,
			wantCalls:   []invocation{{"again", "{}"}, {"again", "{}"}, {"again", "{}"}},
		},
		{
			name:        "max iterations 5",
			opts:        loop.Options{MaxIterations: 5},
			tools:       func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("again", tool.Text("more"))} },
			rules:       []scripted.Rule{always(calls(raw("again", `{}`)))},
			check:       isMaxIterations(5),
			wantMessage: "Tool loop exceeded maximum iterations (5). This may indicate a loop in tool calls or an overly complex task.",
			wantModel:   5,
			wantCalls:   []invocation{{"again", "{}"}, {"again", "{}"}, {"again", "{}"}, {"again", "{}"}, {"again", "{}"}},
		},
		{
			name:      "max iterations default 20",
			tools:     func(r *recorder) []tool.Tool { return []tool.Tool{rawTool{name: "again", call: okCall("more")}} },
			rules:     []scripted.Rule{always(calls(raw("again", `{}`)))},
			check:     isMaxIterations(loop.DefaultMaxIterations),
			wantModel: 20,
		},
		{
			name:  "a provider failure is a *ModelError",
			tools: func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("t", tool.Text("x"))} },
			rules: []scripted.Rule{
				onTurn(1, calls(raw("t", `{}`))),
				onTurn(2, scripted.Reply{Error: "rate limited"}),
			},
			check: func(t *testing.T, err error) {
				var e *loop.ModelError
				if !errors.As(err, &e) || e.Iteration != 2 {
					t.Fatalf("error = %v, want a *ModelError of iteration 2", err)
				}
				if !errors.Is(err, scripted.ErrInjected) {
					t.Errorf("error = %v, want it to wrap the provider's error", err)
				}
			},
			wantMessage: "model call 2 failed: scripted: injected failure: rate limited",
			wantModel:   2,
			wantCalls:   []invocation{{"t", "{}"}},
		},
		{
			name: "a signal ends the loop with *SignalError after the batch has run",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{
					r.fixed("before", tool.Text("b")),
					r.fn("replan", schema.Empty(), func(context.Context, string) (tool.Result, error) {
						return tool.Result{}, tool.ReplanRequested{Reason: "world changed"}
					}),
					r.fixed("after", tool.Text("a")),
				}
			},
			rules: []scripted.Rule{always(calls(raw("before", `{}`), raw("replan", `{}`), raw("after", `{}`)))},
			check: func(t *testing.T, err error) {
				var e *loop.SignalError
				if !errors.As(err, &e) || e.Tool != "replan" {
					t.Fatalf("error = %v, want a *SignalError from replan", err)
				}
				var r tool.ReplanRequested
				if !errors.As(err, &r) || r.Reason != "world changed" {
					t.Errorf("error = %v, want it to carry the ReplanRequested signal", err)
				}
			},
			wantMessage: "tool 'replan' signalled: replan requested: world changed",
			wantModel:   1,
			wantCalls:   []invocation{{"before", "{}"}, {"replan", "{}"}, {"after", "{}"}},
		},
		{
			name: "a wrapped signal from a raw tool ends the loop too; the first in call order wins",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{
					rawTool{name: "stop", call: func(context.Context, string) (tool.Result, error) {
						return tool.Result{}, fmt.Errorf("giving up: %w", tool.Terminate{Scope: tool.TerminateAction, Reason: "done"})
					}},
					rawTool{name: "replan", call: func(context.Context, string) (tool.Result, error) {
						return tool.Result{}, tool.ReplanRequested{}
					}},
				}
			},
			rules: []scripted.Rule{always(calls(raw("stop", `{}`), raw("replan", `{}`)))},
			check: func(t *testing.T, err error) {
				var e *loop.SignalError
				if !errors.As(err, &e) || e.Tool != "stop" {
					t.Fatalf("error = %v, want a *SignalError from stop", err)
				}
				var term tool.Terminate
				if !errors.As(err, &term) || term.Scope != tool.TerminateAction {
					t.Errorf("error = %v, want it to carry the Terminate signal", err)
				}
			},
			wantMessage: "tool 'stop' signalled: giving up: terminate action: done",
			wantModel:   1,
		},
		{
			name: "the fourth consecutive unknown tool ends the loop with *ToolNotFoundError",
			tools: func(r *recorder) []tool.Tool {
				return []tool.Tool{r.fixed("a", tool.Text("x")), r.fixed("b", tool.Text("y"))}
			},
			rules: []scripted.Rule{always(calls(raw("nope", `{}`)))},
			check: func(t *testing.T, err error) {
				var e *loop.ToolNotFoundError
				if !errors.As(err, &e) {
					t.Fatalf("error = %v, want a *ToolNotFoundError", err)
				}
				if diff := cmp.Diff(&loop.ToolNotFoundError{Requested: "nope", Available: []string{"a", "b"}}, e); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
			},
			wantMessage: "Tool 'nope' not found. Available tools: [a, b]",
			wantModel:   4,
		},
		{
			name:  "four unknown tools in one turn end the loop too",
			tools: func(r *recorder) []tool.Tool { return []tool.Tool{r.fixed("a", tool.Text("x"))} },
			rules: []scripted.Rule{always(calls(raw("w", `{}`), raw("x", `{}`), raw("y", `{}`), raw("z", `{}`), raw("a", `{}`)))},
			check: func(t *testing.T, err error) {
				var e *loop.ToolNotFoundError
				if !errors.As(err, &e) || e.Requested != "z" {
					t.Fatalf("error = %v, want a *ToolNotFoundError for z", err)
				}
			},
			wantMessage: "Tool 'z' not found. Available tools: [a]",
			wantModel:   1,
		},
		{
			name: "no provider",
			tools: func(r *recorder) []tool.Tool {
				return nil
			},
			opts:        loop.Options{Provider: nil},
			wantMessage: "loop: no provider",
			check:       func(*testing.T, error) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			opts := tt.opts
			var p *scripted.Provider
			if tt.rules != nil {
				p = newScript(t, tt.rules...)
				opts.Provider = p
			}
			res, err := loop.Run(t.Context(), opts, loop.Input{Messages: []llm.Message{user("hi")}, Tools: tt.tools(rec)})
			if err == nil {
				t.Fatalf("Run = %+v, want an error", res)
			}
			if res != nil {
				t.Errorf("Run result = %+v, want nil with an error", res)
			}
			tt.check(t, err)
			if tt.wantMessage != "" && err.Error() != tt.wantMessage {
				t.Errorf("message = %q, want %q", err.Error(), tt.wantMessage)
			}
			if p != nil {
				if n := len(p.Requests()); n != tt.wantModel {
					t.Errorf("model calls = %d, want %d", n, tt.wantModel)
				}
			}
			if diff := cmp.Diff(tt.wantCalls, rec.invocations(), cmpopts.EquateEmpty(), sortInvocations); diff != "" {
				t.Errorf("tool invocations (-want +got):\n%s", diff)
			}
		})
	}
}

var sortInvocations = cmpopts.SortSlices(func(a, b invocation) bool {
	return a.Tool+"\x00"+a.Input < b.Tool+"\x00"+b.Input
})

func okCall(content string) func(context.Context, string) (tool.Result, error) {
	return func(context.Context, string) (tool.Result, error) { return tool.Text(content), nil }
}

// TestRunCallIDs checks that calls without an id get one, that each tool message answers
// its call, and that the provider's response is not changed.
func TestRunCallIDs(t *testing.T) {
	shared := &llm.Response{ToolCalls: []llm.ToolCall{{Name: "t", Arguments: "{}"}, {Name: "t", Arguments: "{}"}}}
	p := looptest.Func(func(_ context.Context, n int, _ *llm.Request) (*llm.Response, error) {
		if n <= 2 {
			return shared, nil // a provider may hand out the same value again
		}
		return &llm.Response{Text: "done"}, nil
	})
	var (
		mu   sync.Mutex
		seen []string
	)
	tl := rawTool{name: "t", call: func(ctx context.Context, _ string) (tool.Result, error) {
		info, _ := tool.CallInfoFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, info.CallID)
		return tool.Text("ok"), nil
	}}
	res, err := loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{tl}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []llm.Message{
		user("hi"),
		assistant("", call("call_1_1", "t", "{}"), call("call_1_2", "t", "{}")),
		toolMsg("call_1_1", "t", "ok", false),
		toolMsg("call_1_2", "t", "ok", false),
		assistant("", call("call_2_1", "t", "{}"), call("call_2_2", "t", "{}")),
		toolMsg("call_2_1", "t", "ok", false),
		toolMsg("call_2_2", "t", "ok", false),
		assistant("done"),
	}
	if diff := cmp.Diff(want, res.History); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"call_1_1", "call_1_2", "call_2_1", "call_2_2"}, seen, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("call ids the tool saw (-want +got):\n%s", diff)
	}
	for _, c := range shared.ToolCalls {
		if c.ID != "" {
			t.Errorf("the provider's response was changed: call id %q", c.ID)
		}
	}
}

// TestRunCallContext checks what a tool finds in its context: the caller's values, the
// call info, and a Dispatch to fill in.
func TestRunCallContext(t *testing.T) {
	type key struct{}
	type seen struct {
		Value    any
		Info     tool.CallInfo
		HasInfo  bool
		Dispatch bool
	}
	var got []seen
	tl := rawTool{name: "ctx", call: func(ctx context.Context, _ string) (tool.Result, error) {
		info, ok := tool.CallInfoFrom(ctx)
		got = append(got, seen{Value: ctx.Value(key{}), Info: info, HasInfo: ok, Dispatch: toolinternal.DispatchFrom(ctx) != nil})
		return tool.Text("ok"), nil
	}}
	p := newScript(t,
		onTurn(1, calls(scripted.ToolCall{ID: "c1", Name: "ctx"})),
		onTurn(2, text("done")),
	)
	ctx := context.WithValue(t.Context(), key{}, "caller's value")
	_, err := loop.Run(ctx, loop.Options{Provider: p, RunID: "run-1", LoopID: "loop-1"}, loop.Input{
		Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{tl},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []seen{{Value: "caller's value", Info: tool.CallInfo{RunID: "run-1", LoopID: "loop-1", CallID: "c1", Iteration: 1}, HasInfo: true, Dispatch: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the tool saw (-want +got):\n%s", diff)
	}
}

// TestRunLogsPanics checks that a panic, which the model only sees as an error result,
// is logged once with its stack and the run, loop and call ids, whatever tool panicked.
func TestRunLogsPanics(t *testing.T) {
	panicky := func(context.Context, string) (tool.Result, error) { panic("kaboom") }
	tests := []struct {
		name string
		tool tool.Tool
	}{
		{name: "a raw tool", tool: rawTool{name: "boom", call: panicky}},
		{name: "a tool.New tool", tool: tool.New("boom", "panics", schema.Empty(), panicky)},
		{name: "beneath decorators.ErrorMapping", tool: decorators.ErrorMapping(rawTool{name: "boom", call: panicky})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(&buf, nil)))
			p := newScript(t, onTurn(1, calls(raw("boom", `{}`))), onTurn(2, text("ok")))
			res, err := loop.Run(t.Context(), loop.Options{Provider: p, Logger: logger, RunID: "r1", LoopID: "l1"}, loop.Input{
				Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{tt.tool},
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if m := res.History[2]; !m.IsError || !strings.Contains(m.Text, "panicked: kaboom") {
				t.Errorf("tool message = %+v, want the panic as an error result", m)
			}
			var rec struct {
				Level, Msg, Tool, Panic, Stack string
				CallID                         string `json:"call_id"`
				LoopID                         string `json:"loop_id"`
				RunID                          string `json:"run_id"`
			}
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if rec.Level != "ERROR" || rec.Msg != "tool panicked" || rec.Tool != "boom" || rec.CallID != "call_1_0" || rec.LoopID != "l1" || rec.RunID != "r1" || rec.Panic != "kaboom" {
				t.Errorf("log record = %+v", rec)
			}
			if !strings.Contains(rec.Stack, "loop_test.TestRunLogsPanics") {
				t.Errorf("logged stack does not show where the tool panicked:\n%s", rec.Stack)
			}
		})
	}
}

var discard = slog.New(slog.DiscardHandler)

// TestRunRefusesHugeArguments: arguments beyond MaxArgumentBytes are refused before they
// are parsed, and the tool is not called.
func TestRunRefusesHugeArguments(t *testing.T) {
	r := &recorder{}
	echo := r.fn("echo", schema.Params(schema.String("text", "text")), func(context.Context, string) (tool.Result, error) {
		t.Error("echo was called with oversized arguments")
		return tool.Text("no"), nil
	})
	huge := `{"text":"` + strings.Repeat("x", loop.MaxArgumentBytes) + `"}`
	p := newScript(t, onTurn(1, calls(raw("echo", huge))), onTurn(2, text("ok")))
	res, err := loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{echo}})
	if err != nil {
		t.Fatal(err)
	}
	got := res.History[2].Text
	want := fmt.Sprintf("Error: invalid arguments for tool 'echo': arguments too large: they are %d bytes; the limit is %d. Call it again with arguments that match its schema.", len(huge), loop.MaxArgumentBytes)
	if got != want {
		t.Errorf("tool result = %q, want %q", got, want)
	}
}

// TestRunTruncatesLongResults: a result longer than MaxResultBytes reaches the model cut
// to the bound, at a character boundary, ending with a line that says how long it was;
// the finished event says what the model read; shorter results are untouched.
func TestRunTruncatesLongResults(t *testing.T) {
	r := &recorder{}
	long := strings.Repeat("é", 20<<10) // 40 KiB of two-byte characters
	big := r.fn("big", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text(long), nil })
	small := r.fn("small", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("short"), nil })
	p := newScript(t, onTurn(1, calls(raw("big", `{}`), raw("small", `{}`))), onTurn(2, text("ok")))
	var mu sync.Mutex
	events := map[string]loop.ToolCallFinished{}
	res, err := loop.Run(t.Context(), loop.Options{Provider: p, Observer: func(ev loop.Event) {
		if f, ok := ev.(loop.ToolCallFinished); ok {
			mu.Lock()
			events[f.Call.Name] = f
			mu.Unlock()
		}
	}}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{big, small}})
	if err != nil {
		t.Fatal(err)
	}
	got := res.History[2].Text
	if len(got) > loop.DefaultMaxResultBytes || !utf8.ValidString(got) {
		t.Fatalf("truncated result is %d bytes (valid UTF-8: %v), want at most %d", len(got), utf8.ValidString(got), loop.DefaultMaxResultBytes)
	}
	head, marker, ok := strings.Cut(got, "\n[truncated: ")
	if !ok || !strings.HasPrefix(long, head) || marker != fmt.Sprintf("the tool returned %d bytes; only the first %d are shown]", len(long), len(head)) {
		t.Errorf("truncated result ends %q", got[max(0, len(got)-120):])
	}
	if res.History[3].Text != "short" {
		t.Errorf("short result = %q", res.History[3].Text)
	}
	if e := events["big"]; e.Content != got || e.Result.Content != long {
		t.Errorf("finished event: content %d bytes, result %d bytes; want what the model read and the tool's whole result", len(e.Content), len(e.Result.Content))
	}
}

// turns is a model that answers its n-th request with the n-th response.
type turns struct {
	mu    sync.Mutex
	resps []llm.Response
	n     int
}

func (m *turns) Name() string         { return "turns" }
func (m *turns) DefaultModel() string { return "m" }
func (m *turns) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	m.mu.Lock()
	r := m.resps[min(m.n, len(m.resps)-1)]
	m.n++
	m.mu.Unlock()
	return func(yield func(llm.Chunk, error) bool) { yield(llm.Chunk{Done: &r}, nil) }
}

// TestCallsSharingAnIDGetTheirOwn: calls that share an id (some servers of open models
// number every turn's calls from the same id), in one turn or across turns, each get one
// of their own, one no call of the loop or of the turn has, so that each tool message
// answers one call and each call has its own idempotency key. With SharedCallIDs (answers
// a run resumed from a journal written before replays), the ids stay as the model gave
// them.
func TestCallsSharingAnIDGetTheirOwn(t *testing.T) {
	resps := []llm.Response{
		{ToolCalls: []llm.ToolCall{{ID: "c", Name: "one", Arguments: "{}"}, {ID: "c", Name: "two", Arguments: "{}"}, {ID: "c_1_2", Name: "three", Arguments: "{}"}, {Name: "four", Arguments: "{}"}, {Name: "one", Arguments: "{}"}}},
		{ToolCalls: []llm.ToolCall{{ID: "c", Name: "one", Arguments: "{}"}, {ID: "d", Name: "two", Arguments: "{}"}}},
		{Text: "sums"},
	}
	tools := func(rec *recorder) []tool.Tool {
		return []tool.Tool{rec.fixed("one", tool.Text("1")), rec.fixed("two", tool.Text("2")), rec.fixed("three", tool.Text("3")), rec.fixed("four", tool.Text("4"))}
	}
	ids := func(h []llm.Message) (out []string) {
		for _, m := range h {
			if m.Role == llm.RoleTool {
				out = append(out, m.ToolCallID)
			}
			for _, c := range m.ToolCalls {
				out = append(out, "asked "+c.ID)
			}
		}
		return out
	}
	got, err := loop.Run(t.Context(), loop.Options{Provider: &turns{resps: resps}, Logger: discard}, loop.Input{Messages: []llm.Message{user("hi")}, Tools: tools(&recorder{})})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"asked c", "asked c_1_2_1_2", "asked c_1_2", "asked call_1_4", "asked call_1_5", "c", "c_1_2_1_2", "c_1_2", "call_1_4", "call_1_5",
		"asked c_2_1", "asked d", "c_2_1", "d"}
	if diff := cmp.Diff(want, ids(got.History)); diff != "" {
		t.Errorf("call ids (-want +got):\n%s", diff)
	}
	got, err = loop.Run(t.Context(), loop.Options{Provider: &turns{resps: resps}, Logger: discard, SharedCallIDs: func() bool { return true }}, loop.Input{Messages: []llm.Message{user("hi")}, Tools: tools(&recorder{})})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"asked c", "asked c", "asked c_1_2", "asked call_1_4", "asked call_1_5", "c", "c", "c_1_2", "call_1_4", "call_1_5", "asked c", "asked d", "c", "d"}
	if diff := cmp.Diff(want, ids(got.History)); diff != "" {
		t.Errorf("call ids with SharedCallIDs (-want +got):\n%s", diff)
	}
}
