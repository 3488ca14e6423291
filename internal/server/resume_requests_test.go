package server

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// recModel records every request (as JSON) and answers by the number of tool messages
// in the request: turns[n] is the answer to a request with n tool results; block, when
// set, is the turn at which it blocks until ctx ends (the "crash" point).
type recModel struct {
	mu    sync.Mutex
	reqs  []string
	turns []llm.Response
	block int
	delay map[int]time.Duration
	asked chan int
}

func (m *recModel) Name() string         { return "rec" }
func (m *recModel) DefaultModel() string { return "m" }
func (m *recModel) Stream(ctx context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	b, _ := json.Marshal(req)
	n := 0
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleTool {
			n++
		}
	}
	m.mu.Lock()
	m.reqs = append(m.reqs, string(b))
	m.mu.Unlock()
	if m.asked != nil {
		select {
		case m.asked <- n:
		default:
		}
	}
	return func(yield func(llm.Chunk, error) bool) {
		if d := m.delay[n]; d > 0 {
			time.Sleep(d)
		}
		if n == m.block {
			<-ctx.Done()
			yield(llm.Chunk{}, ctx.Err())
			return
		}
		r := m.turns[n]
		yield(llm.Chunk{Done: &r}, nil)
	}
}

func (m *recModel) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.reqs...)
}

func call(id, name, args string) llm.Response {
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: args}}, FinishReason: "tool_calls"}
}

