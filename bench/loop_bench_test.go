package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// BenchmarkLoopOverGRPC is the loop-grpc row in one process: a Run over gRPC to an
// orchestrator core whose scripted model asks for add ten times, one call a turn, served
// by a pkg/worker on loopback, every event streamed to the client. -cpuprofile shows
// what a run costs beyond its hops.
func BenchmarkLoopOverGRPC(b *testing.B) {
	const calls = 10
	script, err := loopScript(calls)
	if err != nil {
		b.Fatal(err)
	}
	c, err := startCore(coreOptions{provider: script})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.close)
	w, err := worker.New(worker.Options{ID: "bench-loop", Orchestrator: c.addr, Listen: "127.0.0.1:0", Capacity: 64,
		Logger: slog.New(slog.DiscardHandler)}, builtin.Math())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := c.waitTool(wctx, peer.Name); err != nil {
		b.Fatal(err)
	}
	cl, err := client.Dial(c.addr, insecure.NewCredentials())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() })
	req := &toolpb.RunRequest{Prompt: "Add the two numbers, again and again.", Tools: []string{peer.Name},
		Context: toolctx.MustOf(contextEntries...).Map()}
	b.ReportAllocs()
	for b.Loop() {
		final, err := cl.RunAndWait(ctx, req, nil)
		if err != nil || final.GetText() != "done" || final.GetIterations() != calls+1 {
			b.Fatalf("run: %v, %v", final, err)
		}
	}
}
