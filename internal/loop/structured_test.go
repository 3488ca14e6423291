package loop_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

const personSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`

func TestStructuredOutput(t *testing.T) {
	schema, err := loop.CompileOutputSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		replies   []string
		want      string
		wantErr   string
		wantTurns int
	}{
		{"valid", []string{`{"name":"Ada","age":36}`}, `{"age":36,"name":"Ada"}`, "", 1},
		{"fenced", []string{"```json\n{\"name\":\"Ada\",\"age\":36}\n```"}, `{"age":36,"name":"Ada"}`, "", 1},
		{"corrected", []string{`{"name":"Ada"}`, `{"name":"Ada","age":36}`}, `{"age":36,"name":"Ada"}`, "", 2},
		{"not JSON then fixed", []string{`Ada is 36`, `{"name":"Ada","age":36}`}, `{"age":36,"name":"Ada"}`, "", 2},
		{"wrong twice", []string{`{"name":"Ada"}`, `{"name":"Ada","age":"old"}`}, "", `the final answer does not satisfy the output schema: property "age": expected integer, got string`, 2},
		{"trailing text", []string{`{"name":"Ada","age":36} done`, `still wrong`}, "", "the final answer does not satisfy the output schema: invalid JSON", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rules []scripted.Rule
			for i, r := range tc.replies {
				rules = append(rules, onTurn(i+1, text(r)))
			}
			p := newScript(t, rules...)
			res, err := loop.Run(t.Context(), loop.Options{Provider: p, OutputSchema: schema}, loop.Input{Messages: []llm.Message{user("who?")}})
			reqs := p.Requests()
			if len(reqs) != tc.wantTurns {
				t.Errorf("model calls = %d, want %d", len(reqs), tc.wantTurns)
			}
			for _, r := range reqs {
				if string(r.OutputSchema) != personSchema {
					t.Errorf("request output schema = %s", r.OutputSchema)
				}
			}
			if tc.wantErr != "" {
				var se *loop.OutputSchemaError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want *OutputSchemaError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want {
				t.Errorf("text = %q, want %q", res.Text, tc.want)
			}
			if tc.wantTurns == 2 {
				fix := reqs[1].Messages[len(reqs[1].Messages)-1]
				if fix.Role != llm.RoleUser || !strings.HasPrefix(fix.Text, "Your answer cannot be used: ") || !strings.HasSuffix(fix.Text, "Reply again with only a JSON value that matches the required JSON schema, with no other text.") {
					t.Errorf("corrective message = %+v", fix)
				}
			}
		})
	}
}

func TestStructuredOutputReturnDirect(t *testing.T) {
	schema, err := loop.CompileOutputSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	good := r.fixed("good", tool.Text(`{"name":"Bo","age":3}`), tool.ReturnDirect())
	bad := r.fixed("bad", tool.Text(`nope`), tool.ReturnDirect())
	for _, tc := range []struct {
		call    string
		want    string
		wantErr bool
	}{{"good", `{"age":3,"name":"Bo"}`, false}, {"bad", "", true}} {
		p := newScript(t, onTurn(1, calls(raw(tc.call, `{}`))))
		res, err := loop.Run(t.Context(), loop.Options{Provider: p, OutputSchema: schema}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{good, bad}})
		if tc.wantErr {
			var se *loop.OutputSchemaError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), "return-direct") {
				t.Errorf("%s: err = %v", tc.call, err)
			}
			continue
		}
		if err != nil || res.Text != tc.want || !res.ReturnDirect {
			t.Errorf("%s: res = %+v, err = %v", tc.call, res, err)
		}
	}
}

func TestCompileOutputSchemaErrors(t *testing.T) {
	for _, bad := range []string{`{`, `{"type":"objekt"}`, `{"$ref":"https://example.com/s.json"}`} {
		if _, err := loop.CompileOutputSchema([]byte(bad)); !errors.Is(err, loop.ErrInvalidOutputSchema) {
			t.Errorf("CompileOutputSchema(%s) = %v, want ErrInvalidOutputSchema", bad, err)
		}
	}
}

func TestBudget(t *testing.T) {
	cost := func(model string, u llm.Usage) float64 {
		return float64(u.InputTokens)*1e-6 + float64(u.OutputTokens)*2e-6
	}
	r := &recorder{}
	work := r.fixed("work", tool.Text("ok"))
	for _, tc := range []struct {
		name   string
		budget loop.Budget
		what   string
	}{
		{"tokens", loop.Budget{MaxTokens: 10}, "tokens"},
		{"cost", loop.Budget{MaxCostUSD: 1e-9}, "cost"},
		{"none", loop.Budget{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newScript(t, onTurn(1, calls(raw("work", `{}`))), onTurn(2, text("done")))
			var costs []float64
			res, err := loop.Run(t.Context(), loop.Options{Provider: p, Budget: tc.budget, Cost: cost, Observer: func(e loop.Event) {
				if m, ok := e.(loop.ModelCalled); ok {
					costs = append(costs, m.CostUSD)
				}
			}}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{work}})
			if tc.what == "" {
				if err != nil || res.Text != "done" || res.CostUSD <= 0 || len(costs) != 2 {
					t.Fatalf("res = %+v, err = %v, costs %v", res, err, costs)
				}
				return
			}
			var be *loop.BudgetExceededError
			if !errors.As(err, &be) || be.What != tc.what {
				t.Fatalf("err = %v, want budget exceeded on %s", err, tc.what)
			}
			if len(r.invocations()) != 0 {
				t.Errorf("tools ran after the budget was exceeded: %v", r.invocations())
			}
		})
	}
}

// TestSharedBudget: loops that share a Spending check the budget against what all of
// them spent: the second loop's first model call is over the run's token limit, and its
// actions count with the first loop's.
func TestSharedBudget(t *testing.T) {
	r := &recorder{}
	work := r.fixed("work", tool.Text("ok"))
	shared := &loop.Spending{}
	run := func(b loop.Budget) error {
		p := newScript(t, onTurn(1, calls(raw("work", `{}`))), onTurn(2, text("done")))
		_, err := loop.Run(t.Context(), loop.Options{Provider: p, Budget: b}, loop.Input{Messages: []llm.Message{user("go")}, Tools: []tool.Tool{work}})
		return err
	}
	if err := run(loop.Budget{MaxActions: 1, Shared: shared}); err != nil {
		t.Fatal(err)
	}
	tokens, _, actions := shared.Totals()
	if tokens == 0 || actions != 1 {
		t.Fatalf("shared totals: %d tokens, %d actions", tokens, actions)
	}
	var be *loop.BudgetExceededError
	if err := run(loop.Budget{MaxActions: 1, Shared: shared}); !errors.As(err, &be) || be.What != "actions" {
		t.Errorf("second loop: %v, want the shared action budget used up", err)
	}
	// Once a loop used the shared budget up, every loop sharing it stops at its next
	// model call with that error.
	if err := run(loop.Budget{Shared: shared}); !errors.As(err, &be) || be.What != "actions" || r.invocations() == nil {
		t.Errorf("third loop: %v, want the action budget a loop used up", err)
	}
	tokensOnly := &loop.Spending{}
	if err := run(loop.Budget{Shared: tokensOnly}); err != nil {
		t.Fatal(err)
	}
	if err := run(loop.Budget{MaxTokens: tokens + 1, Shared: tokensOnly}); !errors.As(err, &be) || be.What != "tokens" {
		t.Errorf("a loop over the shared tokens: %v, want the token budget exceeded", err)
	}
	if err := run(loop.Budget{MaxTokens: tokens + 1}); err != nil {
		t.Errorf("a loop of its own: %v", err)
	}
}
