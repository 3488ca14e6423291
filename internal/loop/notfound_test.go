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

func TestNewAutoCorrectionDefaults(t *testing.T) {
	want := &loop.AutoCorrection{MaxRetries: 3, MinTokenLength: 3, MinTokenSimilarity: 0.25}
	if diff := cmp.Diff(want, loop.NewAutoCorrection(), cmp.AllowUnexported(loop.AutoCorrection{})); diff != "" {
		t.Errorf("NewAutoCorrection (-want +got):\n%s", diff)
	}
}

// TestAutoCorrectionFeedback pins the feedback text and its suggestions.
func TestAutoCorrectionFeedback(t *testing.T) {
	rag := []string{"vectorSearch", "webSearch", "calculator"}
	tests := []struct {
		name      string
		policy    *loop.AutoCorrection // nil: the default
		requested string
		available []string
		want      string
	}{
		{
			name: "prefixed name", requested: "ragbot_vectorSearch", available: rag,
			want: "Tool 'ragbot_vectorSearch' does not exist. Did you mean 'vectorSearch'? Available tools: [vectorSearch, webSearch, calculator]. Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable.",
		},
		{
			name: "dotted prefix", requested: "functions.vectorSearch", available: rag,
			want: notFoundText("functions.vectorSearch", " Did you mean 'vectorSearch'?", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "wrapped name", requested: "my_vectorSearch_tool", available: rag,
			want: notFoundText("my_vectorSearch_tool", " Did you mean 'vectorSearch'?", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "upper case", requested: "VECTORSEARCH", available: rag,
			want: notFoundText("VECTORSEARCH", " Did you mean 'vectorSearch'?", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "snake case", requested: "vector_search", available: rag,
			want: notFoundText("vector_search", " Did you mean 'vectorSearch'?", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "several matches, unrelated left out", requested: "search", available: rag,
			want: notFoundText("search", " Possible matches: ['vectorSearch', 'webSearch'].", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "at most three matches", requested: "search",
			available: []string{"webSearch", "fileSearch", "codeSearch", "imageSearch", "calculator"},
			want: notFoundText("search", " Possible matches: ['webSearch', 'fileSearch', 'codeSearch'].",
				"webSearch, fileSearch, codeSearch, imageSearch, calculator"),
		},
		{
			name: "nothing similar", requested: "weather", available: rag,
			want: notFoundText("weather", "", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "empty request", requested: "", available: rag,
			want: notFoundText("", "", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "two-character request", requested: "ve", available: rag,
			want: notFoundText("ve", "", "vectorSearch, webSearch, calculator"),
		},
		{
			name: "two-character tool names", requested: "ab_tool", available: []string{"ab", "cd"},
			want: notFoundText("ab_tool", "", "ab, cd"),
		},
		{
			name: "min token length 1 admits two-character names", requested: "ab_tool", available: []string{"ab", "cd"},
			policy: &loop.AutoCorrection{MaxRetries: 3, MinTokenLength: 1, MinTokenSimilarity: 0.25},
			want:   notFoundText("ab_tool", " Did you mean 'ab'?", "ab, cd"),
		},
		{
			// webSearch scores 1/4 against web_lookup_tool: admitted at 0.25, not at 0.5.
			name: "similarity 0.25 admits a weak match", requested: "web_lookup_tool", available: []string{"webSearch"},
			want: notFoundText("web_lookup_tool", " Did you mean 'webSearch'?", "webSearch"),
		},
		{
			name: "similarity 0.5 suppresses a weak match", requested: "web_lookup_tool", available: []string{"webSearch"},
			policy: &loop.AutoCorrection{MaxRetries: 3, MinTokenLength: 3, MinTokenSimilarity: 0.5},
			want:   notFoundText("web_lookup_tool", "", "webSearch"),
		},
		{
			name: "similarity 0.1 admits weaker matches", requested: "web_lookup_tool_now", available: []string{"webSearch"},
			policy: &loop.AutoCorrection{MaxRetries: 3, MinTokenLength: 3, MinTokenSimilarity: 0.1},
			want:   notFoundText("web_lookup_tool_now", " Did you mean 'webSearch'?", "webSearch"),
		},
		{
			name: "no tools", requested: "anything", available: nil,
			want: notFoundText("anything", "", ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p == nil {
				p = loop.NewAutoCorrection()
			}
			got, err := p.Handle(tt.requested, tt.available)
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if got != tt.want {
				t.Errorf("Handle =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestAutoCorrectionCounter checks the consecutive-miss counter: the fourth miss in a
// row ends the loop, and a found tool starts the count again.
func TestAutoCorrectionCounter(t *testing.T) {
	const miss, found = "miss", "found"
	tests := []struct {
		name    string
		retries int // 0: the default
		steps   []string
		// wantErrAt is the 0-based index of the step that returns an error; -1 for none.
		wantErrAt int
	}{
		{name: "fourth consecutive miss", steps: []string{miss, miss, miss, miss}, wantErrAt: 3},
		{name: "three misses are fine", steps: []string{miss, miss, miss}, wantErrAt: -1},
		{name: "a found tool resets", steps: []string{miss, miss, miss, found, miss, miss, miss}, wantErrAt: -1},
		{name: "reset then four", steps: []string{miss, miss, found, miss, miss, miss, miss}, wantErrAt: 6},
		{name: "one retry", retries: 1, steps: []string{miss, miss}, wantErrAt: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := loop.NewAutoCorrection()
			if tt.retries > 0 {
				p.MaxRetries = tt.retries
			}
			errAt := -1
			for i, s := range tt.steps {
				if s == found {
					p.Found()
					continue
				}
				_, err := p.Handle("x", []string{"a", "b"})
				if err != nil {
					errAt = i
					var nf *loop.ToolNotFoundError
					if !errors.As(err, &nf) || err.Error() != "Tool 'x' not found. Available tools: [a, b]" {
						t.Errorf("error = %v, want the *ToolNotFoundError for x", err)
					}
					break
				}
			}
			if errAt != tt.wantErrAt {
				t.Errorf("error at step %d, want %d", errAt, tt.wantErrAt)
			}
		})
	}
}

// TestRunNotFoundCounter checks the counter through the loop: a found call resets it,
// and every loop starts with a fresh one.
func TestRunNotFoundCounter(t *testing.T) {
	known := tool.New("known", "exists", schema.Empty(), okCall("ok"))
	missTurns := func(turns ...int) []scripted.Rule {
		var rs []scripted.Rule
		for _, n := range turns {
			rs = append(rs, onTurn(n, calls(raw("ghost", `{}`))))
		}
		return rs
	}

	t.Run("a found call resets the count", func(t *testing.T) {
		rules := append(missTurns(1, 2, 3), onTurn(4, calls(raw("known", `{}`))))
		rules = append(rules, missTurns(5, 6, 7)...)
		rules = append(rules, onTurn(8, text("done")))
		res, err := loop.Run(t.Context(), loop.Options{Provider: newScript(t, rules...)}, loop.Input{
			Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{known},
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Text != "done" || res.Iterations != 8 {
			t.Errorf("Run = %q after %d iterations, want done after 8", res.Text, res.Iterations)
		}
	})

	t.Run("a found call in the same turn resets the count", func(t *testing.T) {
		rules := []scripted.Rule{
			onTurn(1, calls(raw("ghost", `{}`), raw("ghost", `{}`), raw("ghost", `{}`), raw("known", `{}`), raw("ghost", `{}`))),
			onTurn(2, calls(raw("ghost", `{}`), raw("ghost", `{}`))),
			onTurn(3, text("done")),
		}
		res, err := loop.Run(t.Context(), loop.Options{Provider: newScript(t, rules...)}, loop.Input{
			Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{known},
		})
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Text != "done" {
			t.Errorf("Run text = %q, want done", res.Text)
		}
	})

	t.Run("each loop starts fresh", func(t *testing.T) {
		// Three misses per loop: fine each time, though six in a row across loops.
		p := newScript(t, append(missTurns(1, 2, 3), onTurn(4, text("gave up")))...)
		for i := range 2 {
			res, err := loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{
				Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{known},
			})
			if err != nil {
				t.Fatalf("loop %d: %v", i+1, err)
			}
			if res.Text != "gave up" {
				t.Errorf("loop %d text = %q, want gave up", i+1, res.Text)
			}
		}
	})

	t.Run("a custom policy is used", func(t *testing.T) {
		p := newScript(t, missTurns(1)...)
		_, err := loop.Run(t.Context(), loop.Options{Provider: p, NotFound: throwAtOnce{}}, loop.Input{
			Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{known},
		})
		var nf *loop.ToolNotFoundError
		if !errors.As(err, &nf) || nf.Requested != "ghost" {
			t.Fatalf("Run error = %v, want a *ToolNotFoundError for ghost", err)
		}
		if diff := cmp.Diff([]string{"known"}, nf.Available); diff != "" {
			t.Errorf("available (-want +got):\n%s", diff)
		}
	})
}

// throwAtOnce is a policy that ends the loop at the first unknown tool.
type throwAtOnce struct{}

func (throwAtOnce) Handle(requested string, available []string) (string, error) {
	return "", &loop.ToolNotFoundError{Requested: requested, Available: available}
}
func (throwAtOnce) Found() {}

// TestEndingMissStillFinishesEveryStartedCall: when an unknown tool ends the loop, the
// valid calls the model made before it in the same turn never run, and each still gets
// its finished event, so that a client never waits on a call that was started.
func TestEndingMissStillFinishesEveryStartedCall(t *testing.T) {
	ran := false
	known := tool.New("known", "Known.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		ran = true
		return tool.Text("ok"), nil
	})
	p := newScript(t, onTurn(1, calls(raw("known", `{}`), raw("ghost", `{}`))))
	started, finished := map[string]bool{}, map[string]loop.ToolCallFinished{}
	_, err := loop.Run(t.Context(), loop.Options{Provider: p, NotFound: throwAtOnce{}, Observer: func(ev loop.Event) {
		switch x := ev.(type) {
		case loop.ToolCallStarted:
			started[x.Call.ID] = true
		case loop.ToolCallFinished:
			finished[x.Call.ID] = x
		}
	}}, loop.Input{Messages: []llm.Message{user("hi")}, Tools: []tool.Tool{known}})
	var nf *loop.ToolNotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("Run error = %v, want a *ToolNotFoundError", err)
	}
	if ran {
		t.Error("a call of the turn that ended the loop ran")
	}
	if len(started) != 2 || len(finished) != 2 {
		t.Fatalf("started %v, finished %v: every started call must finish", started, finished)
	}
	for id := range started {
		if _, ok := finished[id]; !ok {
			t.Errorf("call %s started and never finished", id)
		}
	}
	if f := finished["call_1_0"]; f.Outcome != loop.OutcomeError || !strings.Contains(f.Content, "not run") {
		t.Errorf("the valid call's finished event = %+v", f)
	}
}
