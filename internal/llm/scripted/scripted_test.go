package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"testing/synctest"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func user(text string) llm.Message { return llm.Message{Role: llm.RoleUser, Text: text} }

func assistant(calls ...llm.ToolCall) llm.Message {
	return llm.Message{Role: llm.RoleAssistant, ToolCalls: calls}
}

func call(id, name, args string) llm.ToolCall {
	return llm.ToolCall{ID: id, Name: name, Arguments: args}
}

func result(name, text string) llm.Message {
	return llm.Message{Role: llm.RoleTool, ToolCallID: "id-" + name, ToolName: name, Text: text}
}

func failed(name, text string) llm.Message {
	m := result(name, text)
	m.IsError = true
	return m
}

func request(msgs ...llm.Message) *llm.Request { return &llm.Request{Messages: msgs} }

func mustNew(t *testing.T, s scripted.Script) *scripted.Provider {
	t.Helper()
	p, err := scripted.New(s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

// drain returns every chunk of a stream and the error that ended it.
func drain(seq func(func(llm.Chunk, error) bool)) ([]llm.Chunk, error) {
	var chunks []llm.Chunk
	for c, err := range seq {
		if err != nil {
			return chunks, err
		}
		chunks = append(chunks, c)
	}
	return chunks, nil
}

func collectText(t *testing.T, p *scripted.Provider, req *llm.Request) string {
	t.Helper()
	resp, err := llm.Collect(p.Stream(t.Context(), req))
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return resp.Text
}

func TestMatch(t *testing.T) {
	// The conversation of a loop after one batch of two parallel calls.
	afterBatch := []llm.Message{
		user("first question"),
		assistant(call("c1", "add", `{}`), call("c2", "word_count", `{}`)),
		result("word_count", "4"),
		result("add", "5"),
	}
	tests := []struct {
		name string
		when scripted.When
		req  *llm.Request
		want bool
	}{
		{"empty when", scripted.When{}, request(), true},
		{"turn 1 on the first call", scripted.When{Turn: 1}, request(user("hi")), true},
		{"turn 1 after a batch", scripted.When{Turn: 1}, request(afterBatch...), false},
		{"turn 2 after a batch", scripted.When{Turn: 2}, request(afterBatch...), true},
		{"user matches", scripted.When{User: "(?i)ADD"}, request(user("please add 2 and 3")), true},
		{"user does not match", scripted.When{User: "^add"}, request(user("please add 2 and 3")), false},
		{"user is the last user message", scripted.When{User: "second"},
			request(user("first"), assistant(), user("second")), true},
		{"user ignores earlier user messages", scripted.When{User: "first"},
			request(user("first"), assistant(), user("second")), false},
		{"no user message is empty text", scripted.When{User: "^$"}, request(), true},
		{"tool in the batch, last position", scripted.When{Tool: "add"}, request(afterBatch...), true},
		{"tool in the batch, first position", scripted.When{Tool: "word_count"}, request(afterBatch...), true},
		{"tool not in the batch", scripted.When{Tool: "multiply"}, request(afterBatch...), false},
		{"tool without a batch", scripted.When{Tool: "add"},
			request(append(afterBatch[:4:4], assistant(), user("more"))...), false},
		{"tool of an earlier batch", scripted.When{Tool: "add"},
			request(append(afterBatch[:4:4], assistant(call("c3", "multiply", `{}`)), result("multiply", "15"))...), false},
		{"result of any tool", scripted.When{Result: "^4$"}, request(afterBatch...), true},
		{"result of the named tool", scripted.When{Tool: "add", Result: "^5$"}, request(afterBatch...), true},
		{"result of another tool", scripted.When{Tool: "add", Result: "^4$"}, request(afterBatch...), false},
		{"error true", scripted.When{Error: new(true)},
			request(user("q"), assistant(), result("add", "5"), failed("divide", "Error: division by zero")), true},
		{"error true without errors", scripted.When{Error: new(true)}, request(afterBatch...), false},
		{"error false", scripted.When{Error: new(false)}, request(afterBatch...), true},
		{"error of another tool", scripted.When{Tool: "add", Error: new(true)},
			request(user("q"), assistant(), result("add", "5"), failed("divide", "Error: division by zero")), false},
		{"error with result", scripted.When{Error: new(true), Result: "zero"},
			request(user("q"), assistant(), result("add", "5"), failed("divide", "Error: division by zero")), true},
		{"has_tool offered", scripted.When{HasTool: "add"},
			&llm.Request{Tools: []llm.ToolSpec{{Name: "multiply"}, {Name: "add"}}}, true},
		{"has_tool not offered", scripted.When{HasTool: "add"},
			&llm.Request{Tools: []llm.ToolSpec{{Name: "multiply"}}}, false},
		{"all conditions", scripted.When{Turn: 2, User: "first", Tool: "add", Result: "5", Error: new(false), HasTool: "add"},
			&llm.Request{Messages: afterBatch, Tools: []llm.ToolSpec{{Name: "add"}}}, true},
		{"all conditions but one", scripted.When{Turn: 2, User: "first", Tool: "add", Result: "5", Error: new(false), HasTool: "sub"},
			&llm.Request{Messages: afterBatch, Tools: []llm.ToolSpec{{Name: "add"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{
				{When: tt.when, Reply: scripted.Reply{Text: "hit"}},
				{Reply: scripted.Reply{Text: "miss"}},
			}})
			if got := collectText(t, p, tt.req) == "hit"; got != tt.want {
				t.Errorf("matched = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFirstMatchWins(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 2}, Reply: scripted.Reply{Text: "one"}},
		{When: scripted.When{User: "add"}, Reply: scripted.Reply{Text: "two"}},
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{Text: "three"}},
		{Reply: scripted.Reply{Text: "four"}},
	}})
	tests := []struct {
		req  *llm.Request
		want string
	}{
		{request(user("add")), "two"},
		{request(user("sub")), "three"},
		{request(user("add"), assistant()), "one"},
		{request(user("sub"), assistant(), assistant()), "four"},
	}
	for _, tt := range tests {
		if got := collectText(t, p, tt.req); got != tt.want {
			t.Errorf("answer to %v = %q, want %q", tt.req.Messages, got, tt.want)
		}
	}
}

func TestTemplates(t *testing.T) {
	conv := request(
		user("earlier question"),
		assistant(call("c1", "add", `{}`)),
		result("add", "1"),
		user("count 'the quick fox' please"),
		assistant(call("c2", "word_count", `{}`), call("c3", "add", `{}`), call("c4", "mean", `{}`)),
		result("word_count", "4 words"),
		result("add", "Result: 20.0"),
		result("mean", `"fox" <b>`),
	)
	tests := []struct {
		name, text, want string
	}{
		{"plain text", "no template", "no template"},
		{"result", `{{ result "add" }}`, "Result: 20.0"},
		{"result of a tool outside the batch", `[{{ result "multiply" }}]`, "[]"},
		{"results", `{{ results }}`, `4 words, Result: 20.0, "fox" <b>`},
		{"latest", `{{ latest "add" }}`, "Result: 20.0"},
		{"latest of a tool never called", `[{{ latest "floor" }}]`, "[]"},
		{"user", `{{ user }}`, "count 'the quick fox' please"},
		{"turn", `turn {{ turn }}`, "turn 3"},
		{"number", `{{ result "add" | number }}`, "20"},
		{"number keeps decimals and sign", `{{ number "x = -2.50e1 y" }}`, "-25"},
		{"json", `{{ result "mean" | json }}`, `"\"fox\" <b>"`},
		{"find group", "{{ find `'([^']+)'` user }}", "the quick fox"},
		{"find whole match", "{{ find `q[a-z]+` user }}", "quick"},
		{"find nothing", "[{{ find `zzz` user }}]", "[]"},
		{"or falls back", "{{ or (find `zzz` user) \"none\" }}", "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{
				Text:      tt.text,
				ToolCalls: []scripted.ToolCall{{Name: "echo", ArgumentsRaw: tt.text}},
			}}}})
			resp, err := llm.Collect(p.Stream(t.Context(), conv))
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			if resp.Text != tt.want {
				t.Errorf("text = %q, want %q", resp.Text, tt.want)
			}
			if got := resp.ToolCalls[0].Arguments; got != tt.want {
				t.Errorf("arguments_raw = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTemplateExecutionError(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Name: "mul", Reply: scripted.Reply{
		ToolCalls: []scripted.ToolCall{{Name: "ok"}, {Name: "multiply", ArgumentsRaw: `{"a": {{ result "add" | number }}}`}},
	}}}})
	_, err := llm.Collect(p.Stream(t.Context(), request(user("q"), assistant(), result("add", "none"))))
	want := `scripted: script "t": rule 1 "mul": template: reply.tool_calls[1].arguments_raw:1:24: ` +
		`executing "reply.tool_calls[1].arguments_raw" at <number>: error calling number: no number in "none"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func TestStreamChunks(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "shapes", Rules: []scripted.Rule{{Reply: scripted.Reply{
		Text: "The sum is  5.",
		ToolCalls: []scripted.ToolCall{
			{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}},
			{Name: "now", ID: "mine"},
			{Name: "say", ArgumentsRaw: `{"text":"héllo wörld ✓"}`},
		},
	}}}})
	req := &llm.Request{
		System:   "sys",
		Messages: []llm.Message{user("add 2 and 3")},
		Tools:    []llm.ToolSpec{{Name: "add", Description: "Adds.", Parameters: []byte(`{"type":"object"}`)}},
	}
	chunks, err := drain(p.Stream(t.Context(), req))
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	delta := func(i int, id, name, args string) llm.Chunk {
		return llm.Chunk{ToolCallDelta: &llm.ToolCallDelta{Index: i, ID: id, Name: name, Arguments: args}}
	}
	calls := []llm.ToolCall{
		call("call_1_0", "add", `{"a":2,"b":3}`),
		call("mine", "now", `{}`),
		call("call_1_2", "say", `{"text":"héllo wörld ✓"}`),
	}
	want := []llm.Chunk{
		{TextDelta: "The "}, {TextDelta: "sum "}, {TextDelta: "is  "}, {TextDelta: "5."},
		delta(0, "call_1_0", "add", ""), delta(0, "", "", `{"a":2,`), delta(0, "", "", `"b":3}`),
		delta(1, "mine", "now", ""), delta(1, "", "", `{}`),
		delta(2, "call_1_2", "say", ""), delta(2, "", "", `{"text":"héll`), delta(2, "", "", `o wörld ✓"}`),
		{Done: &llm.Response{
			Text:      "The sum is  5.",
			ToolCalls: calls,
			// Input: "sys" 3 + "user" 4 + 11 + "add" 3 + "Adds." 5 + 17 = 43 bytes.
			// Output: 14 + "add" 3 + 13 + "now" 3 + 2 + "say" 3 + 28 = 66 bytes.
			Usage:        llm.Usage{InputTokens: 11, OutputTokens: 17},
			FinishReason: "tool_calls",
			Model:        "scripted/shapes",
		}},
	}
	if diff := cmp.Diff(want, chunks); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
}

func TestCollectRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		reply scripted.Reply
		want  llm.Response
	}{
		{"text only", scripted.Reply{Text: "Hello there, world."},
			llm.Response{Text: "Hello there, world.", FinishReason: "stop"}},
		{"tool calls only", scripted.Reply{ToolCalls: []scripted.ToolCall{
			{Name: "mean", Arguments: map[string]any{"numbers": []any{1, 2.5, 3}}},
			{Name: "uppercase", Arguments: map[string]any{"text": "a <b> & c"}},
		}}, llm.Response{FinishReason: "tool_calls", ToolCalls: []llm.ToolCall{
			call("call_1_0", "mean", `{"numbers":[1,2.5,3]}`),
			call("call_1_1", "uppercase", `{"text":"a <b> & c"}`),
		}}},
		{"text and tool calls", scripted.Reply{Text: "Let me check.", ToolCalls: []scripted.ToolCall{{Name: "floor", ArgumentsRaw: `{"value": 2.7}`}}},
			llm.Response{Text: "Let me check.", FinishReason: "tool_calls", ToolCalls: []llm.ToolCall{call("call_1_0", "floor", `{"value": 2.7}`)}}},
		{"raw arguments verbatim", scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "add", ArgumentsRaw: `{"a": 2,`}}},
			llm.Response{FinishReason: "tool_calls", ToolCalls: []llm.ToolCall{call("call_1_0", "add", `{"a": 2,`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, scripted.Script{Name: "rt", Rules: []scripted.Rule{{Reply: tt.reply}}})
			req := request(user("go"))
			chunks, err := drain(p.Stream(t.Context(), req))
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			// Assemble the deltas the way a loop would.
			var text strings.Builder
			var calls []llm.ToolCall
			for _, c := range chunks[:len(chunks)-1] {
				if c.Done != nil {
					t.Fatalf("Done before the last chunk")
				}
				text.WriteString(c.TextDelta)
				if d := c.ToolCallDelta; d != nil {
					if d.Index == len(calls) {
						if d.ID == "" || d.Name == "" || d.Arguments != "" {
							t.Errorf("first delta of call %d = %+v, want ID and Name only", d.Index, *d)
						}
						calls = append(calls, llm.ToolCall{ID: d.ID, Name: d.Name})
						continue
					}
					if !utf8.ValidString(d.Arguments) {
						t.Errorf("arguments piece %q is not valid UTF-8", d.Arguments)
					}
					calls[d.Index].Arguments += d.Arguments
				}
			}
			resp, err := llm.Collect(p.Stream(t.Context(), req))
			if err != nil {
				t.Fatalf("Collect: %v", err)
			}
			if diff := cmp.Diff(chunks[len(chunks)-1].Done, resp); diff != "" {
				t.Errorf("Collect differs from the Done chunk (-chunk +collect):\n%s", diff)
			}
			if diff := cmp.Diff(&llm.Response{Text: text.String(), ToolCalls: calls}, resp,
				cmp.FilterPath(func(p cmp.Path) bool {
					f := p.Last().String()
					return f == ".Usage" || f == ".FinishReason" || f == ".Model"
				}, cmp.Ignore())); diff != "" {
				t.Errorf("deltas differ from the final answer (-deltas +final):\n%s", diff)
			}
			tt.want.Model = "scripted/rt"
			tt.want.Usage = resp.Usage
			if diff := cmp.Diff(&tt.want, resp); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			if resp.Usage.InputTokens <= 0 || resp.Usage.OutputTokens <= 0 {
				t.Errorf("usage = %+v, want non-zero", resp.Usage)
			}
		})
	}
}

func TestArgumentPieces(t *testing.T) {
	for _, args := range []string{"", "{}", `{"a"}`, `{"a": 1}`, `{"text":"ünïcödé ✓✓✓✓✓✓✓✓✓✓✓✓✓✓"}`, "\xff\xfe\xfd\xfc\xfb", strings.Repeat("x", 100)} {
		p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{
			ToolCalls: []scripted.ToolCall{{Name: "f", ArgumentsRaw: args}},
		}}}})
		chunks, err := drain(p.Stream(t.Context(), request()))
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		var pieces []string
		for _, c := range chunks[1 : len(chunks)-1] {
			pieces = append(pieces, c.ToolCallDelta.Arguments)
		}
		want := args
		if want == "" {
			want = "{}"
		}
		if got := strings.Join(pieces, ""); got != want {
			t.Errorf("pieces %q join to %q, want %q", pieces, got, want)
		}
		if len(want) > 4 && len(pieces) < 2 {
			t.Errorf("arguments %q came in %d piece(s), want at least 2", want, len(pieces))
		}
		for _, piece := range pieces {
			if piece == "" || len(piece) > 16 || (utf8.ValidString(want) && !utf8.ValidString(piece)) {
				t.Errorf("arguments %q: bad piece %q", want, piece)
			}
		}
	}
}

func TestDelay(t *testing.T) {
	script := scripted.Script{Name: "slow", Rules: []scripted.Rule{{Reply: scripted.Reply{Delay: 50 * time.Millisecond, Text: "late"}}}}
	t.Run("waits", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := mustNew(t, script)
			start := time.Now()
			resp, err := llm.Collect(p.Stream(t.Context(), request()))
			if err != nil || resp.Text != "late" {
				t.Fatalf("Collect = %+v, %v", resp, err)
			}
			if got := time.Since(start); got != 50*time.Millisecond {
				t.Errorf("answered after %v, want 50ms", got)
			}
		})
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := mustNew(t, script)
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(10*time.Millisecond, cancel)
			start := time.Now()
			chunks, err := drain(p.Stream(ctx, request()))
			if !errors.Is(err, context.Canceled) || len(chunks) != 0 {
				t.Errorf("stream = %v, %v; want no chunks and context.Canceled", chunks, err)
			}
			if got := time.Since(start); got != 10*time.Millisecond {
				t.Errorf("ended after %v, want 10ms", got)
			}
		})
	})
	t.Run("deadline while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := mustNew(t, script)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			_, err := llm.Collect(p.Stream(ctx, request()))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error = %v, want context.DeadlineExceeded", err)
			}
		})
	})
	t.Run("cancelled before", func(t *testing.T) {
		p := mustNew(t, script)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := llm.Collect(p.Stream(ctx, request()))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error = %v, want context.Canceled", err)
		}
		if n := len(p.Requests()); n != 0 {
			t.Errorf("recorded %d requests, want 0", n)
		}
	})
}

func TestCancelMidStream(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "one two three"}}}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []llm.Chunk
	var err error
	for c, e := range p.Stream(ctx, request()) {
		if e != nil {
			err = e
			break
		}
		got = append(got, c)
		cancel()
	}
	if !errors.Is(err, context.Canceled) || len(got) != 1 {
		t.Errorf("got %d chunks and %v, want 1 chunk then context.Canceled", len(got), err)
	}
}

func TestEarlyBreak(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "one two three"}}}})
	n := 0
	for _, err := range p.Stream(t.Context(), request()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Errorf("iterated %d times, want 1", n)
	}
}

func TestNoMatch(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "picky", Rules: []scripted.Rule{{When: scripted.When{User: "^never$"}, Reply: scripted.Reply{Text: "x"}}}})
	tests := []struct {
		name string
		req  *llm.Request
		want string
	}{
		{"no messages", request(),
			`scripted: no rule of script "picky" matches turn 1 (last message: none)`},
		{"user", request(user("hello\nthere")),
			`scripted: no rule of script "picky" matches turn 1 (last message: user "hello\nthere")`},
		{"tool result", request(user("q"), assistant(call("c", "add", "{}")), result("add", "5")),
			`scripted: no rule of script "picky" matches turn 2 (last message: tool "5")`},
		{"long text", request(user(strings.Repeat("abcdefghij", 7))),
			`scripted: no rule of script "picky" matches turn 1 (last message: user "` + strings.Repeat("abcdefghij", 6) + `…")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := llm.Collect(p.Stream(t.Context(), tt.req))
			if !errors.Is(err, scripted.ErrNoMatch) {
				t.Errorf("error %v does not wrap ErrNoMatch", err)
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("error = %v\nwant    %s", err, tt.want)
			}
		})
	}
}

