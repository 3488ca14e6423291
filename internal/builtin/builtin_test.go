package builtin_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func find(t *testing.T, g worker.Group, name string) tool.Tool {
	t.Helper()
	for _, x := range g.Tools {
		if x.Definition().Name == name {
			return x
		}
	}
	t.Fatalf("group %s has no tool %s", g.Role, name)
	return nil
}

func TestMathGroup(t *testing.T) {
	g := builtin.Math()
	if g.Role != "math" || g.Description != "Math tools: use when you need to perform calculations" {
		t.Errorf("group = %q %q", g.Role, g.Description)
	}
	if g.UsageNotes != "Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding." {
		t.Errorf("usage notes = %q", g.UsageNotes)
	}
	var names []string
	for _, x := range g.Tools {
		names = append(names, x.Definition().Name)
		if !x.Metadata().Idempotent {
			t.Errorf("%s is not idempotent", x.Definition().Name)
		}
	}
	if len(names) != 10 {
		t.Errorf("math has %d tools (%v), want the ten of SPEC S6", len(names), names)
	}
}

func TestOperations(t *testing.T) {
	math, text := builtin.Math(), builtin.TextGroup()
	cases := []struct {
		g       worker.Group
		tool    string
		args    string
		want    string
		isError bool
	}{
		{math, "add", `{"a":12.5,"b":7.5}`, "20", false},
		{math, "subtract", `{"a":1,"b":3}`, "-2", false},
		{math, "multiply", `{"a":20,"b":3}`, "60", false},
		{math, "divide", `{"a":1,"b":8}`, "0.125", false},
		{math, "divide", `{"a":1,"b":0}`, "cannot divide by zero", true},
		{math, "mean", `{"numbers":[1,2,3,4]}`, "2.5", false},
		{math, "mean", `{"numbers":[]}`, "the list of numbers is empty", true},
		{math, "min", `{"numbers":[3,-1,2]}`, "-1", false},
		{math, "max", `{"numbers":[3,-1,2]}`, "3", false},
		{math, "max", `{"numbers":[]}`, "the list of numbers is empty", true},
		{math, "floor", `{"value":-1.5}`, "-2", false},
		{math, "ceiling", `{"value":1.2}`, "2", false},
		{math, "round", `{"value":2.5}`, "3", false},
		{math, "round", `{"value":-2.5}`, "-3", false},
		{math, "multiply", `{"a":1e308,"b":10}`, "the result is not a finite number (+Inf)", true},
		{math, "add", `{"a":"x","b":1}`, "", true},
		{text, "word_count", `{"text":"the quick brown fox"}`, "4", false},
		{text, "word_count", `{"text":"  it's a well-known fact, isn't it?  "}`, "6", false},
		{text, "word_count", `{"text":""}`, "0", false},
		{text, "uppercase", `{"text":"Grüne"}`, "GRÜNE", false},
		{text, "lowercase", `{"text":"ÀB"}`, "àb", false},
		{text, "reverse", `{"text":"añb😀"}`, "😀bña", false},
	}
	for _, c := range cases {
		t.Run(c.tool+" "+c.args, func(t *testing.T) {
			res, err := find(t, c.g, c.tool).Call(context.Background(), c.args)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError() != c.isError || (c.want != "" && res.Content != c.want) {
				t.Errorf("got %v %q, want error=%v %q", res.Kind, res.Content, c.isError, c.want)
			}
		})
	}
}

func TestWithDelay(t *testing.T) {
	add := find(t, builtin.Math(), "add")
	slow := builtin.WithDelay(time.Hour, []tool.Tool{add})[0]
	if tool.Unwrap(slow) != add || slow.Definition().Name != "add" || !slow.Metadata().Idempotent {
		t.Error("the delayed tool does not keep the wrapped tool's identity")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := slow.Call(ctx, `{"a":1,"b":2}`)
	if err != nil || !res.IsError() || res.Code != tool.CodeTimeout {
		t.Errorf("a cancelled delay = %+v, %v; want a timeout error result", res, err)
	}
	fast := builtin.WithDelay(time.Millisecond, []tool.Tool{add})[0]
	if res, _ := fast.Call(context.Background(), `{"a":1,"b":2}`); res.Content != "3" {
		t.Errorf("delayed add = %q", res.Content)
	}
}

func TestGroups(t *testing.T) {
	gs := builtin.Groups()
	if len(gs) != 2 || gs["math"]().Role != "math" || gs["text"]().Role != "text" {
		t.Errorf("Groups() = %v", gs)
	}
}
