//go:build !race

package orchestrator_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/orchestrator"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestWaitingRunsKeepSmallStacks: a run waiting for its model holds a goroutine (its
// stream's) whose stack is most of what an open run costs. With the frames under the
// wait few and small (one interceptor, no log handler's or start's deep calls left on
// it), the runtime gives each a 4 KiB stack; with one frame too many (about 150 bytes
// more), or one deep call on that goroutine before the wait, each waits on 8 KiB. As
// make bench measures it: the first wait for the scripted model, telemetry off (with it
// on, otelgrpc's stats handler starts the stream's span on the same goroutine, deep in
// the SDK, before toolmesh's code runs: 8 KiB). Built without -race, which grows every
// frame (make test runs it so, on its own).
func TestWaitingRunsKeepSmallStacks(t *testing.T) {
	const runs = 300
	t.Setenv("OTEL_SDK_DISABLED", "true")
	script := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(script, []byte("name: slow\nrules:\n  - reply:\n      delay: 1h\n      text: late\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Provider.Script = script
	cfg.Loop.MaxConcurrentRuns = runs + 10
	cfg.Loop.RunTimeout = config.Duration(2 * time.Hour)
	// The orchestrator's own logger, as it logs by default: JSON, each run's start.
	o, err := orchestrator.New(orchestrator.Options{Config: cfg, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), ShutdownTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	defer func() { o.Close(); <-done }()
	conn, err := grpc.NewClient(o.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := toolpb.NewOrchestratorServiceClient(conn)
	// The streams' context cannot end (closing conn ends them): grpc-go then watches it
	// with no goroutine of this process's per stream.
	sctx := context.WithoutCancel(ctx)
	open := func(n int) {
		for range n {
			stream, err := c.Run(sctx, &toolpb.RunRequest{Prompt: "wait"}, grpc.WaitForReady(true))
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := stream.Recv()
				if err != nil {
					t.Fatalf("before the run started: %v", err)
				}
				if ev.GetStarted() != nil {
					break
				}
			}
		}
	}
	open(1) // what the first run pays once
	before := stackInUse()
	open(runs)
	// Each run has two goroutines here: its stream's, and the client's stream's (grpc-go
	// watches a stream's context with one), about 3 KiB: 7 KiB a run where the stream's
	// stack is 4 KiB, 11 where it is 8.
	per := float64(stackInUse()-before) / runs
	t.Logf("%.0f bytes of stack per waiting run, its client's included", per)
	if per > 9<<10 {
		t.Errorf("each waiting run holds %.1f KiB of stack with its client's, want about 7 (its stream's 4 KiB): "+
			"a frame under the wait grew, or a deep call runs on the stream's goroutine before it; "+
			"bin/orchestrator with GOTRACEBACK=system, sent SIGQUIT while runs wait, prints each frame's fp and sp "+
			"(docs/run-lifecycle.md says what keeps it small)", per/1024)
	}
}

// stackInUse is the bytes of goroutine stacks in use, after the collections that give
// back what they can.
func stackInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}
