package agentic

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// A chaining source's predicate reads the run's blackboard: a Customer binds only when
// the blackboard holds an Order of that customer.
func TestChainingSourceReadsTheBlackboard(t *testing.T) {
	srcs, err := CompileSources("chaining_sources", []ChainingSpec{{Type: "Customer",
		When: `blackboard.exists(e, e.type_name == "shop.Order" && e.value.customer_id == value.id)`}})
	if err != nil {
		t.Fatal(err)
	}
	board := toolcall.NewCallBoard(nil, 1<<10)
	ctx := toolcall.WithBlackboard(ctxT(t), board)
	b := NewBindings(types("crm.Customer"), srcs)
	b.OfferIn(ctx, entry("crm.Customer", `{"id":"c1"}`))
	if _, ok := b.Bound("crm.Customer"); ok {
		t.Fatal("a Customer bound with no Order on the blackboard")
	}
	if err := board.Add(entry("shop.Order", `{"id":7,"customer_id":"c1"}`)); err != nil {
		t.Fatal(err)
	}
	b.OfferIn(ctx, entry("crm.Customer", `{"id":"c2"}`))
	if _, ok := b.Bound("crm.Customer"); ok {
		t.Fatal("a Customer bound with an Order of another customer on the blackboard")
	}
	b.OfferIn(ctx, entry("crm.Customer", `{"id":"c1"}`))
	if e, ok := b.Bound("crm.Customer"); !ok || string(e.JSON) != `{"id":"c1"}` {
		t.Errorf("bound %s, %v; want the Customer of the Order", e.JSON, ok)
	}
}

// A chaining source's predicate reads the run's ToolCallContext, without toolmesh's own
// keys and without the keys the run hides (secrets, credentials); without Hiding it
// reads an empty context.
func TestChainingSourceReadsTheContext(t *testing.T) {
	srcs, err := CompileSources("chaining_sources", []ChainingSpec{
		{Type: "Customer", When: `context.region == value.region`},
		{Type: "Secret", When: `"api_key" in context || "toolmesh.tenant" in context`},
	})
	if err != nil {
		t.Fatal(err)
	}
	bag := toolctx.FromMap(map[string]string{"region": "eu", "api_key": "k", "toolmesh.tenant": "acme"})
	ctx := toolctx.NewContext(ctxT(t), bag)
	hide := func(k string) bool { return k == "api_key" }
	for _, tc := range []struct {
		name   string
		hidden func(string) bool
		offer  tool.Entry
		bind   bool
	}{
		{"the context's region", hide, entry("Customer", `{"region":"eu"}`), true},
		{"another region", hide, entry("Customer", `{"region":"us"}`), false},
		{"no context without Hiding", nil, entry("Customer", `{"region":"eu"}`), false},
		{"hidden and reserved keys", hide, entry("Secret", `{}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBindings(types("Customer", "Secret"), srcs).Hiding(tc.hidden)
			b.OfferIn(ctx, tc.offer)
			if _, ok := b.Bound(tc.offer.TypeName); ok != tc.bind {
				t.Errorf("bound %v, want %v", ok, tc.bind)
			}
		})
	}
}

// The new variables are checked when the source compiles, and a predicate over them that
// does not yield a bool is refused.
func TestChainingSourceRefusesBadProcessPredicates(t *testing.T) {
	for _, when := range []string{`blackboard.size()`, `context.region`, `last("Order")`} {
		if _, err := CompileSources("chaining_sources", []ChainingSpec{{Type: "T", When: when}}); err == nil {
			t.Errorf("%q compiled", when)
		}
	}
	long := `context.a == "` + strings.Repeat("x", 5000) + `"`
	if _, err := CompileSources("chaining_sources", []ChainingSpec{{Type: "T", When: long}}); err == nil || !strings.Contains(err.Error(), "chaining_sources[0].when") {
		t.Errorf("an expression over the bound: %v", err)
	}
}

// A predicate that would spin over a large blackboard stops at the cost limit, and is
// false.
func TestChainingSourceCostLimit(t *testing.T) {
	srcs, err := CompileSources("s", []ChainingSpec{{Type: "T",
		When: `blackboard.all(a, blackboard.all(b, blackboard.all(c, a.type_name + b.type_name + c.type_name != "")))`}})
	if err != nil {
		t.Fatal(err)
	}
	board := toolcall.NewCallBoard(nil, 1<<20)
	for i := range 200 {
		if err := board.Add(entry("X", fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBindings(types("T"), srcs)
	b.OfferIn(toolcall.WithBlackboard(ctxT(t), board), entry("T", `{}`))
	if _, ok := b.Bound("T"); ok {
		t.Error("a predicate over the cost limit held")
	}
}

// With auto-discovery, a second object of a type replaces the first: the type's methods
// leave and join again (one tool of each name), the tools_changed event shows it, and
// the methods run on the new object.
func TestDiscoveryReplacesTheBinding(t *testing.T) {
	var receivers []string
	profile := tool.New("profile", "Profile.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		var u struct {
			ID string `json:"id"`
		}
		if err := tool.ReceiverFrom(ctx, &u); err != nil {
			return tool.Result{}, err
		}
		receivers = append(receivers, u.ID)
		return tool.Text("profile of " + u.ID), nil
	}, tool.MethodOf("users.User"))
	find := func(id string) tool.Tool {
		return Chain(tool.New("find_"+id, "Find "+id+".", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			return tool.ArtifactResult("found", tool.Artifact{TypeName: "users.User", JSON: []byte(`{"id":"` + id + `"}`)}), nil
		}))
	}
	prov, err := scripted.New(scripted.Script{Name: "discovery", Rules: []scripted.Rule{
		turn(1, call("find_a")), turn(2, call("profile")), turn(3, call("find_b")), turn(4, call("profile")),
		{Reply: scripted.Reply{Text: "done"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBindings(types("users.User"), nil)
	var changed []loop.ToolsChanged
	res, err := loop.Run(WithBindings(ctxT(t), b), loop.Options{
		Provider: prov, MaxIterations: 10, Decorate: Chain,
		Strategies: []loop.Strategy{Discovery(b, func() []tool.Tool { return []tool.Tool{profile} })},
		Observer: func(ev loop.Event) {
			if c, ok := ev.(loop.ToolsChanged); ok {
				changed = append(changed, c)
			}
		},
	}, loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Tools: []tool.Tool{find("a"), find("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "done" {
		t.Errorf("answer %q", res.Text)
	}
	if diff := cmp.Diff([]string{"a", "b"}, receivers); diff != "" {
		t.Errorf("receivers (-want +got):\n%s", diff)
	}
	type change struct{ Added, Removed, Tools []string }
	var got []change
	for _, c := range changed {
		got = append(got, change{c.Added, c.Removed, c.Tools})
	}
	want := []change{
		{Added: []string{"profile"}, Tools: []string{"find_a", "find_b", "profile"}},
		{Added: []string{"profile"}, Removed: []string{"profile"}, Tools: []string{"find_a", "find_b", "profile"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tools_changed (-want +got):\n%s", diff)
	}
	for _, c := range changed {
		if len(slices.Compact(slices.Sorted(slices.Values(c.Tools)))) != len(c.Tools) {
			t.Errorf("duplicate tool names: %v", c.Tools)
		}
	}
}
