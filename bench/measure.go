package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// callFunc is one call of a variant: a tool call, or a whole run for the loop variants.
// It returns an error when the call failed or its result is not the expected one.
type callFunc func(ctx context.Context) error

// latency is what one concurrency-1 phase measured.
type latency struct {
	Calls       int     `json:"calls"` // made, the unrecorded first call of each slice included
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	MeanUs      float64 `json:"mean_us"`
	AllocsPerOp float64 `json:"allocs_per_call"`
	BytesPerOp  float64 `json:"bytes_per_call"`
}

// measureLatency calls fn one call at a time, up to maxCalls or maxTime, whichever comes
// first, and reports the latency percentiles and the allocations per call.
func measureLatency(ctx context.Context, fn callFunc, maxCalls int, maxTime time.Duration) (latency, error) {
	var a latencyAcc
	if err := a.run(ctx, fn, maxCalls, maxTime); err != nil {
		return latency{}, err
	}
	return a.result(), nil
}

// latencyAcc gathers the calls of several slices of a concurrency-1 phase. The slices of
// all variants alternate within a round, so that each variant samples the same states
// of the machine (on this VM the latency of a ping-pong between two processes flips
// between two levels as the scheduler places them).
type latencyAcc struct {
	durs            []time.Duration
	mallocs, nbytes uint64
	unrecorded      int // the first call of each slice
}

// run adds one slice: a first call that is not recorded (the variant was idle while the
// others ran: its first call pays for that), then up to maxCalls calls or maxTime.
// Allocations are this process's runtime.MemStats deltas over the recorded calls.
func (a *latencyAcc) run(ctx context.Context, fn callFunc, maxCalls int, maxTime time.Duration) error {
	if err := fn(ctx); err != nil {
		return err
	}
	a.unrecorded++
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for n := 0; n < maxCalls && (n == 0 || time.Since(start) < maxTime); n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := fn(ctx); err != nil {
			return err
		}
		a.durs = append(a.durs, time.Since(t0))
	}
	runtime.ReadMemStats(&after)
	a.mallocs += after.Mallocs - before.Mallocs
	a.nbytes += after.TotalAlloc - before.TotalAlloc
	return nil
}

func (a *latencyAcc) result() latency {
	n := len(a.durs)
	if n == 0 {
		return latency{}
	}
	var sum time.Duration
	for _, d := range a.durs {
		sum += d
	}
	sorted := slices.Clone(a.durs)
	slices.Sort(sorted)
	return latency{
		Calls:       n + a.unrecorded,
		P50us:       us(percentile(sorted, 0.50)),
		P99us:       us(percentile(sorted, 0.99)),
		MeanUs:      us(sum / time.Duration(n)),
		AllocsPerOp: float64(a.mallocs) / float64(n),
		BytesPerOp:  float64(a.nbytes) / float64(n),
	}
}

// throughput is what one concurrency-N phase measured.
type throughput struct {
	Concurrency int     `json:"concurrency"`
	Calls       int64   `json:"calls"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	// SelfCPUus and PeerCPUus are the CPU time per call of this process and of the
	// process on the other side of the call (0 when there is none), while the phase ran.
	SelfCPUus float64 `json:"self_cpu_us_per_call"`
	PeerCPUus float64 `json:"peer_cpu_us_per_call"`
	// Journal is what the variant's journal did meanwhile, for a journaled variant.
	Journal *journalRound `json:"journal,omitempty"`
}

// measureThroughput keeps conc calls in flight for d (or until maxCalls calls were
// started) and reports the completed calls per second of wall time, the time to finish
// the calls in flight at the end included.
func measureThroughput(parent context.Context, fn callFunc, conc int, d time.Duration, maxCalls int64) (throughput, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		started atomic.Int64
		done    atomic.Int64
		errOnce sync.Once
		failure error
		wg      sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) && started.Add(1) <= maxCalls {
				if err := fn(ctx); err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { failure = err })
					}
					cancel()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failure != nil {
		return throughput{}, failure
	}
	if err := parent.Err(); err != nil {
		return throughput{}, err
	}
	n := done.Load()
	if n == 0 {
		return throughput{}, fmt.Errorf("no call completed in %s", d)
	}
	return throughput{Concurrency: conc, Calls: n, Seconds: elapsed.Seconds(), PerSecond: float64(n) / elapsed.Seconds()}, nil
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median of the values; NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
