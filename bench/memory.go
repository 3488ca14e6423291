package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// memoryRound is one measurement of the orchestrator's memory per open run.
type memoryRound struct {
	Runs        int     `json:"runs"`
	BeforeKiB   int64   `json:"before_kib"`
	AfterKiB    int64   `json:"after_kib"`
	KiBPerRun   float64 `json:"kib_per_run"`
	OpenSeconds float64 `json:"open_seconds"` // time to open all runs and see each one start
}

// slowScript answers every model call after an hour: runs stay open until cancelled.
const slowScript = `name: slow
rules:
  - reply:
      delay: 1h
      text: late
`

// measureMemory starts a fresh bin/orchestrator whose scripted model takes an hour to
// answer, opens n Run streams with pkg/client over one connection, waits until every
// run has started (its RunStarted event arrived), and reads the orchestrator's VmRSS
// from /proc before the first run and once all are open.
func measureMemory(ctx context.Context, cfg Config, n int) (memoryRound, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "toolmesh-bench-*")
	if err != nil {
		return memoryRound{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	script := filepath.Join(dir, "slow.yaml")
	conf := filepath.Join(dir, "orchestrator.yaml")
	if err := os.WriteFile(script, []byte(slowScript), 0o600); err != nil {
		return memoryRound{}, err
	}
	yaml := fmt.Sprintf("loop:\n  max_concurrent_runs: %d\n  run_timeout: 2h\n", n+100)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		return memoryRound{}, err
	}
	p, err := startProc("orchestrator", cfg.Bins.Orchestrator, childEnv("OTEL_SDK_DISABLED=true"),
		"--listen", "127.0.0.1:0", "--config", conf, "--script", script, "--log-format", "json")
	if err != nil {
		return memoryRound{}, err
	}
	defer p.stop(10 * time.Second)
	rec, err := p.waitJSON(ctx, "orchestrator serving")
	if err != nil {
		return memoryRound{}, err
	}
	addr, _ := rec["address"].(string)
	c, err := client.Dial(addr, insecure.NewCredentials())
	if err != nil {
		return memoryRound{}, err
	}
	defer func() { _ = c.Close() }()
	// Open the connection before the first reading: its cost is not a run's.
	if _, err := c.ListToolGroups(ctx); err != nil {
		return memoryRound{}, err
	}
	req := &toolpb.RunRequest{Prompt: "Take your time."}
	return holdOpen(ctx, p, n, cfg.OpenHold, func(ctx context.Context, started chan<- error) {
		first := true
		for ev, err := range c.Run(ctx, req) {
			if err != nil {
				if first {
					started <- err
				}
				return
			}
			if first && ev.GetStarted() != nil {
				first = false
				started <- nil
			}
		}
		if first {
			started <- fmt.Errorf("the run's stream ended before it started")
		}
	})
}

// renewalPeriod is how often the measured orchestrator renews its runs' leases: a third
// of journal.lease_ttl, which it runs with at its default.
func renewalPeriod() time.Duration { return config.Default().Journal.LeaseTTL.D() / 3 }

// holdOpen has one goroutine run open (which reports on started once its stream is open
// and holds it until ctx ends) as a warm-up, reads p's VmRSS, has n more run open, reads
// VmRSS again once all have been open for hold, and ends them. The warm-up stream makes the
// first reading count what a process pays once, not per stream: the pages of its code
// and data that the first stream's path touches (about 2 MiB of the orchestrator's
// binary), its connection's buffers, its first timers and pools.
func holdOpen(ctx context.Context, p *proc, n int, hold time.Duration, open func(ctx context.Context, started chan<- error)) (memoryRound, error) {
	openCtx, stop := context.WithCancel(ctx)
	started := make(chan error, n+1)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	wg.Go(func() { open(openCtx, started) })
	select {
	case err := <-started:
		if err != nil {
			return memoryRound{}, fmt.Errorf("the warm-up stream: %w\n%s", err, p.tail())
		}
	case <-ctx.Done():
		return memoryRound{}, fmt.Errorf("waiting for the warm-up stream to open: %w", ctx.Err())
	}
	time.Sleep(200 * time.Millisecond)
	before, err := vmRSS(p.pid())
	if err != nil {
		return memoryRound{}, err
	}
	t0 := time.Now()
	for range n {
		wg.Go(func() { open(openCtx, started) })
	}
	var failure error
	for range n {
		select {
		case err := <-started:
			if err != nil && failure == nil {
				failure = err
			}
		case <-ctx.Done():
			failure = fmt.Errorf("waiting for %d streams to open: %w", n, ctx.Err())
		}
		if failure != nil {
			break
		}
	}
	openFor := time.Since(t0)
	var after int64
	if failure == nil {
		// Every handler reaches the wait it holds its stream in, and what an open run does
		// while it waits (its lease renewed) is done at least once.
		time.Sleep(hold)
		after, failure = vmRSS(p.pid())
	}
	if failure != nil {
		return memoryRound{}, fmt.Errorf("%w\n%s", failure, p.tail())
	}
	return memoryRound{Runs: n, BeforeKiB: before, AfterKiB: after, KiBPerRun: float64(after-before) / float64(n), OpenSeconds: openFor.Seconds()}, nil
}

// measureMemoryFloor measures what an open server stream costs a bare grpc-go server:
// bench/cmd/rawadd -health, with default options, holding n grpc.health.v1 Watch
// streams open over one connection (a Watch handler waits for a change, as a run waits
// for its model), read as measureMemory reads the orchestrator. No run can cost less.
func measureMemoryFloor(ctx context.Context, cfg Config, n int) (memoryRound, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := startProc("rawadd(health)", cfg.Bins.RawAdd, childEnv(), "-health")
	if err != nil {
		return memoryRound{}, err
	}
	defer p.stop(10 * time.Second)
	rec, err := p.waitJSON(ctx, "serving")
	if err != nil {
		return memoryRound{}, err
	}
	addr, _ := rec["address"].(string)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return memoryRound{}, err
	}
	defer func() { _ = conn.Close() }()
	h := healthpb.NewHealthClient(conn)
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return memoryRound{}, err
	}
	return holdOpen(ctx, p, n, cfg.OpenHold, func(ctx context.Context, started chan<- error) {
		s, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		started <- err
		if err == nil {
			_, _ = s.Recv() // until the watches stop
		}
	})
}