func TestInjectedError(t *testing.T) {
	tests := []struct {
		name  string
		reply scripted.Reply
		want  []llm.Chunk
	}{
		{"error only", scripted.Reply{Error: "provider exploded"}, nil},
		{"after partial text", scripted.Reply{Text: "Half an", Error: "provider exploded"},
			[]llm.Chunk{{TextDelta: "Half "}, {TextDelta: "an"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: tt.reply}}})
			chunks, err := drain(p.Stream(t.Context(), request()))
			if !errors.Is(err, scripted.ErrInjected) || err.Error() != "scripted: injected failure: provider exploded" {
				t.Errorf("error = %v, want the injected failure", err)
			}
			if diff := cmp.Diff(tt.want, chunks); diff != "" {
				t.Errorf("chunks before the error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNilRequest(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "x"}}}})
	if _, err := llm.Collect(p.Stream(t.Context(), nil)); err == nil {
		t.Error("no error for a nil request")
	}
}

func TestNameAndModel(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "demo-2", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "x"}}}})
	if p.Name() != "scripted" {
		t.Errorf("Name = %q", p.Name())
	}
	resp, err := llm.Collect(p.Stream(t.Context(), &llm.Request{Model: "ignored"}))
	if err != nil || resp.Model != "scripted/demo-2" {
		t.Errorf("Collect = %+v, %v; want model scripted/demo-2", resp, err)
	}
}

