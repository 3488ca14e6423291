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
	"flag"
	"fmt"
	"iter"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/toolmesh/toolmesh/bench/internal/peer"
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
	out, err := peer.MeasureLoop(run, *warmup, *latency, *throughput, *concurrency)
	if err != nil {
		fmt.Fprintln(os.Stderr, "looppeer:", err)
		pprof.StopCPUProfile()
		os.Exit(1) //nolint:gocritic // the profile is stopped above
	}
	out.Peer = "toolmesh internal/loop, minimal model"
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
