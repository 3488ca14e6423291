// Command looppeer measures toolmesh's tool-calling loop in its own process, as
// bench/peers/eino measures cloudwego/eino's ReAct agent: the same fake model (N turns of
// one add call, then an answer), the same add tool (a typed function whose schema is
// inferred from its input struct), the same arguments, and the same measurement code, so
// that the benchmark compares the two loops and nothing else.
//
// The model is minimal: one final chunk per turn, no copy of the request kept. The loop
// validates each call's arguments against the tool's schema, as it always does; there
// is no ToolCallContext, no decorator and no telemetry, as eino's agent has none.
//
//	looppeer [-turns 10] [-latency 800ms] [-throughput 1s] [-concurrency 8] [-warmup 200]
//
// It prints one JSON line (see loopMeasurement) and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"iter"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// arguments are the add call's arguments, as in every other variant of the benchmark.
const arguments = `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`

type pair struct {
	A float64 `json:"a" jsonschema:"the first operand"`
	B float64 `json:"b" jsonschema:"the second operand"`
}

// model answers turn k (1-based) of a run with one add call while k ≤ turns, then with
// "done": the turn is the number of tool results in the request, plus one.
type model struct{ turns int }

func (m model) Name() string { return "minimal" }

func (m model) Stream(_ context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		k := 1
		for _, msg := range req.Messages {
			if msg.Role == llm.RoleTool {
				k++
			}
		}
		r := &llm.Response{Text: "done", FinishReason: "stop"}
		if k <= m.turns {
			r = &llm.Response{ToolCalls: []llm.ToolCall{{ID: "call_" + strconv.Itoa(k), Name: "add", Arguments: arguments}}, FinishReason: "tool_calls"}
		}
		yield(llm.Chunk{Done: r}, nil)
	}
}

func main() {
	turns := flag.Int("turns", 10, "tool turns per run before the answer")
	latency := flag.Duration("latency", 800*time.Millisecond, "how long runs are timed one at a time")
	throughput := flag.Duration("throughput", time.Second, "how long runs are counted with -concurrency in flight")
	concurrency := flag.Int("concurrency", 8, "runs in flight in the throughput phase")
	warmup := flag.Int("warmup", 200, "runs before the measurement")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measurement to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "looppeer:", err)
			os.Exit(1)
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "looppeer:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	add := tool.MustFunc("add", "Add two numbers: a + b", func(_ context.Context, in pair) (string, error) {
		return strconv.FormatFloat(in.A+in.B, 'f', -1, 64), nil
	})
	m := model{turns: *turns}
	input := loop.Input{Messages: []llm.Message{{Role: llm.RoleUser, Text: "Add the two numbers, again and again."}}, Tools: []tool.Tool{add}}
	run := func(ctx context.Context) error {
		res, err := loop.Run(ctx, loop.Options{Provider: m, MaxIterations: *turns + 1}, input)
		if err != nil {
			return err
		}
		if res.Text != "done" || res.ToolCalls != *turns {
			return fmt.Errorf("the run ended with %q after %d tool calls, want \"done\" after %d", res.Text, res.ToolCalls, *turns)
		}
		return nil
	}
	out, err := measure(run, *warmup, *latency, *throughput, *concurrency)
	if err != nil {
		fmt.Fprintln(os.Stderr, "looppeer:", err)
		pprof.StopCPUProfile()
		os.Exit(1) //nolint:gocritic // the profile is stopped above
	}
	out.Peer = "toolmesh internal/loop, minimal model"
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

// loopMeasurement is what a loop peer prints: its runs' latency one at a time, the
// allocations of a run, and runs per second with concurrency in flight.
type loopMeasurement struct {
	Peer         string  `json:"peer"`
	Runs         int     `json:"runs"`
	P50us        float64 `json:"p50_us"`
	P99us        float64 `json:"p99_us"`
	AllocsPerRun float64 `json:"allocs_per_run"`
	BytesPerRun  float64 `json:"bytes_per_run"`
	PerSecond    float64 `json:"runs_per_second"`
	Concurrency  int     `json:"concurrency"`
}

// measure runs warmup runs, times runs one at a time for latency, then counts the runs
// concurrency goroutines complete in throughput. bench/peers/eino has the same code.
func measure(run func(context.Context) error, warmup int, latency, throughput time.Duration, concurrency int) (loopMeasurement, error) {
	ctx := context.Background()
	for range warmup {
		if err := run(ctx); err != nil {
			return loopMeasurement{}, err
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var ds []time.Duration
	for start := time.Now(); time.Since(start) < latency; {
		t0 := time.Now()
		if err := run(ctx); err != nil {
			return loopMeasurement{}, err
		}
		ds = append(ds, time.Since(t0))
	}
	runtime.ReadMemStats(&after)
	slices.Sort(ds)
	pct := func(p float64) float64 {
		return float64(ds[int(math.Ceil(p*float64(len(ds))))-1].Nanoseconds()) / 1e3
	}
	out := loopMeasurement{Runs: len(ds), P50us: pct(0.5), P99us: pct(0.99), Concurrency: concurrency,
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
