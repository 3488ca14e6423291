// Command eino measures cloudwego/eino's ReAct agent (flow/agent/react) as
// bench/cmd/looppeer measures toolmesh's loop: the same fake model (N turns of one add
// call, then an answer), the same add tool (a typed function whose schema eino infers
// with utils.InferTool), the same arguments, and the same measurement code. It is a
// module of its own so that toolmesh's go.mod does not carry eino; make bench builds it
// into bin/einoloop.
//
//	einoloop [-turns 10] [-latency 800ms] [-throughput 1s] [-concurrency 8] [-warmup 200]
//
// It prints one JSON line (see loopMeasurement) and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/eino/components/model"
	"github.com/cloudwego/eino/components/tool"
	"github.com/cloudwego/eino/components/tool/utils"
	"github.com/cloudwego/eino/compose"
	"github.com/cloudwego/eino/flow/agent/react"
	"github.com/cloudwego/eino/schema"
)

// arguments are the add call's arguments, as in every variant of the benchmark.
const arguments = `{"a": 12345.678901234567890123456789012345678901, "b": 98765.432109876543210987654321098765432109}`

type pair struct {
	A float64 `json:"a" jsonschema:"description=the first operand"`
	B float64 `json:"b" jsonschema:"description=the second operand"`
}

// fakeModel answers turn k (1-based) of a run with one add call while k ≤ turns, then
// with "done": the turn is the number of tool results in the input, plus one.
type fakeModel struct{ turns int }

func (m fakeModel) Generate(_ context.Context, input []*schema.Message, _ ...model.Option) (*schema.Message, error) {
	k := 1
	for _, msg := range input {
		if msg.Role == schema.Tool {
			k++
		}
	}
	if k > m.turns {
		return schema.AssistantMessage("done", nil), nil
	}
	return schema.AssistantMessage("", []schema.ToolCall{{ID: "call_" + strconv.Itoa(k), Type: "function",
		Function: schema.FunctionCall{Name: "add", Arguments: arguments}}}), nil
}

func (m fakeModel) Stream(ctx context.Context, input []*schema.Message, opts ...model.Option) (*schema.StreamReader[*schema.Message], error) {
	msg, err := m.Generate(ctx, input, opts...)
	if err != nil {
		return nil, err
	}
	return schema.StreamReaderFromArray([]*schema.Message{msg}), nil
}

func (m fakeModel) WithTools([]*schema.ToolInfo) (model.ToolCallingChatModel, error) { return m, nil }

func main() {
	turns := flag.Int("turns", 10, "tool turns per run before the answer")
	latency := flag.Duration("latency", 800*time.Millisecond, "how long runs are timed one at a time")
	throughput := flag.Duration("throughput", time.Second, "how long runs are counted with -concurrency in flight")
	concurrency := flag.Int("concurrency", 8, "runs in flight in the throughput phase")
	warmup := flag.Int("warmup", 200, "runs before the measurement")
	flag.Parse()
	if err := run(*turns, *latency, *throughput, *concurrency, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "einoloop:", err)
		os.Exit(1)
	}
}

func run(turns int, latency, throughput time.Duration, concurrency, warmup int) error {
	ctx := context.Background()
	add, err := utils.InferTool("add", "Add two numbers: a + b", func(_ context.Context, in pair) (string, error) {
		return strconv.FormatFloat(in.A+in.B, 'f', -1, 64), nil
	})
	if err != nil {
		return err
	}
	agent, err := react.NewAgent(ctx, &react.AgentConfig{
		ToolCallingModel: fakeModel{turns: turns},
		ToolsConfig:      compose.ToolsNodeConfig{Tools: []tool.BaseTool{add}},
		MaxStep:          2*turns + 2,
	})
	if err != nil {
		return err
	}
	input := []*schema.Message{schema.UserMessage("Add the two numbers, again and again.")}
	one := func(ctx context.Context) error {
		out, err := agent.Generate(ctx, input)
		if err != nil {
			return err
		}
		if out.Content != "done" {
			return fmt.Errorf("the run ended with %q, want \"done\"", out.Content)
		}
		return nil
	}
	out, err := measure(one, warmup, latency, throughput, concurrency)
	if err != nil {
		return err
	}
	out.Peer = "cloudwego/eino flow/agent/react"
	return json.NewEncoder(os.Stdout).Encode(out)
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
// concurrency goroutines complete in throughput: a copy of bench/internal/peer.MeasureLoop,
// which this module cannot import.
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
