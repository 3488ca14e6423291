package router

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestToolIndexAgreesWithAMap: random puts, replacements and deletes of short names, of
// names longer than a slot's prefix, and of names that share it; after every step the
// index finds exactly what a map holds (backward-shift deletion leaves no hole in a
// probe sequence), and the stub it returns is the entry's.
func TestToolIndexAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x toolIndex
	want := map[string]*toolEntry{}
	names := make([]string, 600)
	for i := range names {
		switch i % 3 {
		case 0:
			names[i] = fmt.Sprintf("t%d", i)
		case 1:
			names[i] = strings.Repeat("p", indexPrefix) + fmt.Sprintf("_%d", i) // the prefix is shared
		default:
			names[i] = fmt.Sprintf("%s_%d", strings.Repeat("long", 15), i)
		}
	}
	entry := func(name string, facade bool) *toolEntry {
		e := &toolEntry{def: tool.Definition{Name: name}}
		if facade {
			e.facade = &toolpb.FacadeNode{}
		} else {
			e.stub = &remoteTool{def: e.def}
		}
		return e
	}
	for step := range 20000 {
		name := names[rng.IntN(len(names))]
		switch rng.IntN(3) {
		case 0, 1:
			e := entry(name, rng.IntN(10) == 0)
			x.put(e)
			want[name] = e
		default:
			x.del(name)
			delete(want, name)
		}
		if step%97 != 0 {
			continue
		}
		if x.n != len(want) {
			t.Fatalf("step %d: the index holds %d, the map %d", step, x.n, len(want))
		}
		for _, n := range names {
			e, stub, ok := x.get(n)
			w, wok := want[n]
			if ok != wok || e != w {
				t.Fatalf("step %d: get(%q) = %v, %v; want %v, %v", step, n, e, ok, w, wok)
			}
			if ok && (w.facade != nil) != (stub == nil) || ok && w.facade == nil && stub != tool.Tool(w.stub) {
				t.Fatalf("step %d: get(%q) returned stub %v, want %v", step, n, stub, w.stub)
			}
		}
	}
	if _, _, ok := x.get(strings.Repeat("x", 300)); ok {
		t.Error("a name longer than any found something")
	}
}
