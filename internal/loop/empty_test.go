package loop_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/loop/looptest"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// TestRunEmptyResponse covers the empty-response policy.
func TestRunEmptyResponse(t *testing.T) {
	nudge := user(loop.EmptyResponseNudge)
	work := llm.Response{ToolCalls: []llm.ToolCall{call("c1", "work", "{}")}}
	tests := []struct {
		name    string
		retries int
		replies []llm.Response
		want    *loop.Result
		wantErr error
		// wantRequests are the messages of each model call.
		wantRequests [][]llm.Message
	}{
		{
			name:         "by default a truly empty answer is final",
			replies:      []llm.Response{{Text: ""}},
			want:         &loop.Result{Text: "", Iterations: 1, History: []llm.Message{user("hi"), assistant("")}},
			wantRequests: [][]llm.Message{{user("hi")}},
		},
		{
			name:         "by default a blank answer is final and stays in the history",
			replies:      []llm.Response{{Text: " "}},
			want:         &loop.Result{Text: " ", Iterations: 1, History: []llm.Message{user("hi"), assistant(" ")}},
			wantRequests: [][]llm.Message{{user("hi")}},
		},
		{
			name:    "retry once: the empty turn becomes (no response), one nudge, the second answer wins",
			retries: 1,
			replies: []llm.Response{{Text: ""}, {Text: "answer"}},
			want: &loop.Result{Text: "answer", Iterations: 2, History: []llm.Message{
				user("hi"), assistant("(no response)"), nudge, assistant("answer"),
			}},
			wantRequests: [][]llm.Message{
				{user("hi")},
				{user("hi"), assistant("(no response)"), nudge},
			},
		},
		{
			name:    "retry once: a blank (not empty) turn is kept as it is",
			retries: 1,
			replies: []llm.Response{{Text: "\n "}, {Text: "answer"}},
			want: &loop.Result{Text: "answer", Iterations: 2, History: []llm.Message{
				user("hi"), assistant("\n "), nudge, assistant("answer"),
			}},
			wantRequests: [][]llm.Message{
				{user("hi")},
				{user("hi"), assistant("\n "), nudge},
			},
		},
		{
			name:    "retries exhausted: ErrEmptyResponse",
			retries: 1,
			replies: []llm.Response{{Text: ""}, {Text: " "}, {Text: "never asked"}},
			wantErr: loop.ErrEmptyResponse,
			wantRequests: [][]llm.Message{
				{user("hi")},
				{user("hi"), assistant("(no response)"), nudge},
			},
		},
		{
			name:    "two retries",
			retries: 2,
			replies: []llm.Response{{Text: ""}, {Text: ""}, {Text: "third time"}},
			want: &loop.Result{Text: "third time", Iterations: 3, History: []llm.Message{
				user("hi"), assistant("(no response)"), nudge, assistant("(no response)"), nudge, assistant("third time"),
			}},
			wantRequests: [][]llm.Message{
				{user("hi")},
				{user("hi"), assistant("(no response)"), nudge},
				{user("hi"), assistant("(no response)"), nudge, assistant("(no response)"), nudge},
			},
		},
		{
			name:    "a tool-call turn resets the count",
			retries: 1,
			replies: []llm.Response{{Text: ""}, work, {Text: ""}, {Text: "answer"}},
			want: &loop.Result{Text: "answer", Iterations: 4, ToolCalls: 1, History: []llm.Message{
				user("hi"), assistant("(no response)"), nudge,
				assistant("", call("c1", "work", "{}")), toolMsg("c1", "work", "worked", false),
				assistant("(no response)"), nudge,
				assistant("answer"),
			}},
			wantRequests: [][]llm.Message{
				{user("hi")},
				{user("hi"), assistant("(no response)"), nudge},
				{user("hi"), assistant("(no response)"), nudge, assistant("", call("c1", "work", "{}")), toolMsg("c1", "work", "worked", false)},
				{user("hi"), assistant("(no response)"), nudge, assistant("", call("c1", "work", "{}")), toolMsg("c1", "work", "worked", false),
					assistant("(no response)"), nudge},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := looptest.Replies(tt.replies...)
			workTool := tool.New("work", "works", schema.Empty(), okCall("worked"))
			got, err := loop.Run(t.Context(), loop.Options{Provider: p, EmptyRetries: tt.retries}, loop.Input{
				Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{workTool},
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Run result (-want +got):\n%s", diff)
			}
			var msgs [][]llm.Message
			for _, r := range p.Requests() {
				msgs = append(msgs, r.Messages)
			}
			if diff := cmp.Diff(tt.wantRequests, msgs); diff != "" {
				t.Errorf("request messages (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEmptyResponseNudge pins the nudge.
func TestEmptyResponseNudge(t *testing.T) {
	const want = "Your previous turn produced no response. Take ONE concrete action that progresses toward answering the user's most recent question — either call a tool to gather what you still need, or write the answer using the information you already have. Do not stay silent."
	if loop.EmptyResponseNudge != want {
		t.Errorf("EmptyResponseNudge = %q, want %q", loop.EmptyResponseNudge, want)
	}
}
