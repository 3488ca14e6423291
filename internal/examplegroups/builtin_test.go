package examplegroups_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// leaves returns the tools of a group: its own and every leaf of its facades.
func leaves(g worker.Group) []tool.Tool {
	var out []tool.Tool
	var walk func(ts []tool.Tool)
	walk = func(ts []tool.Tool) {
		for _, x := range ts {
			if f, ok := tool.As[tool.Facade](x); ok {
				walk(f.Children())
				continue
			}
			out = append(out, x)
		}
	}
	walk(g.Tools)
	for _, f := range g.Facades {
		walk(f.Children())
	}
	return out
}

func find(t *testing.T, g worker.Group, name string) tool.Tool {
	t.Helper()
	for _, x := range leaves(g) {
		if x.Definition().Name == name {
			return x
		}
	}
	t.Fatalf("group %s has no tool %s", g.Role, name)
	return nil
}

func names(ts []tool.Tool) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.Definition().Name)
	}
	return out
}

func toolChildren(names ...string) []*toolpb.FacadeChild {
	out := make([]*toolpb.FacadeChild, len(names))
	for i, n := range names {
		out[i] = &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Tool{Tool: n}}
	}
	return out
}

const emptySchema = `{"type":"object","properties":{}}`

func TestMathGroup(t *testing.T) {
	g := examplegroups.Math()
	if g.Role != "math" || g.Description != "Math tools: use when you need to perform calculations" {
		t.Errorf("group = %q %q", g.Role, g.Description)
	}
	if g.UsageNotes != "Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding." {
		t.Errorf("usage notes = %q", g.UsageNotes)
	}
	if len(g.Tools) != 0 || len(g.Facades) != 1 {
		t.Fatalf("math offers %d tools and %d facades, want the math facade alone", len(g.Tools), len(g.Facades))
	}
	f := g.Facades[0]
	ops := []string{"add", "subtract", "multiply", "divide", "mean", "min", "max", "floor", "ceiling", "round"}
	if diff := cmp.Diff(ops, names(f.Children())); diff != "" {
		t.Errorf("math's children (-want +got):\n%s", diff)
	}
	for _, x := range f.Children() {
		if !x.Metadata().Idempotent {
			t.Errorf("%s is not idempotent", x.Definition().Name)
		}
	}
	// The texts of the math group, as the model sees them.
	def := f.Definition()
	if def.Name != "math" || def.Description != "Mathematical operations. Invoke to see available operations including arithmetic, statistics, and rounding functions." ||
		def.InputSchema.String() != emptySchema {
		t.Errorf("math facade = %q %q %s", def.Name, def.Description, def.InputSchema)
	}
	if got := f.Options(); got != (tool.FacadeOptions{UsageNotes: "Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding."}) {
		t.Errorf("math facade options = %+v", got)
	}
	res, err := f.Call(context.Background(), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	const unfold = "Tools now available: add, subtract, multiply, divide, mean, min, max, floor, ceiling, round. " +
		"You MUST call one of these tools to complete the user's request. Do NOT respond with text \u2014 call a tool.\n\n" +
		"Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding."
	if res.Content != unfold {
		t.Errorf("calling math = %q\nwant %q", res.Content, unfold)
	}

	grs, err := groupRegistrations(g)
	if err != nil {
		t.Fatal(err)
	}
	want := []*toolpb.FacadeNode{{
		Definition: &toolpb.ToolDefinition{Name: "math", Description: examplegroups.MathFacadeDescription, InputSchemaJson: emptySchema},
		Children:   toolChildren(ops...),
		UsageNotes: examplegroups.MathUsageNotes,
	}}
	if diff := cmp.Diff(want, grs[0].GetFacades(), protocmp.Transform()); diff != "" {
		t.Errorf("math facade tree (-want +got):\n%s", diff)
	}
	var registered []string
	for _, rt := range grs[0].GetTools() {
		registered = append(registered, rt.GetDefinition().GetName())
	}
	if diff := cmp.Diff([]string{"add", "ceiling", "divide", "floor", "max", "mean", "min", "multiply", "round", "subtract"}, registered); diff != "" {
		t.Errorf("math tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ops, names(examplegroups.MathOperations())); diff != "" {
		t.Errorf("MathOperations (-want +got):\n%s", diff)
	}
}

func TestOperations(t *testing.T) {
	math, text := examplegroups.Math(), examplegroups.TextGroup()
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
	add := find(t, examplegroups.Math(), "add")
	slow := examplegroups.WithDelay(time.Hour, []tool.Tool{add})[0]
	if tool.Unwrap(slow) != add || slow.Definition().Name != "add" || !slow.Metadata().Idempotent {
		t.Error("the delayed tool does not keep the wrapped tool's identity")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := slow.Call(ctx, `{"a":1,"b":2}`)
	if err != nil || !res.IsError() || res.Code != tool.CodeTimeout {
		t.Errorf("a cancelled delay = %+v, %v; want a timeout error result", res, err)
	}
	fast := examplegroups.WithDelay(time.Millisecond, []tool.Tool{add})[0]
	if res, _ := fast.Call(context.Background(), `{"a":1,"b":2}`); res.Content != "3" {
		t.Errorf("delayed add = %q", res.Content)
	}
}

func TestGroups(t *testing.T) {
	gs := examplegroups.Groups()
	if len(gs) != 10 || gs["handbook"]().Role != "handbook" || gs["database"]().Role != "database" || gs["library"]().Role != "library" || gs["payments"]().Role != "payments" || gs["users"]().Role != "users" || gs["crm"]().Role != "crm" || gs["faults"]().Role != "faults" || gs["math"]().Role != "math" || gs["text"]().Role != "text" || gs["shop"]().Role != "shop" {
		t.Errorf("Groups() = %v", gs)
	}
	for _, name := range []string{"math", "text", "shop", "library", "echo_x"} {
		g, ok := examplegroups.Group(name)
		if !ok || (g.Role != name) {
			t.Errorf("Group(%q) = %q, %v", name, g.Role, ok)
		}
		if _, err := groupRegistrations(g); err != nil {
			t.Errorf("group %s cannot be served: %v", name, err)
		}
	}
	if _, ok := examplegroups.Group("nope"); ok {
		t.Error("Group(nope) exists")
	}
}

// TestGroupWithDelay: a delay reaches every leaf, also beneath facades, and leaves
// what is registered as it was.
func TestGroupWithDelay(t *testing.T) {
	for _, name := range []string{"math", "text", "shop", "library", "echo_x"} {
		t.Run(name, func(t *testing.T) {
			plain, _ := examplegroups.Group(name)
			slow, ok := examplegroups.GroupWith(name, examplegroups.Delay(time.Hour))
			if !ok {
				t.Fatal("no group")
			}
			ls := leaves(slow)
			if len(ls) == 0 {
				t.Fatal("no leaves")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for _, x := range ls {
				if tmpl, ok := x.(tool.Template); ok {
					// A template is never called: the tools it creates are, delayed.
					made, err := tmpl.Create(context.Background(), []byte(`{"store":"s","items":[]}`))
					if err != nil || len(made) == 0 {
						t.Fatalf("%s creates %v, %v", x.Definition().Name, made, err)
					}
					x = made[0]
				}
				if res, err := x.Call(ctx, `{}`); err != nil || res.Code != tool.CodeTimeout {
					t.Errorf("%s is not delayed: %+v, %v", x.Definition().Name, res, err)
				}
			}
			a, errA := groupRegistrations(plain)
			b, errB := groupRegistrations(slow)
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if diff := cmp.Diff(a, b, protocmp.Transform()); diff != "" {
				t.Errorf("a delay changes the registration (-plain +delayed):\n%s", diff)
			}
		})
	}
}

// groupRegistrations is what a worker serving groups registers.
func groupRegistrations(groups ...worker.Group) ([]*toolpb.GroupRegistration, error) {
	w, err := worker.New(worker.Options{Orchestrator: "unused:1"}, groups...)
	if err != nil {
		return nil, err
	}
	return w.Registration().GetGroups(), nil
}

// The users group's methods read their receiver from the call's state and updateEmail
// replaces it; without a receiver they fail.
func TestUserMethods(t *testing.T) {
	g := examplegroups.Users()
	byName := map[string]tool.Tool{}
	for _, tl := range g.Tools {
		byName[tl.Definition().Name] = tl
	}
	if byName["updateEmail"].Metadata().ReceiverType != examplegroups.UserType || byName["find_user"].Metadata().ReceiverType != "" {
		t.Fatalf("receiver types: %+v", byName["updateEmail"].Metadata())
	}
	res, _ := byName["find_user"].Call(context.Background(), `{"name":"grace"}`)
	if res.Artifact == nil || res.Artifact.TypeName != examplegroups.UserType {
		t.Fatalf("find_user: %+v", res)
	}
	if res, err := byName["profile"].Call(context.Background(), `{}`); err == nil && !res.IsError() {
		t.Errorf("profile without a receiver: %+v", res)
	}
	st := toolcall.NewState(res.Artifact.JSON)
	ctx := toolcall.WithState(context.Background(), st)
	if res, err := byName["updateEmail"].Call(ctx, `{"email":"g@navy.mil"}`); err != nil || res.Content != "The email of Grace Hopper changed from grace@example.com to g@navy.mil" {
		t.Errorf("updateEmail: %+v, %v", res, err)
	}
	if !toolcall.StateChanged(st) || !strings.Contains(string(st.Bytes()), `"email":"g@navy.mil"`) {
		t.Errorf("receiver after updateEmail: %s", st.Bytes())
	}
}

// The payment tools validate their input, and charge is not idempotent while credit is.
func TestPayments(t *testing.T) {
	g := examplegroups.Groups()["payments"]()
	byName := map[string]tool.Tool{}
	for _, tl := range g.Tools {
		byName[tl.Definition().Name] = tl
	}
	if byName["charge"].Metadata().Idempotent || !byName["credit"].Metadata().Idempotent {
		t.Fatal("charge must not be idempotent, credit must be")
	}
	if res, _ := byName["charge"].Call(context.Background(), `{"account":"a","cents":5}`); res.Content != "charged 5 cents to a" {
		t.Errorf("charge = %q", res.Content)
	}
	if res, _ := byName["credit"].Call(context.Background(), `{"account":"a","cents":0}`); !res.IsError() {
		t.Errorf("credit of 0 cents = %q, want an error", res.Content)
	}
}