func TestRequests(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "x"}}}})
	req := &llm.Request{
		System:       "sys",
		Messages:     []llm.Message{user("q"), assistant(call("c", "add", `{"a":1}`))},
		Tools:        []llm.ToolSpec{{Name: "add", Parameters: []byte(`{"type":"object"}`)}},
		OutputSchema: []byte(`{"type":"string"}`),
		Temperature:  new(0.5),
	}
	want := []llm.Request{{
		System:       "sys",
		Messages:     []llm.Message{user("q"), assistant(call("c", "add", `{"a":1}`))},
		Tools:        []llm.ToolSpec{{Name: "add", Parameters: []byte(`{"type":"object"}`)}},
		OutputSchema: []byte(`{"type":"string"}`),
		Temperature:  new(0.5),
	}}
	if _, err := llm.Collect(p.Stream(t.Context(), req)); err != nil {
		t.Fatal(err)
	}
	// A request is not changed once sent (llm.Request), so it is recorded as it is: the
	// provider copies nothing per call. What Requests returns are copies.
	got := p.Requests()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Requests (-want +got):\n%s", diff)
	}
	got[0].Messages[0].Text = "changed too"
	got[0].Tools[0].Parameters[0] = 'X'
	if diff := cmp.Diff(want, p.Requests()); diff != "" {
		t.Errorf("Requests changed through a returned copy (-want +got):\n%s", diff)
	}
}

