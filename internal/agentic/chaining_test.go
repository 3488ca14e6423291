package agentic

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

func entry(typ, js string) tool.Entry { return tool.Entry{TypeName: typ, JSON: []byte(js)} }

func types(ts ...string) func() []string { return func() []string { return ts } }

// An object binds as the receiver types it satisfies; the last one wins; lists and
// objects of other types do not bind; sources restrict what binds.
func TestBindings(t *testing.T) {
	b := NewBindings(types("users.User"), nil)
	b.OfferIn(context.Background(), entry("users.Group", `{"id":9}`))
	b.OfferIn(context.Background(), entry("[]users.User", `[{"id":1}]`))
	if _, ok := b.Bound("users.User"); ok {
		t.Fatal("a list or another type bound")
	}
	b.OfferIn(context.Background(), entry("users.User", `{"id":1}`))
	b.OfferIn(context.Background(), entry("users.User", `{"id":2}`))
	if e, ok := b.Bound("users.User"); !ok || string(e.JSON) != `{"id":2}` {
		t.Errorf("bound %s, want the last", e.JSON)
	}
	if r := b.Recent(); len(r) != 1 || r[0] != (Binding{Type: "users.User", Replaced: true}) || len(b.Recent()) != 0 {
		t.Errorf("recent %v", r)
	}

	srcs, err := CompileSources("chaining_sources", []ChainingSpec{{Type: "User", When: "value.id > 1"}})
	if err != nil {
		t.Fatal(err)
	}
	b = NewBindings(types("users.User"), srcs)
	b.OfferIn(context.Background(), entry("users.User", `{"id":1}`))
	if _, ok := b.Bound("users.User"); ok {
		t.Error("the predicate did not hold, and the object bound")
	}
	b.OfferIn(context.Background(), entry("users.User", `{"id":3}`))
	if e, ok := b.Bound("users.User"); !ok || string(e.JSON) != `{"id":3}` {
		t.Errorf("bound %s", e.JSON)
	}

	var fe *FieldError
	if _, err := CompileSources("chaining_sources", []ChainingSpec{{Type: "User", When: "value.id +"}}); !errors.As(err, &fe) || fe.Field != "chaining_sources[0].when" {
		t.Errorf("bad CEL: %v", err)
	}
	if _, err := CompileSources("x", []ChainingSpec{{Type: " "}}); !errors.As(err, &fe) || fe.Field != "x[0].type_name" {
		t.Errorf("no type: %v", err)
	}
}

// A method answers that it needs an object until one binds; then it gets the bound
// object as its receiver, and the value it sets replaces the binding. Artifacts of the
// tools Chain wraps bind, element by element.
func TestMethods(t *testing.T) {
	var got []string
	rename := tool.New("rename", "Rename the user.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		var u struct {
			ID   int    `json:"id"`
			Name string `json:"name"`
		}
		if err := tool.ReceiverFrom(ctx, &u); err != nil {
			return tool.Result{}, err
		}
		got = append(got, u.Name)
		u.Name += "!"
		return tool.Text("renamed"), tool.SetReceiver(ctx, u)
	}, tool.MethodOf("users.User"))
	find := tool.New("find", "Find users.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.ArtifactResult("found", tool.Artifact{TypeName: "[]users.User", JSON: []byte(`[{"id":1,"name":"a"},{"id":2,"name":"b"}]`)}), nil
	})
	m, f := Chain(rename), Chain(find)
	if d := m.Definition().Description; d != "Rename the user.\n\nNote: This tool requires a User instance to be retrieved first." {
		t.Errorf("description %q", d)
	}
	b := NewBindings(types("users.User"), nil)
	ctx := WithBindings(context.Background(), b)
	if res, _ := m.Call(ctx, `{}`); res.Content != "This tool is not yet available. You must first retrieve a single User instance." || res.IsError() {
		t.Errorf("unbound: %+v", res)
	}
	if res, _ := m.Call(context.Background(), `{}`); res.Content != "This tool is not yet available. You must first retrieve a single User instance." {
		t.Errorf("outside a run: %+v", res)
	}
	if _, err := f.Call(ctx, `{}`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if res, err := m.Call(ctx, `{}`); err != nil || res.Content != "renamed" {
			t.Fatalf("bound: %+v, %v", res, err)
		}
	}
	if strings.Join(got, ",") != "b,b!" {
		t.Errorf("receivers %v: want the last element, then the value the method set", got)
	}
	if e, _ := b.Bound("users.User"); string(e.JSON) != `{"id":2,"name":"b!!"}` || e.TypeName != "[]users.User"[2:] {
		t.Errorf("binding %s %s", e.TypeName, e.JSON)
	}
}

// Auto-discovery adds the methods of a type once an object of it binds, once; a new
// object of the type replaces the methods offered.
func TestDiscovery(t *testing.T) {
	m := tool.New("profile", "Profile.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text(""), nil }, tool.MethodOf("User"))
	other := tool.New("ship", "Ship.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text(""), nil }, tool.MethodOf("Order"))
	b := NewBindings(types("User", "Order"), nil)
	s := Discovery(b, func() []tool.Tool { return []tool.Tool{m, other} })
	if inj, _ := s.Evaluate(context.Background(), loop.InjectionContext{}); !inj.IsZero() {
		t.Errorf("nothing bound: %+v", inj)
	}
	b.OfferIn(context.Background(), entry("User", `{}`))
	inj, _ := s.Evaluate(context.Background(), loop.InjectionContext{})
	if len(inj.Add) != 1 || inj.Add[0].Definition().Name != "profile" {
		t.Errorf("injection %+v", inj)
	}
	b.OfferIn(context.Background(), entry("User", `{"again":true}`))
	inj, _ = s.Evaluate(context.Background(), loop.InjectionContext{Current: []tool.Tool{m}})
	if len(inj.Add) != 1 || len(inj.Remove) != 1 || inj.Remove[0] != m || inj.Add[0].Definition().Name != "profile" {
		t.Errorf("a new User: %+v, want profile replaced", inj)
	}
	b.OfferIn(context.Background(), entry("Order", `{}`))
	if inj, _ := s.Evaluate(context.Background(), loop.InjectionContext{Current: []tool.Tool{m}}); len(inj.Remove) != 0 || len(inj.Add) != 1 || inj.Add[0] != other {
		t.Errorf("a first Order: %+v, want ship added and nothing removed", inj)
	}
}

// An object that does not satisfy its declared type does not bind.
func TestBindingsCheckTheType(t *testing.T) {
	b := NewBindings(types("User"), nil).Checking(func(_ string, e tool.Entry) bool { return strings.Contains(string(e.JSON), `"id"`) })
	b.OfferIn(context.Background(), entry("User", `{"name":"no id"}`))
	if _, ok := b.Bound("User"); ok {
		t.Error("an object that does not fit its type bound")
	}
	b.OfferIn(context.Background(), entry("User", `{"id":1}`))
	if _, ok := b.Bound("User"); !ok {
		t.Error("an object that fits did not bind")
	}
}
