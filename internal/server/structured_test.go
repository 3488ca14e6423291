package server

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const citySchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`

// TestRunStructuredOutput: a run with an output schema gets a JSON answer; an answer that
// never fits fails the run with OUTPUT_SCHEMA; a bad schema is an invalid request.
func TestRunStructuredOutput(t *testing.T) {
	script := scripted.Script{Name: "json", Rules: []scripted.Rule{
		{When: scripted.When{User: "good"}, Reply: scripted.Reply{Text: `{"city":"Oslo"}`}},
		{When: scripted.When{User: "bad|cannot be used"}, Reply: scripted.Reply{Text: `Oslo`}},
	}}
	e := newEnv(t, envOptions{script: script})
	ctx := testContext(t)

	final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "good", OutputSchemaJson: citySchema}, nil)
	if err != nil || final.GetText() != `{"city":"Oslo"}` {
		t.Fatalf("good run = %v, %v", final, err)
	}
	if got := string(e.model.Requests()[0].OutputSchema); got != citySchema {
		t.Errorf("the model was sent schema %s", got)
	}

	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "bad", OutputSchemaJson: citySchema}, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrOutputSchema) || !errors.As(err, &ce) || ce.Code != codes.FailedPrecondition || !strings.Contains(ce.Message, "invalid JSON") {
		t.Errorf("bad run = %v, want FailedPrecondition OUTPUT_SCHEMA", err)
	}

	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "good", OutputSchemaJson: `{"type":"strng"}`}, nil)
	if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || ce.Field != "output_schema_json" || !strings.Contains(ce.Message, `unknown type "strng"`) {
		t.Errorf("bad schema = %v, want InvalidArgument naming output_schema_json", err)
	}
}

// TestRunBudgetsAndCost: usage events carry the cost from the price table; a run over its
// token or cost budget stops with BUDGET_EXCEEDED; GetRun reports the cost.
func TestRunBudgetsAndCost(t *testing.T) {
	e := newEnv(t, envOptions{configure: func(c *config.Config) {
		c.Models.Prices = map[string]config.Price{"scripted/echo": {InputPerMTok: 1_000_000, OutputPerMTok: 2_000_000}}
	}})
	ctx := testContext(t)
	var usage []*toolpb.Usage
	final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", RunId: "priced"}, func(ev *toolpb.RunResponse) {
		if u := ev.GetUsage(); u != nil {
			usage = append(usage, u)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 1 {
		t.Fatalf("usage events = %v", usage)
	}
	want := float64(usage[0].GetInputTokens())*1 + float64(usage[0].GetOutputTokens())*2
	if usage[0].GetCostUsd() != want || final.GetUsage().GetCostUsd() != want {
		t.Errorf("cost = %v (event) %v (final), want %v", usage[0].GetCostUsd(), final.GetUsage().GetCostUsd(), want)
	}
	if r, err := e.cl.GetRun(ctx, "priced"); err != nil || r.GetUsage().GetCostUsd() != want {
		t.Errorf("GetRun usage = %v, %v", r.GetUsage(), err)
	}

	for _, limits := range []*toolpb.RunLimits{{MaxTokens: 1}, {MaxCostUsd: 0.5}} {
		_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", Limits: limits}, nil)
		var ce *client.Error
		if !errors.Is(err, client.ErrBudget) || !errors.As(err, &ce) || ce.Code != codes.ResourceExhausted {
			t.Errorf("limits %v: err = %v, want ResourceExhausted BUDGET_EXCEEDED", limits, err)
		}
	}
	for _, tc := range []struct {
		limits *toolpb.RunLimits
		field  string
	}{{&toolpb.RunLimits{MaxTokens: -1}, "limits.max_tokens"}, {&toolpb.RunLimits{MaxCostUsd: -0.1}, "limits.max_cost_usd"}} {
		_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", Limits: tc.limits}, nil)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("limits %v: err = %v, want InvalidArgument naming %s", tc.limits, err, tc.field)
		}
	}
}