func TestRequestsBounded(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "x"}}}})
	for i := range 1005 {
		if _, err := llm.Collect(p.Stream(t.Context(), request(user(fmt.Sprint(i))))); err != nil {
			t.Fatal(err)
		}
	}
	got := p.Requests()
	if len(got) != 1000 {
		t.Fatalf("kept %d requests, want 1000", len(got))
	}
	if first, last := got[0].Messages[0].Text, got[999].Messages[0].Text; first != "5" || last != "1004" {
		t.Errorf("kept requests %s..%s, want 5..1004", first, last)
	}
}

func TestConcurrentUse(t *testing.T) {
	p := mustNew(t, scripted.Script{Name: "t", Rules: []scripted.Rule{
		{When: scripted.When{Tool: "add"}, Reply: scripted.Reply{Text: `sum {{ result "add" }}`}},
		{Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "add", ArgumentsRaw: `{"n": "{{ user }}"}`}}}},
	}})
	const workers, runs = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*runs)
	for w := range workers {
		wg.Go(func() {
			for r := range runs {
				id := fmt.Sprintf("%d-%d", w, r)
				first, err := llm.Collect(p.Stream(t.Context(), request(user(id))))
				if err != nil {
					errs <- err
					continue
				}
				if want := `{"n": "` + id + `"}`; first.ToolCalls[0].Arguments != want {
					errs <- fmt.Errorf("arguments %q, want %q", first.ToolCalls[0].Arguments, want)
				}
				final, err := llm.Collect(p.Stream(t.Context(), request(user(id), assistant(first.ToolCalls...), result("add", id))))
				if err != nil {
					errs <- err
					continue
				}
				if final.Text != "sum "+id {
					errs <- fmt.Errorf("text %q, want %q", final.Text, "sum "+id)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(p.Requests()); n != 2*workers*runs {
		t.Errorf("recorded %d requests, want %d", n, 2*workers*runs)
	}
}

// TestRequestsRingKeepsTheLast: past its bound the provider keeps the newest requests,
// oldest first, without moving the others on every call.
func TestRequestsRingKeepsTheLast(t *testing.T) {
	p, err := scripted.New(scripted.Script{Name: "ring", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 1250 {
		for _, err := range p.Stream(ctx, &llm.Request{Model: fmt.Sprint(i), Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if i == 499 {
			if got := p.Requests(); len(got) != 500 || got[0].Model != "0" || got[499].Model != "499" {
				t.Fatalf("before the ring is full: %d requests, %q … %q", len(got), got[0].Model, got[len(got)-1].Model)
			}
		}
	}
	got := p.Requests()
	if len(got) != 1000 {
		t.Fatalf("kept %d requests, want 1000", len(got))
	}
	for i, r := range got {
		if want := fmt.Sprint(250 + i); r.Model != want {
			t.Fatalf("request %d is %q, want %q: the ring is out of order", i, r.Model, want)
		}
	}
}

// BenchmarkRecordFullRing is a model call once the ring of requests is full: recording
// one costs a copy of the request, not a shift of the thousand before it.
func BenchmarkRecordFullRing(b *testing.B) {
	p, err := scripted.New(scripted.Script{Name: "ring", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "hi"}}}
	call := func() {
		for _, err := range p.Stream(ctx, req) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	for range 1000 {
		call()
	}
	b.ReportAllocs()
	for b.Loop() {
		call()
	}
}

// Keep bounds the requests kept, and 0 keeps none.
func TestKeep(t *testing.T) {
	p, err := scripted.New(scripted.Script{Name: "k", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(text string) {
		for _, err := range p.Stream(context.Background(), &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: text}}}) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	p.Keep(2)
	for _, s := range []string{"a", "b", "c"} {
		ask(s)
	}
	got := p.Requests()
	if len(got) != 2 || got[0].Messages[0].Text != "b" || got[1].Messages[0].Text != "c" {
		t.Errorf("kept %v, want the last two, b then c", got)
	}
	p.Keep(0)
	ask("d")
	if n := len(p.Requests()); n != 0 {
		t.Errorf("Keep(0) kept %d requests", n)
	}
}