// crashAt runs req on env e until the model is asked the turn m blocks at, then shuts
// the orchestrator down (a stop past its shutdown timeout: the run is left unfinished).
func crashAt(t *testing.T, ctx context.Context, e *env, m *recModel, req *toolpb.RunRequest) {
	t.Helper()
	m.asked = make(chan int, 16)
	rctx, stop := context.WithCancel(ctx)
	go func() {
		for _, err := range e.cl.Run(rctx, req) {
			if err != nil {
				return
			}
		}
	}()
	for n := range m.asked {
		if n == m.block {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // the records before the blocked call are committed (settle)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e.srv.Shutdown(sctx)
	cancel()
}

func runToEnd(t *testing.T, ctx context.Context, e *env, req *toolpb.RunRequest) {
	t.Helper()
	for _, err := range e.cl.Run(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func watchToEnd(t *testing.T, ctx context.Context, e *env, id string) {
	t.Helper()
	for _, err := range e.cl.Watch(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestProcessToolReplays: a run that called the built-in process_status before the
// crash replays what it said (its running time then) after the resume, so that the
// model's next request is the one it was asked before the crash; the tool was not
// journaled, and said another running time. GetRun gives the resumed run its first
// start.
func TestProcessToolReplays(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{call("c1", "process_status", "{}"), {Text: "done", FinishReason: "stop"}}
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m1 := &recModel{turns: turns, block: 1, delay: map[int]time.Duration{0: 1100 * time.Millisecond}}
	e1 := newEnv(t, envOptions{journal: j, provider: m1})
	req := &toolpb.RunRequest{RunId: "ps-1", Prompt: "go", ToolGroups: []string{"agent_process"}, Detached: true}
	crashAt(t, ctx, e1, m1, req)
	first, err := e1.cl.GetRun(ctx, "ps-1")
	if err != nil {
		t.Fatal(err)
	}

	m2 := &recModel{turns: turns, block: -1}
	e2 := newEnv(t, envOptions{journal: j, provider: m2})
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	if got, err := e2.cl.GetRun(ctx, "ps-1"); err != nil || !got.GetStartedAt().AsTime().Equal(first.GetStartedAt().AsTime()) {
		t.Errorf("the resumed run started at %v (%v), want its first start %v", got.GetStartedAt().AsTime(), err, first.GetStartedAt().AsTime())
	}
	watchToEnd(t, ctx, e2, "ps-1")
	r1, r2 := m1.requests(), m2.requests()
	if len(r1) < 2 || len(r2) < 1 {
		t.Fatalf("requests: %d before, %d after", len(r1), len(r2))
	}
	if r1[1] != r2[0] {
		t.Errorf("the first request after the resume differs from the one sent before the crash:\nbefore: %s\nafter:  %s", r1[1], r2[0])
	}
}

// TestRemoteStateReplays: a run that opened a cart and added to it before the crash
// replays cart_add's outcome and the state it returned, so that the next live cart call
// sees the cart as the uninterrupted run's does; the state was not replayed, and the
// call saw the cart as open_cart had left it.
func TestRemoteStateReplays(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{
		call("c1", "open_cart", `{"store":"postgres://shop/main"}`),
		call("c2", "cart_add", `{"sku":"A-100","quantity":2}`),
		call("c3", "cart_view", `{}`),
		{Text: "done", FinishReason: "stop"},
	}
	req := func() *toolpb.RunRequest {
		return &toolpb.RunRequest{RunId: "shop-1", Prompt: "go", ToolGroups: []string{examplegroups.ShopRole}, Detached: true}
	}
	// The uninterrupted run.
	j0, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j0.Close() })
	m0 := &recModel{turns: turns, block: -1}
	e0 := newEnv(t, envOptions{journal: j0, provider: m0})
	e0.startWorker("w-0", examplegroups.Shop())
	runToEnd(t, ctx, e0, req())

	// The same run, crashed while the model is asked its third turn, and resumed.
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m1 := &recModel{turns: turns, block: 2}
	e1 := newEnv(t, envOptions{journal: j, provider: m1})
	e1.startWorker("w-1", examplegroups.Shop())
	crashAt(t, ctx, e1, m1, req())
	m2 := &recModel{turns: turns, block: -1}
	e2 := newEnv(t, envOptions{journal: j, provider: m2})
	e2.startWorker("w-2", examplegroups.Shop())
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, "shop-1")
	r0, r1, r2 := m0.requests(), m1.requests(), m2.requests()
	t.Logf("requests: uninterrupted %d, before the crash %d, after %d", len(r0), len(r1), len(r2))
	if len(r0) != 4 || len(r2) != 2 {
		t.Fatalf("unexpected request counts")
	}
	if r0[2] != r1[2] || r0[2] != r2[0] {
		t.Errorf("third request differs:\nuninterrupted: %s\nbefore crash:  %s\nafter resume:  %s", r0[2], r1[2], r2[0])
	}
	if r0[3] != r2[1] {
		t.Errorf("fourth request differs:\nuninterrupted: %s\nafter resume:  %s", r0[3], r2[1])
	}
}

// TestSelectionReplays: a selectable facade's selection (open_cart: the worker's
// selector) is journaled like any call: a resumed run replays it, without sending it to
// a replica again; it was not journaled, and the resumed run ran the selector again.
func TestSelectionReplays(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{
		call("c1", "open_cart", `{"store":"postgres://shop/main"}`),
		call("c2", "cart_add", `{"sku":"A-100","quantity":2}`),
		{Text: "done", FinishReason: "stop"},
	}
	req := &toolpb.RunRequest{RunId: "shop-2", Prompt: "go", ToolGroups: []string{examplegroups.ShopRole}, Detached: true}
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m1 := &recModel{turns: turns, block: 2}
	e1 := newEnv(t, envOptions{journal: j, provider: m1})
	e1.startWorker("w-1", examplegroups.Shop())
	crashAt(t, ctx, e1, m1, req)
	recs, _ := j.Read(ctx, "shop-2", 0, 1000)
	before := len(recs)
	outcomes := 0
	for _, r := range recs {
		if r.Kind == runlog.KindOutcome && strings.Contains(string(r.Data), "/1/c1") {
			outcomes++
		}
	}
	if outcomes != 1 {
		t.Errorf("the selection has %d outcome records before the crash, want 1", outcomes)
	}
	m2 := &recModel{turns: turns, block: -1}
	e2 := newEnv(t, envOptions{journal: j, provider: m2})
	e2.startWorker("w-2", examplegroups.Shop())
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, "shop-2")
	recs, _ = j.Read(ctx, "shop-2", 0, 1000)
	for _, r := range recs[before:] {
		if r.Kind == runlog.KindDispatch && strings.Contains(string(r.Data), "/1/c1") {
			t.Errorf("the resumed run sent the selection again: %s", r.Data)
		}
	}
	r1, r2 := m1.requests(), m2.requests()
	if len(r1) != 3 || len(r2) != 1 || r1[2] != r2[0] {
		t.Errorf("the first request after the resume differs from the one before the crash (%d, %d requests):\nbefore: %v\nafter:  %v", len(r1), len(r2), r1, r2)
	}
}

// TestReplayedModelCallsCostNothing: a resumed run's cost metric counts the model calls
// it makes, not those the journal answers: the last replayed call was counted again.
func TestReplayedModelCallsCostNothing(t *testing.T) {
	ctx := testContext(t)
	usage := llm.Usage{InputTokens: 1000, OutputTokens: 1000}
	first, last := call("c1", "process_status", "{}"), llm.Response{Text: "done", FinishReason: "stop"}
	first.Usage, last.Usage = usage, usage
	turns := []llm.Response{first, last}
	priced := func(c *config.Config) {
		c.Models.Prices = map[string]config.Price{"rec/m": {InputPerMTok: 1000, OutputPerMTok: 1000}}
	}
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m1 := &recModel{turns: turns, block: 1}
	e1 := newEnv(t, envOptions{journal: j, provider: m1, configure: priced})
	crashAt(t, ctx, e1, m1, &toolpb.RunRequest{RunId: "cost-1", Prompt: "go", ToolGroups: []string{"agent_process"}, Detached: true})

	rec := telemetrytest.New(t, telemetry.Options{})
	m2 := &recModel{turns: turns, block: -1}
	e2 := newEnv(t, envOptions{journal: j, provider: m2, configure: priced, tel: rec.Telemetry})
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, "cost-1")
	sum, ok := rec.Metric(t, telemetry.MetricCost).Data.(metricdata.Sum[float64])
	if !ok || len(sum.DataPoints) != 1 {
		t.Fatalf("cost = %+v, want one data point", rec.Metric(t, telemetry.MetricCost).Data)
	}
	if got, want := sum.DataPoints[0].Value, 2.0; got != want { // one live call: 1000 + 1000 tokens at $1000 per million
		t.Errorf("the resumed run's cost metric is $%v, want $%v (its one live model call)", got, want)
	}
}

// boardGroup's tools add to the blackboard, slow_add after a while.
func boardGroup() worker.Group {
	add := func(name, typ string, d time.Duration) tool.Tool {
		return tool.New(name, "Adds a "+typ+".", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			time.Sleep(d)
			if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: typ, JSON: []byte(`{"by":"` + name + `"}`)}); err != nil {
				return tool.Result{}, err
			}
			return tool.Text("added"), nil
		})
	}
	return worker.Group{Role: "board", Tools: []tool.Tool{add("slow_add", "Slow", 300*time.Millisecond), add("fast_add", "Fast", 0)}}
}

