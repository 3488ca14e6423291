package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

func facadeNode(name string, children ...*toolpb.FacadeChild) *toolpb.FacadeNode {
	f := tool.Of(name, name+" facade", nil)
	return &toolpb.FacadeNode{Definition: wire.DefinitionToProto(f.Definition(), f.Metadata()), Children: children}
}

func toolChild(name string) *toolpb.FacadeChild {
	return &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Tool{Tool: name}}
}

func facadeChild(n *toolpb.FacadeNode) *toolpb.FacadeChild {
	return &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Facade{Facade: n}}
}

func names(ts []tool.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Definition().Name)
	}
	return out
}

// TestGroupWithFacades: a group offers its facades and the tools no facade holds; a
// plain facade unfolds without contacting a worker; its children route to replicas.
func TestGroupWithFacades(t *testing.T) {
	r := newRouter(t, Options{})
	f := startFake(t, answering("done"))
	reg := registration("w1", f.addr, "shop", echoTool("stock_level"), echoTool("price_quote"), echoTool("help"))
	stock := facadeNode("stock", toolChild("stock_level"))
	reg.Groups[0].Facades = []*toolpb.FacadeNode{facadeNode("catalog", facadeChild(stock), toolChild("price_quote"))}
	mustRegister(t, r, reg)

	_, top, err := r.Group("shop")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"catalog", "help"}, names(top)); diff != "" {
		t.Fatalf("top-level tools (-want +got):\n%s", diff)
	}
	catalog, ok := tool.As[tool.Facade](top[0])
	if !ok {
		t.Fatalf("catalog is %T, not a facade", top[0])
	}
	res, err := catalog.Call(testContext(t), "{}")
	if err != nil || !strings.HasPrefix(res.Content, "Tools now available: stock, price_quote.") {
		t.Errorf("catalog call = %q, %v", res.Content, err)
	}
	if f.calls.Load() != 0 {
		t.Error("unfolding a plain facade contacted a worker")
	}
	kids := catalog.Children()
	inner, ok := tool.As[tool.Facade](kids[0])
	if !ok || names(inner.Children())[0] != "stock_level" {
		t.Fatalf("nested facade: %v", names(kids))
	}
	if res, err := inner.Children()[0].Call(testContext(t), `{"text":"x"}`); err != nil || res.Content != "done" {
		t.Errorf("stock_level through the tree = %q, %v", res.Content, err)
	}
	if _, err := r.Tool("stock"); err != nil {
		t.Errorf("Tool(stock): %v", err)
	}
}

// TestFacadeRegistrationErrors: malformed trees and conflicting trees are refused with a
// reason naming the facade.
// categorized returns a by-category facade over the tools a and b.
func categorized(cats ...*toolpb.FacadeCategory) []*toolpb.FacadeNode {
	n := facadeNode("f", toolChild("a"), toolChild("b"))
	n.Categories = cats
	return []*toolpb.FacadeNode{n}
}

