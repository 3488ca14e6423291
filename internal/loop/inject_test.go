package loop_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// offered returns the names of the tools of each recorded request.
func offered(reqs []llm.Request) [][]string {
	out := make([][]string, len(reqs))
	for i, r := range reqs {
		out[i] = []string{}
		for _, s := range r.Tools {
			out[i] = append(out[i], s.Name)
		}
	}
	return out
}

// toolsChanged returns the ToolsChanged events among evs.
func toolsChanged(evs []loop.Event) []loop.ToolsChanged {
	var out []loop.ToolsChanged
	for _, e := range evs {
		if tc, ok := e.(loop.ToolsChanged); ok {
			out = append(out, tc)
		}
	}
	return out
}

// onCall is a strategy that, after a successful call of the named tool, applies inj.
func onCall(name string, inj loop.Injection) loop.Strategy {
	return loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		if ic.Tool.Definition().Name != name {
			return loop.Injection{}, nil
		}
		return inj, nil
	})
}

// mark is a decorator that records what it wrapped and adds nothing else.
type mark struct {
	mu      sync.Mutex
	wrapped []string
}

func (m *mark) decorate(t tool.Tool) tool.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.wrapped = append(m.wrapped, t.Definition().Name)
	return tool.WithDescription(t, "decorated "+t.Definition().Description)
}

