package bench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
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
	ctx, cl, req := loopBenchCore(b, calls, nil)
	b.ReportAllocs()
	for b.Loop() {
		final, err := cl.RunAndWait(ctx, req, nil)
		if err != nil || final.GetText() != "done" || final.GetIterations() != calls+1 {
			b.Fatalf("run: %v, %v", final, err)
		}
	}
}

// loopBenchCore starts an orchestrator core whose scripted model asks for add calls
// times (journaling its runs in store, nil: none), a pkg/worker serving add, and a
// client: the setup of the loop benchmarks, torn down with b.
func loopBenchCore(b testing.TB, calls int, store runlog.Store) (context.Context, *client.Client, *toolpb.RunRequest) {
	b.Helper()
	script, err := loopScript(calls)
	if err != nil {
		b.Fatal(err)
	}
	c, err := startCore(coreOptions{provider: script, journal: store})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.close)
	w, err := worker.New(worker.Options{ID: "bench-loop", Orchestrator: c.addr, Listen: "127.0.0.1:0", Capacity: 64,
		Logger: slog.New(slog.DiscardHandler)}, examplegroups.Math())
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
	return ctx, cl, req
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// systemCPU is the CPU time the machine spent busy so far, every process's (the
// database server's too), from /proc/stat.
func systemCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * 10 * time.Millisecond // USER_HZ
}

// BenchmarkLoopJournaled is BenchmarkLoopOverGRPC at 32 runs in flight with each run
// journaled: in memory, in SQLite (synchronous=FULL) and, where PostgreSQL is installed,
// in a private durable server. It reports the journal's commits per run.
func BenchmarkLoopJournaled(b *testing.B) {
	stores := map[string]func(b *testing.B) runlog.Store{
		"none": func(*testing.B) runlog.Store { return nil },
		"memory": func(b *testing.B) runlog.Store {
			s, err := runlog.OpenMemory(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"sqlite": func(b *testing.B) runlog.Store {
			s, err := runlog.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
	if _, err := harness.PostgresBin(); err == nil {
		stores["postgres"] = func(b *testing.B) runlog.Store {
			pg, err := harness.StartPostgresWith(context.Background(), harness.PostgresOptions{Durable: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pg.Stop)
			s, err := runlog.OpenPostgres(context.Background(), pg.DSN)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
	}
	for _, name := range []string{"none", "memory", "sqlite", "postgres"} {
		open, ok := stores[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			const calls = 10
			store := open(b)
			if store != nil {
				b.Cleanup(func() { _ = store.Close() })
			}
			ctx, cl, req := loopBenchCore(b, calls, store)
			var before runlog.Stats
			sr, counts := store.(runlog.StatsReporter)
			if counts {
				before = sr.Stats()
			}
			b.ReportAllocs()
			b.SetParallelism(16)
			cpu0, sys0 := processCPU(), systemCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					final, err := cl.RunAndWait(ctx, req, nil)
					if err != nil || final.GetText() != "done" || final.GetIterations() != calls+1 {
						b.Errorf("run: %v, %v", final, err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/run")
			b.ReportMetric(float64((systemCPU()-sys0).Microseconds())/float64(b.N), "all-cpu-µs/run")
			if counts {
				after := sr.Stats()
				b.ReportMetric(float64(after.Commits-before.Commits)/float64(b.N), "commits/run")
				b.ReportMetric(float64(after.Writes-before.Writes)/float64(b.N), "writes/run")
				if c := after.Commits - before.Commits; c > 0 {
					b.ReportMetric(float64(after.Committing-before.Committing)/float64(c)/1e3, "µs/commit")
					b.ReportMetric(float64(after.Logging-before.Logging)/float64(c)/1e3, "log-µs/commit")
					b.ReportMetric(float64(after.Waited-before.Waited)/float64(after.Writes-before.Writes)/1e3, "wait-µs/write")
				}
			}
		})
	}
}
