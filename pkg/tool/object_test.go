package tool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/pkg/tool"
)

// service is a value offering several tools, like an object with @LlmTool methods.
type service struct{ names []string }

func (s service) Tools() []tool.Tool {
	var ts []tool.Tool
	for _, n := range s.names {
		ts = append(ts, echoTool(n, "from service"))
	}
	return ts
}

func names(ts []tool.Tool) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Definition().Name)
	}
	return out
}

func TestObjectTools(t *testing.T) {
	search := echoTool("search", "first search")
	tests := []struct {
		name string
		obj  tool.Object
		want []string
	}{
		{"zero value", tool.Object{}, []string{}},
		{"no sources", tool.ObjectOf(), []string{}},
		{"single tool", tool.ObjectOf(search), []string{"search"}},
		{"slice, sorted by name", tool.ObjectOf([]tool.Tool{echoTool("b", ""), echoTool("a", ""), echoTool("c", "")}), []string{"a", "b", "c"}},
		{"set", tool.ObjectOf(service{[]string{"z", "y"}}), []string{"y", "z"}},
		{"SetFunc", tool.ObjectOf(tool.SetFunc(func() []tool.Tool { return []tool.Tool{echoTool("f", "")} })), []string{"f"}},
		{"mixed sources", tool.ObjectOf(echoTool("m", ""), []tool.Tool{echoTool("k", "")}, service{[]string{"l"}}), []string{"k", "l", "m"}},
		{"nil sources and nil tools skipped", tool.ObjectOf(nil, []tool.Tool{nil, echoTool("a", "")}), []string{"a"}},
		{"de-duplicated by name", tool.ObjectOf(search, service{[]string{"search", "other"}}), []string{"other", "search"}},
		{"prefix", tool.ObjectOf(service{[]string{"get", "put"}}).WithPrefix("kv_"), []string{"kv_get", "kv_put"}},
		{"empty prefix is a no-op", tool.ObjectOf(service{[]string{"get"}}).WithPrefix(""), []string{"get"}},
		{"prefix replaces the naming strategy", tool.ObjectOf(service{[]string{"get"}}).WithNamingStrategy(strings.ToUpper).WithPrefix("p_"), []string{"p_get"}},
		{"naming strategy", tool.ObjectOf(service{[]string{"get"}}).WithNamingStrategy(strings.ToUpper), []string{"GET"}},
		{"nil naming strategy", tool.ObjectOf(service{[]string{"get"}}).WithPrefix("x").WithNamingStrategy(nil), []string{"get"}},
		{"filter", tool.ObjectOf(service{[]string{"get", "put", "delete"}}).WithFilter(func(n string) bool { return n != "delete" }), []string{"get", "put"}},
		{
			"filter sees original names",
			tool.ObjectOf(service{[]string{"get", "put"}}).WithPrefix("kv_").WithFilter(func(n string) bool { return n == "get" }),
			[]string{"kv_get"},
		},
		{
			"renaming makes duplicates, first wins",
			tool.ObjectOf(service{[]string{"a", "A"}}).WithNamingStrategy(strings.ToLower),
			[]string{"a"},
		},
		{
			"renaming changes the order",
			tool.ObjectOf(service{[]string{"b", "a"}}).WithNamingStrategy(func(n string) string { return map[string]string{"a": "z", "b": "y"}[n] }),
			[]string{"y", "z"},
		},
		{
			"nested objects",
			tool.ObjectOf(tool.ObjectOf(service{[]string{"get"}}).WithPrefix("kv_"), tool.ObjectOf(service{[]string{"get"}}).WithPrefix("fs_")),
			[]string{"fs_get", "kv_get"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, names(tt.obj.Tools())); diff != "" {
				t.Errorf("Tools() names mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestObjectFirstWins(t *testing.T) {
	first, second := echoTool("dup", "first"), echoTool("dup", "second")
	got := tool.ObjectOf(first, second).Tools()
	if len(got) != 1 || got[0] != first {
		t.Errorf("Tools() = %v, want only the first tool", names(got))
	}
}

func TestObjectRenamedToolsStayTransparent(t *testing.T) {
	base := echoTool("get", "Gets", tool.ReturnDirect(), tool.DefinitionMetadata(map[string]string{"k": "v"}))
	got := tool.ObjectOf(base).WithPrefix("kv_").Tools()
	if len(got) != 1 {
		t.Fatalf("Tools() = %v", names(got))
	}
	renamed := got[0]
	if tool.Unwrap(renamed) != base {
		t.Error("renamed tool does not unwrap to the original")
	}
	want := base.Definition()
	want.Name = "kv_get"
	if diff := cmp.Diff(want, renamed.Definition()); diff != "" {
		t.Errorf("Definition() mismatch (-want +got):\n%s", diff)
	}
	if !renamed.Metadata().ReturnDirect {
		t.Error("ReturnDirect lost")
	}
	res, err := renamed.Call(context.WithValue(context.Background(), ctxKey{}, "c"), `{"q":1}`)
	if err != nil || res.Content != `{"q":1}|c` {
		t.Errorf("Call = %+v, %v", res, err)
	}
	// A name the strategy leaves unchanged is not wrapped.
	same := tool.ObjectOf(base).WithNamingStrategy(func(n string) string { return n }).Tools()
	if same[0] != base {
		t.Error("a tool whose name did not change was wrapped")
	}
}

func TestObjectIsImmutable(t *testing.T) {
	o := tool.ObjectOf(service{[]string{"a"}})
	_ = o.WithPrefix("p_")
	_ = o.WithFilter(func(string) bool { return false })
	if diff := cmp.Diff([]string{"a"}, names(o.Tools())); diff != "" {
		t.Errorf("With methods changed the original (-want +got):\n%s", diff)
	}
	ts := []tool.Tool{echoTool("a", "")}
	o = tool.ObjectOf(ts)
	ts[0] = echoTool("b", "")
	if diff := cmp.Diff([]string{"a"}, names(o.Tools())); diff != "" {
		t.Errorf("changing the source slice changed the object (-want +got):\n%s", diff)
	}
}

func TestObjectOfRejectsOtherValues(t *testing.T) {
	for _, v := range []any{"a string", 42, []any{echoTool("a", "")}, struct{}{}} {
		func() {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "tool.ObjectOf: source 1 is a ") {
					t.Errorf("ObjectOf(%T) panic = %v, want a message naming the source", v, r)
				}
			}()
			tool.ObjectOf(echoTool("ok", ""), v)
		}()
	}
}