func TestFacadeRegistrationErrors(t *testing.T) {
	r := newRouter(t, Options{})
	f := startFake(t, answering("x"))
	cases := []struct {
		name    string
		facades []*toolpb.FacadeNode
		want    string
	}{
		{"unknown child", []*toolpb.FacadeNode{facadeNode("f", toolChild("nope"))}, `names child "nope", which is not a tool of the group`},
		{"no children", []*toolpb.FacadeNode{facadeNode("f")}, `facade "f" has no children`},
		{"name of a tool", []*toolpb.FacadeNode{facadeNode("a", toolChild("b"))}, `facade "a" has the name of a tool`},
		{"declared twice", []*toolpb.FacadeNode{facadeNode("f", toolChild("a")), facadeNode("f", toolChild("b"))}, `facade "f" is declared twice`},
		{"bad category", []*toolpb.FacadeNode{func() *toolpb.FacadeNode {
			n := facadeNode("f", toolChild("a"))
			n.Categories = []*toolpb.FacadeCategory{{Name: "c", Children: []string{"b"}}}
			return n
		}()}, `category "c" names "b", which is not one of its children`},
		{"category name too long", categorized(&toolpb.FacadeCategory{Name: strings.Repeat("c", 65), Children: []string{"a"}}), `category 0's name is 65 bytes; the limit is 64`},
		{"blank category name", categorized(&toolpb.FacadeCategory{Name: " ", Children: []string{"a"}}), `category 0's name is blank`},
		{"category declared twice", categorized(&toolpb.FacadeCategory{Name: "c", Children: []string{"a"}}, &toolpb.FacadeCategory{Name: "c", Children: []string{"b"}}), `category "c" is declared twice`},
		{"child twice in a category", categorized(&toolpb.FacadeCategory{Name: "c", Children: []string{"a", "a"}}), `category "c" names "a" twice`},
		{"more category children than children", categorized(&toolpb.FacadeCategory{Name: "c", Children: make([]string, 100000)}), `category "c" has 100000 children, more than the facade's 2`},
		{"too many categories", categorized(make([]*toolpb.FacadeCategory, wire.MaxFacadeCategories+1)...), `has 257 categories; the limit is 256`},
		{"bad category parameter", func() []*toolpb.FacadeNode {
			n := categorized(&toolpb.FacadeCategory{Name: "c", Children: []string{"a"}})
			n[0].CategoryParameter = "has space"
			return n
		}(), `category_parameter "has space" must match`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := registration("w", f.addr, "g", echoTool("a"), echoTool("b"))
			reg.Groups[0].Facades = tc.facades
			_, rej, err := r.Register(reg)
			if err == nil || !strings.Contains(summarize(rej), tc.want) {
				t.Errorf("Register = %v, rejections %q; want one containing %q", err, summarize(rej), tc.want)
			}
		})
	}

	// Facades nest 32 levels deep at most, on this side as in the worker SDK.
	chain := func(levels int) *toolpb.FacadeNode {
		n := facadeNode(fmt.Sprintf("f%d", levels), toolChild("a"))
		for i := levels - 1; i >= 1; i-- {
			n = facadeNode(fmt.Sprintf("f%d", i), &toolpb.FacadeChild{Child: &toolpb.FacadeChild_Facade{Facade: n}})
		}
		return n
	}
	for levels, ok := range map[int]bool{32: true, 33: false} {
		deep := newRouter(t, Options{})
		reg := registration(fmt.Sprintf("deep%d", levels), f.addr, "deep", echoTool("a"))
		reg.Groups[0].Facades = []*toolpb.FacadeNode{chain(levels)}
		_, rej, err := deep.Register(reg)
		if (err == nil) != ok || (!ok && !strings.Contains(summarize(rej), "nests deeper than 32 levels")) {
			t.Errorf("%d levels: %v %q", levels, err, summarize(rej))
		}
	}

	first := registration("w1", f.addr, "g", echoTool("a"), echoTool("b"))
	first.Groups[0].Facades = []*toolpb.FacadeNode{facadeNode("f", toolChild("a"))}
	mustRegister(t, r, first)
	other := registration("w2", f.addr, "g", echoTool("a"), echoTool("b"))
	other.Groups[0].Facades = []*toolpb.FacadeNode{facadeNode("f", toolChild("a"), toolChild("b"))}
	if _, rej, err := r.Register(other); err == nil || !strings.Contains(summarize(rej), `tool "f" is already registered with a different definition`) {
		t.Errorf("a different tree under the same facade name = %v %q", err, summarize(rej))
	}
	same := registration("w3", f.addr, "g", echoTool("a"), echoTool("b"))
	same.Groups[0].Facades = []*toolpb.FacadeNode{facadeNode("f", toolChild("a"))}
	mustRegister(t, r, same)
}

// TestSelectableFacadeBindsState: a selectable facade asks a replica's selector; the
// chosen children are bound to the state it returned, which every call carries and
// which the tools' answers replace — whichever replica serves them.
func TestSelectableFacadeBindsState(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	handle := func(id string) func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return func(_ context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
			mu.Lock()
			served[id]++
			mu.Unlock()
			switch req.GetTool() {
			case "open_cart":
				var in struct{ Store string }
				_ = json.Unmarshal([]byte(req.GetArgumentsJson()), &in)
				return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "opened"},
					Selection: &toolpb.Selection{Tools: []string{"cart_add", "cart_view"}, State: []byte(in.Store + "|")}}, nil
			case "cart_add":
				return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: "added by " + id},
					State: append(req.GetState(), 'x'), StateChanged: true}, nil
			default:
				return textResponse(id + " sees " + string(req.GetState())), nil
			}
		}
	}
	r := newRouter(t, Options{})
	a, b := startFake(t, handle("a")), startFake(t, handle("b"))
	sel := tool.Selectable("open_cart", "Open a cart", schema.Params(schema.String("store", "store")), nil, nil)
	for _, w := range []struct{ id, addr string }{{"a", a.addr}, {"b", b.addr}} {
		reg := registration(w.id, w.addr, "shop", echoTool("cart_add"), echoTool("cart_view"))
		reg.Groups[0].Facades = []*toolpb.FacadeNode{{
			Definition: wire.DefinitionToProto(sel.Definition(), sel.Metadata()),
			Children:   []*toolpb.FacadeChild{toolChild("cart_add"), toolChild("cart_view")},
			Selectable: true,
		}}
		mustRegister(t, r, reg)
	}
	_, top, err := r.Group("shop")
	if err != nil || len(top) != 1 {
		t.Fatalf("top = %v, %v", names(top), err)
	}
	facade, _ := tool.As[tool.Facade](top[0])
	chosen, err := facade.Select(testContext(t), `{"store":"pg://main"}`)
	if err != nil || cmp.Diff([]string{"cart_add", "cart_view"}, names(chosen)) != "" {
		t.Fatalf("Select = %v, %v", names(chosen), err)
	}
	ctx := testContext(t)
	for range 4 {
		if res, err := chosen[0].Call(ctx, `{"text":"sku-1"}`); err != nil || res.IsError() {
			t.Fatalf("cart_add = %+v, %v", res, err)
		}
	}
	res, err := chosen[1].Call(ctx, `{}`)
	if err != nil || !strings.HasSuffix(res.Content, "sees pg://main|xxxx") {
		t.Errorf("cart_view = %q, %v; want the state of four adds", res.Content, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if served["a"] == 0 || served["b"] == 0 {
		t.Errorf("calls were not spread over both replicas: %v", served)
	}
}
