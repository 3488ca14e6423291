package scripted_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
)

// builtinTools are the tools of the mesh's built-in math and text groups, as the model sees them.
func builtinTools() []llm.ToolSpec {
	var tools []llm.ToolSpec
	for _, name := range []string{"add", "subtract", "multiply", "divide", "mean", "min", "max", "floor", "ceiling", "round",
		"word_count", "uppercase", "reverse"} {
		tools = append(tools, llm.ToolSpec{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return tools
}

// demoLoop plays the tool-calling loop against the demo script: tools answers each call from
// the results table by tool name. It returns the tool calls of every turn and the final answer.
func demoLoop(t *testing.T, prompt string, results map[string]llm.Message, reverse bool) ([][]llm.ToolCall, *llm.Response) {
	t.Helper()
	p := mustNew(t, scripted.Demo())
	req := &llm.Request{Messages: []llm.Message{user(prompt)}, Tools: builtinTools()}
	var turns [][]llm.ToolCall
	for range 10 {
		resp, err := llm.Collect(p.Stream(t.Context(), req))
		if err != nil {
			t.Fatalf("turn %d: %v", len(turns)+1, err)
		}
		if resp.Model != "scripted/demo" {
			t.Errorf("model = %q", resp.Model)
		}
		if len(resp.ToolCalls) == 0 {
			if resp.FinishReason != "stop" {
				t.Errorf("final FinishReason = %q", resp.FinishReason)
			}
			return turns, resp
		}
		turns = append(turns, resp.ToolCalls)
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, Text: resp.Text, ToolCalls: resp.ToolCalls})
		var batch []llm.Message
		for _, c := range resp.ToolCalls {
			if !json.Valid([]byte(c.Arguments)) {
				t.Errorf("turn %d: %s arguments are not JSON: %s", len(turns), c.Name, c.Arguments)
			}
			r, ok := results[c.Name]
			if !ok {
				t.Fatalf("turn %d: unexpected call of %s", len(turns), c.Name)
			}
			r.Role, r.ToolCallID, r.ToolName = llm.RoleTool, c.ID, c.Name
			batch = append(batch, r)
		}
		if reverse {
			slices.Reverse(batch)
		}
		req.Messages = append(req.Messages, batch...)
	}
	t.Fatal("the demo did not finish in 10 turns")
	return nil, nil
}

func TestDemoParses(t *testing.T) {
	s := scripted.Demo()
	if s.Name != "demo" {
		t.Errorf("Name = %q", s.Name)
	}
	if _, err := scripted.New(s); err != nil {
		t.Fatal(err)
	}
}

func TestDemoWalk(t *testing.T) {
	tests := []struct {
		name    string
		results map[string]llm.Message
		reverse bool
	}{
		{"plain numbers", map[string]llm.Message{
			"add": {Text: "20"}, "word_count": {Text: "4"}, "multiply": {Text: "60"}, "uppercase": {Text: "THE QUICK BROWN FOX"},
		}, false},
		{"results in reverse order", map[string]llm.Message{
			"add": {Text: "20"}, "word_count": {Text: "4"}, "multiply": {Text: "60"}, "uppercase": {Text: "THE QUICK BROWN FOX"},
		}, true},
		{"decimal results", map[string]llm.Message{
			"add": {Text: "20.0"}, "word_count": {Text: "4"}, "multiply": {Text: "60"}, "uppercase": {Text: "THE QUICK BROWN FOX"},
		}, true},
	}
	wantTurns := [][]llm.ToolCall{
		{call("call_1_0", "add", `{"a":12.5,"b":7.5}`), call("call_1_1", "word_count", `{"text": "the quick brown fox"}`)},
		{call("call_2_0", "multiply", `{"a": 20, "b": 3}`)},
		{call("call_3_0", "uppercase", `{"text": "the quick brown fox"}`)},
	}
	const wantAnswer = "(12.5 + 7.5) * 3 = 60, and 'the quick brown fox' has 4 words; in capitals it reads THE QUICK BROWN FOX."
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turns, final := demoLoop(t, scripted.DemoPrompt, tt.results, tt.reverse)
			if diff := cmp.Diff(wantTurns, turns); diff != "" {
				t.Errorf("tool calls per turn (-want +got):\n%s", diff)
			}
			if final.Text != wantAnswer {
				t.Errorf("answer = %q\nwant     %q", final.Text, wantAnswer)
			}
		})
	}
}

func TestDemoToolFailure(t *testing.T) {
	turns, final := demoLoop(t, scripted.DemoPrompt, map[string]llm.Message{
		"add": {Text: "20"}, "word_count": {Text: "Error: worker unavailable", IsError: true},
	}, false)
	if len(turns) != 1 {
		t.Errorf("took %d tool turns, want 1", len(turns))
	}
	if want := "A tool call failed, so I stop here. The tool said: 20, Error: worker unavailable"; final.Text != want {
		t.Errorf("answer = %q, want %q", final.Text, want)
	}
}

func TestDemoOtherQuestion(t *testing.T) {
	turns, final := demoLoop(t, "What is the capital of France?", nil, false)
	if len(turns) != 0 {
		t.Errorf("took %d tool turns, want 0", len(turns))
	}
	if !strings.Contains(final.Text, `"`+scripted.DemoPrompt+`"`) || !strings.Contains(final.Text, "scripted demo model") {
		t.Errorf("answer = %q, want it to say what it is and quote DemoPrompt", final.Text)
	}
}