// TestBoardOrderReplays: two calls of one turn add to the blackboard, the second one
// last (it is slower); the next turn lists the blackboard. The resumed run's replay adds
// the entries in the order the calls ended the first time, so that the model reads the
// same list; they were replayed at once, and added in the order the goroutines ran (the
// second first, as a rule).
func TestBoardOrderReplays(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{
		{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "fast_add", Arguments: "{}"}, {ID: "c2", Name: "slow_add", Arguments: "{}"}}},
		{}, // unused: the two results come back in one request
		call("c3", "blackboard_list", "{}"),
		{Text: "done", FinishReason: "stop"},
	}
	for i := range 3 {
		id := fmt.Sprintf("bb-%d", i)
		req := &toolpb.RunRequest{RunId: id, Prompt: "go", ToolGroups: []string{"board", "blackboard"}, Detached: true}
		j, _ := runlog.OpenMemory(context.Background())
		t.Cleanup(func() { _ = j.Close() })
		m1 := &recModel{turns: turns, block: 3}
		e1 := newEnv(t, envOptions{journal: j, provider: m1})
		e1.startWorker("w-1", boardGroup())
		crashAt(t, ctx, e1, m1, req)
		m2 := &recModel{turns: turns, block: -1}
		e2 := newEnv(t, envOptions{journal: j, provider: m2})
		e2.startWorker("w-2", boardGroup())
		if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
			t.Fatalf("Resume = %d, %v", n, err)
		}
		watchToEnd(t, ctx, e2, id)
		r1, r2 := m1.requests(), m2.requests()
		if len(r1) != 3 || len(r2) != 1 {
			t.Fatalf("requests %d, %d", len(r1), len(r2))
		}
		if !strings.Contains(r1[2], `[0] Fast`) {
			t.Fatalf("before the crash the blackboard did not list the fast call's entry first: %s", r1[2])
		}
		if r1[2] != r2[0] {
			t.Errorf("run %d: the first request after the resume differs:\nbefore: %s\nafter:  %s", i, r1[2], r2[0])
		}
	}
}
