package router

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// addTool is a definition shaped like the built-in add: a one-line description and two
// documented number parameters.
func addTool(name string) tool.Tool {
	return tool.New(name, "Adds two numbers and returns the sum.",
		schema.Params(schema.Number("a", "The first addend"), schema.Number("b", "The second addend")),
		func(context.Context, string) (tool.Result, error) { return tool.Text("unused"), nil }, tool.Idempotent())
}

// replicatedAdd returns a router on which n workers serve the tool add, each with a
// capacity of 16 and a different number of calls in flight, and add's stub. Nothing
// listens on the workers' addresses: pick never calls them.
func replicatedAdd(b *testing.B, n int) (*Router, *remoteTool) {
	r := newRouter(b, Options{})
	for i := range n {
		reg := registration(fmt.Sprintf("worker-%02d", i), fmt.Sprintf("10.0.%d.%d:7071", i/250, i%250+1), "math", addTool("add"))
		reg.Capacity = 16
		l := mustRegister(b, r, reg)
		l.w.inFlight.Store(int32(i % 5))
		l.w.calls.Store(int64(1000 + i))
	}
	t, err := r.Tool("add")
	if err != nil {
		b.Fatal(err)
	}
	return r, t.(*remoteTool)
}

func BenchmarkPick(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			r, add := replicatedAdd(b, n)
			w, changed := r.pick(add, nil)
			if w == nil || changed {
				b.Fatalf("pick = %v, changed %v; want a replica", w, changed)
			}
			r.mu.RLock()
			replica := r.tools["add"].replicas[w.id] == w
			r.mu.RUnlock()
			if !replica {
				b.Fatalf("pick chose %s, which is not a replica of add", w.id)
			}
			// Of two replicas, both are always the candidates: the less loaded one wins.
			if n == 2 && w.id != "worker-00" {
				b.Fatalf("pick chose %s (%d in flight) over worker-00 (0 in flight)", w.id, w.inFlight.Load())
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = r.pick(add, nil)
			}
		})
	}
}

// BenchmarkTool looks up tables of up to 100,000 tools, as bench/scaling.go does: the
// names in random order, whose lookups miss the caches in a large table, and one name
// again and again.
func BenchmarkTool(b *testing.B) {
	for _, n := range []int{10, 1000, 10000, 100000} {
		r, names := toolTableOf(b, n)
		b.Run(fmt.Sprintf("tools=%d/random", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = r.Tool(names[i])
				i++
				if i == len(names) {
					i = 0
				}
			}
		})
		b.Run(fmt.Sprintf("tools=%d/hot", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = r.Tool(names[0])
			}
		})
	}
}

// toolTableOf returns a router on which workers of 100 tools each serve n tools, and
// their names in random order, having checked that Tool finds each and nothing else.
func toolTableOf(b *testing.B, n int) (*Router, []string) {
	r := newRouter(b, Options{Limits: Limits{MaxTools: n, MaxWorkers: n / 100}})
	names := make([]string, n)
	const perWorker = 100
	for w := 0; w*perWorker < n; w++ {
		var tools []tool.Tool
		for i := w * perWorker; i < min(n, (w+1)*perWorker); i++ {
			names[i] = fmt.Sprintf("tool_%05d", i)
			tools = append(tools, addTool(names[i]))
		}
		mustRegister(b, r, registration(fmt.Sprintf("worker-%02d", w), fmt.Sprintf("10.1.0.%d:7071", w+1), fmt.Sprintf("group_%02d", w), tools...))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	for _, name := range names {
		t, err := r.Tool(name)
		if err != nil || t.Definition().Name != name {
			b.Fatalf("Tool(%q) = %v, %v", name, t, err)
		}
	}
	if _, err := r.Tool("tool_missing"); !errors.Is(err, ErrUnknownTool) {
		b.Fatalf("Tool of an unknown name: %v, want ErrUnknownTool", err)
	}
	return r, names
}

// BenchmarkProgressHop compares a call of a tool that does not report progress (the
// unary Invoke, which progress must not slow down) with calls of a tool that does (the
// InvokeStream call), with no report and with three, through a real worker on loopback.
func BenchmarkProgressHop(b *testing.B) {
	mk := func(name string, reports int, opts ...tool.Option) tool.Tool {
		return tool.New(name, "answers", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			for i := 0; i < reports; i++ {
				tool.Progress(ctx, "working")
			}
			return tool.Text("done"), nil
		}, opts...)
	}
	unary := mk("unary", 0)
	silent := mk("stream_silent", 0, tool.ReportsProgress())
	chatty := mk("stream_3_reports", 3, tool.ReportsProgress())
	w := startSDK(b, "w1", unary, silent, chatty)
	r := newRouter(b, Options{})
	mustRegister(b, r, sdkRegistration(w, unary, silent, chatty))
	ctx := toolcall.WithProgress(context.Background(), func(string) {})
	for _, name := range []string{"unary", "stream_silent", "stream_3_reports"} {
		b.Run(name, func(b *testing.B) {
			t, err := r.Tool(name)
			if err != nil {
				b.Fatal(err)
			}
			if res, err := t.Call(ctx, `{}`); err != nil || res.Content != "done" {
				b.Fatalf("Call = %+v, %v", res, err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = t.Call(ctx, `{}`)
			}
		})
	}
}