func TestInjectionApplied(t *testing.T) {
	r := &recorder{}
	opener := r.fixed("open", tool.Text("opened"))
	keep := r.fixed("keep", tool.Text("kept"))
	a, b := r.fixed("a", tool.Text("A")), r.fixed("b", tool.Text("B"))
	dupKeep := r.fixed("keep", tool.Text("second keep"))
	p := newScript(t,
		onTurn(1, calls(raw("open", `{}`))),
		onTurn(2, calls(raw("a", `{}`), raw("open", `{}`))),
		onTurn(3, text("done")),
	)
	m := &mark{}
	ev := &events{}
	res, err := loop.Run(t.Context(), loop.Options{
		Provider: p, LoopID: "loop-1", Observer: ev.observe, Decorate: m.decorate,
		// Removal is by name (a wrapper of the facade counts); a duplicate name is dropped.
		Strategies: []loop.Strategy{onCall("open", loop.Injection{Add: []tool.Tool{a, dupKeep, b}, Remove: []tool.Tool{tool.WithNote(opener, "x")}})},
	}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{opener, keep}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Text != "done" {
		t.Errorf("Text = %q", res.Text)
	}
	want := [][]string{{"open", "keep"}, {"keep", "a", "b"}, {"keep", "a", "b"}}
	if diff := cmp.Diff(want, offered(p.Requests())); diff != "" {
		t.Errorf("offered tools (-want +got):\n%s", diff)
	}
	if got := p.Requests()[1].Tools[1].Description; got != "decorated the a tool" {
		t.Errorf("an injected tool is offered decorated: %q", got)
	}
	if diff := cmp.Diff([]string{"a", "keep", "b"}, m.wrapped); diff != "" {
		t.Errorf("Decorate calls (-want +got):\n%s", diff)
	}
	wantEvents := []loop.ToolsChanged{{Iteration: 1, LoopID: "loop-1", Added: []string{"a", "b"}, Removed: []string{"open"}, Tools: []string{"keep", "a", "b"}}}
	if diff := cmp.Diff(wantEvents, toolsChanged(ev.all())); diff != "" {
		t.Errorf("ToolsChanged (-want +got):\n%s", diff)
	}
	// Turn 2: the removed name gets the not-found feedback, listing the new set.
	if got := res.History[5]; got.Text != notFoundText("open", "", "keep, a, b") || !got.IsError {
		t.Errorf("call of a removed tool: %+v", got)
	}
}

// TestInjectionBatch checks when strategies run in a batch: after each successful call,
// in call order, once the batch has run, with the history up to that call.
func TestInjectionBatch(t *testing.T) {
	r := &recorder{}
	first := r.fixed("first", tool.Text("1"))
	failing := r.fixed("failing", tool.Error("no"))
	strict := r.fn("strict", schema.Params(schema.Integer("n", "n")), func(context.Context, string) (tool.Result, error) { return tool.Text("s"), nil })
	second := r.fixed("second", tool.Text("2"))
	early := r.fixed("early", tool.Text("E"))
	late := r.fixed("late", tool.Text("L"))
	type seen struct {
		Tool      string
		Input     string
		Content   string
		Result    tool.Result
		Iteration int
		Current   []string
		History   []string // tool messages only
		CallID    string
		LoopID    string
		Tenant    string
	}
	var got []seen
	spy := loop.StrategyFunc(func(ctx context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		s := seen{Tool: ic.Tool.Definition().Name, Input: ic.Input, Content: ic.Content, Result: ic.Result, Iteration: ic.Iteration}
		for _, c := range ic.Current {
			s.Current = append(s.Current, c.Definition().Name)
		}
		for _, m := range ic.History {
			if m.Role == llm.RoleTool {
				s.History = append(s.History, m.ToolName+"="+m.Text)
			}
		}
		info, _ := tool.CallInfoFrom(ctx)
		s.CallID, s.LoopID = info.CallID, toolctx.FromContext(ctx).LoopID()
		s.Tenant, _ = toolctx.FromContext(ctx).Get("tenant")
		got = append(got, s)
		if s.Tool == "first" {
			return loop.Injection{Add: []tool.Tool{early}}, nil
		}
		return loop.Injection{Add: []tool.Tool{late}}, nil
	})
	p := newScript(t,
		onTurn(1, calls(raw("first", `{ }`), raw("early", `{}`), raw("failing", `{}`), raw("strict", `{"n":"x"}`), raw("unknown", `{}`), raw("second", `{"z":1, "a":2}`))),
		onTurn(2, calls(raw("early", `{}`))),
		onTurn(3, text("done")),
	)
	ev := &events{}
	_, err := loop.Run(t.Context(), loop.Options{
		Provider: p, LoopID: "L", RunID: "R", Context: toolctx.MustOf("tenant", "acme"), Observer: ev.observe, Strategies: []loop.Strategy{spy},
	}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{first, failing, strict, second}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []seen{
		{Tool: "first", Input: "{}", Content: "1", Result: tool.Text("1"), Iteration: 1,
			Current: []string{"first", "failing", "strict", "second"}, CallID: "call_1_0", LoopID: "L", Tenant: "acme"},
		{Tool: "second", Input: `{"a":2,"z":1}`, Content: "2", Result: tool.Text("2"), Iteration: 1,
			Current: []string{"first", "failing", "strict", "second", "early"},
			History: []string{
				"first=1",
				"early=" + notFoundText("early", "", "first, failing, strict, second"),
				"failing=Error: no",
				`strict=Error: invalid arguments for tool 'strict': property "n": expected integer, got string. Call it again with arguments that match its schema.`,
				"unknown=" + notFoundText("unknown", "", "first, failing, strict, second"),
			},
			CallID: "call_1_5", LoopID: "L", Tenant: "acme"},
		{Tool: "early", Input: "{}", Content: "E", Result: tool.Text("E"), Iteration: 2,
			Current: []string{"first", "failing", "strict", "second", "early", "late"},
			History: []string{"first=1", "early=" + notFoundText("early", "", "first, failing, strict, second"), "failing=Error: no",
				`strict=Error: invalid arguments for tool 'strict': property "n": expected integer, got string. Call it again with arguments that match its schema.`,
				"unknown=" + notFoundText("unknown", "", "first, failing, strict, second"), "second=2"},
			CallID: "call_2_0", LoopID: "L", Tenant: "acme"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the strategy saw (-want +got):\n%s", diff)
	}
	wantOffered := [][]string{
		{"first", "failing", "strict", "second"},
		{"first", "failing", "strict", "second", "early", "late"},
		{"first", "failing", "strict", "second", "early", "late"},
	}
	if diff := cmp.Diff(wantOffered, offered(p.Requests())); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	wantEvents := []loop.ToolsChanged{
		{Iteration: 1, LoopID: "L", Added: []string{"early"}, Tools: []string{"first", "failing", "strict", "second", "early"}},
		{Iteration: 1, LoopID: "L", Added: []string{"late"}, Tools: []string{"first", "failing", "strict", "second", "early", "late"}},
	}
	if diff := cmp.Diff(wantEvents, toolsChanged(ev.all())); diff != "" {
		t.Errorf("ToolsChanged (-want +got):\n%s", diff)
	}
}

func TestInjectionNotAfterReturnDirect(t *testing.T) {
	r := &recorder{}
	answer := r.fixed("answer", tool.Text("42"), tool.ReturnDirect())
	evaluated := false
	p := newScript(t, onTurn(1, calls(raw("answer", `{}`))))
	res, err := loop.Run(t.Context(), loop.Options{Provider: p, Strategies: []loop.Strategy{loop.StrategyFunc(
		func(context.Context, loop.InjectionContext) (loop.Injection, error) {
			evaluated = true
			return loop.Injection{}, nil
		})}}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{answer}})
	if err != nil || res.Text != "42" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if evaluated {
		t.Error("strategies ran although the loop ended with a return-direct result")
	}
}

func TestChain(t *testing.T) {
	a, b, c := tool.New("a", "", schema.Empty(), nil), tool.New("b", "", schema.Empty(), nil), tool.New("c", "", schema.Empty(), nil)
	fixed := func(inj loop.Injection, err error) loop.Strategy {
		return loop.StrategyFunc(func(context.Context, loop.InjectionContext) (loop.Injection, error) { return inj, err })
	}
	var seen []string
	spy := func(name string) loop.Strategy {
		return loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
			seen = append(seen, name+":"+ic.Input)
			return loop.Injection{}, nil
		})
	}
	boom := errors.New("boom")
	tests := []struct {
		name       string
		strategies []loop.Strategy
		want       []string // add names, then "-" and remove names
		wantErr    bool
	}{
		{"empty", nil, []string{"-"}, false},
		{"nil skipped", []loop.Strategy{nil}, []string{"-"}, false},
		{"concatenated in order", []loop.Strategy{
			fixed(loop.Injection{Add: []tool.Tool{a}, Remove: []tool.Tool{c}}, nil),
			fixed(loop.Injection{Add: []tool.Tool{b}}, nil),
		}, []string{"a", "b", "-", "c"}, false},
		{"a failing strategy contributes nothing", []loop.Strategy{
			fixed(loop.Injection{Add: []tool.Tool{a}}, boom),
			fixed(loop.Injection{Add: []tool.Tool{b}}, nil),
		}, []string{"b", "-"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj, err := loop.Chain(tt.strategies...).Evaluate(t.Context(), loop.InjectionContext{})
			got := []string{}
			for _, x := range inj.Add {
				got = append(got, x.Definition().Name)
			}
			got = append(got, "-")
			for _, x := range inj.Remove {
				got = append(got, x.Definition().Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if (err != nil) != tt.wantErr || (tt.wantErr && !errors.Is(err, boom)) {
				t.Errorf("err = %v", err)
			}
		})
	}
	if _, err := loop.Chain(spy("one"), spy("two")).Evaluate(t.Context(), loop.InjectionContext{Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"one:x", "two:x"}, seen); diff != "" {
		t.Errorf("every strategy sees the same context (-want +got):\n%s", diff)
	}
	if !(loop.Injection{}).IsZero() || (loop.Injection{Remove: []tool.Tool{a}}).IsZero() {
		t.Error("IsZero")
	}
}

// TestInjectionFailures: a strategy that fails or panics is logged, changes nothing, and
// the loop goes on; the other strategies still apply.
func TestInjectionFailures(t *testing.T) {
	r := &recorder{}
	go1 := r.fixed("go", tool.Text("went"))
	extra := r.fixed("extra", tool.Text("x"))
	other := r.fixed("other", tool.Text("o"))
	tests := []struct {
		name     string
		strategy loop.Strategy
		wantLog  string
		want     []string
	}{
		{"error", loop.StrategyFunc(func(context.Context, loop.InjectionContext) (loop.Injection, error) {
			return loop.Injection{Add: []tool.Tool{extra}}, errors.New("remote selector down")
		}), "remote selector down", []string{"go", "other"}},
		{"panic", loop.StrategyFunc(func(context.Context, loop.InjectionContext) (loop.Injection, error) {
			panic("bug")
		}), "injection strategy panicked: bug", []string{"go", "other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			p := newScript(t, onTurn(1, calls(raw("go", `{}`))), onTurn(2, text("done")))
			res, err := loop.Run(t.Context(), loop.Options{
				Provider: p, Strategies: []loop.Strategy{tt.strategy, onCall("go", loop.Injection{Add: []tool.Tool{other}})}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{go1}})
			if err != nil || res.Text != "done" {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			if !strings.Contains(logs.String(), "injection strategy failed") || !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log = %s", logs.String())
			}
			if diff := cmp.Diff(tt.want, offered(p.Requests())[1]); diff != "" {
				t.Errorf("offered on turn 2 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNoStrategies: without strategies the set never changes and no event says so.
func TestNoStrategies(t *testing.T) {
	r := &recorder{}
	p := newScript(t, onTurn(1, calls(raw("a", `{}`))), onTurn(2, text("done")))
	ev := &events{}
	_, err := loop.Run(t.Context(), loop.Options{Provider: p, Observer: ev.observe},
		loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{r.fixed("a", tool.Text("A"))}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"a"}, {"a"}}, offered(p.Requests())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := toolsChanged(ev.all()); len(got) != 0 {
		t.Errorf("ToolsChanged = %+v", got)
	}
}

// A facade's shortcut call (arguments naming a child) of a return-direct child ends the
// loop with the child's result, as a call of the child itself would.
func TestShortcutToReturnDirectChild(t *testing.T) {
	r := &recorder{}
	answer := r.fixed("answer", tool.Text("42"), tool.ReturnDirect())
	other := r.fixed("other", tool.Text("no"))
	f := tool.Of("desk", "The desk.", []tool.Tool{answer, other})
	p := newScript(t, onTurn(1, calls(raw("desk", `{"answer":{}}`))), onTurn(2, text("not reached")))
	res, err := loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{f}})
	if err != nil || res.Text != "42" || !res.ReturnDirect || res.Iterations != 1 {
		t.Fatalf("Run = %+v, %v; want the child's result, returned directly", res, err)
	}
	p = newScript(t, onTurn(1, calls(raw("desk", `{"other":{}}`))), onTurn(2, text("done")))
	res, err = loop.Run(t.Context(), loop.Options{Provider: p}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{f}})
	if err != nil || res.Text != "done" || res.ReturnDirect {
		t.Fatalf("Run = %+v, %v; want the model's answer after an ordinary child's shortcut", res, err)
	}
}
