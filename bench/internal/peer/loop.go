package peer

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LoopMeasurement is what a loop peer prints: its runs' latency one at a time, the
// allocations of a run, and runs per second with concurrency in flight.
type LoopMeasurement struct {
	Peer         string  `json:"peer"`
	Runs         int     `json:"runs"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	AllocsPerRun float64 `json:"allocs_per_run"`
	BytesPerRun  float64 `json:"bytes_per_run"`
	PerSecond    float64 `json:"runs_per_second"`
	Concurrency  int     `json:"concurrency"`
}

// MeasureLoop runs warmup runs, times runs one at a time for latency, then counts the runs
// concurrency goroutines complete in throughput. bench/peers/eino, a module of its own, has a copy.
func MeasureLoop(run func(context.Context) error, warmup int, latency, throughput time.Duration, concurrency int) (LoopMeasurement, error) {
	ctx := context.Background()
	for range warmup {
		if err := run(ctx); err != nil {
			return LoopMeasurement{}, err
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var ds []time.Duration
	for start := time.Now(); time.Since(start) < latency; {
		t0 := time.Now()
		if err := run(ctx); err != nil {
			return LoopMeasurement{}, err
		}
		ds = append(ds, time.Since(t0))
	}
	runtime.ReadMemStats(&after)
	slices.Sort(ds)
	pct := func(p float64) float64 {
		return float64(ds[int(math.Ceil(p*float64(len(ds))))-1].Nanoseconds()) / 1e3
	}
	out := LoopMeasurement{Runs: len(ds), P50us: pct(0.5), P99us: pct(0.99), Concurrency: concurrency,
		AllocsPerRun: float64(after.Mallocs-before.Mallocs) / float64(len(ds)),
		BytesPerRun:  float64(after.TotalAlloc-before.TotalAlloc) / float64(len(ds))}
	var n atomic.Int64
	var failure atomic.Value
	var wg sync.WaitGroup
	deadline := time.Now().Add(throughput)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if err := run(ctx); err != nil {
					failure.Store(err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if err, ok := failure.Load().(error); ok {
		return out, err
	}
	if n.Load() == 0 {
		return out, errors.New("no run completed in the throughput phase")
	}
	out.PerSecond = float64(n.Load()) / time.Since(start).Seconds()
	return out, nil
}
