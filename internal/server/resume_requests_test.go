package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// recModel records every request (as JSON) and answers by the number of tool messages
// in the request: turns[n] is the answer to a request with n tool results, unless answer
// is set, which answers every request. It blocks until its call ends (the "crash" point)
// on the request blockAt says so of, else on turn block (-1: none), having closed
// blocked; delay holds turns back a while.
type recModel struct {
	mu      sync.Mutex
	reqs    []string
	turns   []llm.Response
	answer  func(req *llm.Request, n int) (llm.Response, error)
	block   int
	blockAt func(req *llm.Request, n int) bool
	delay   map[int]time.Duration
	blocked chan struct{}
	once    sync.Once
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
	return func(yield func(llm.Chunk, error) bool) {
		if d := m.delay[n]; d > 0 {
			time.Sleep(d)
		}
		if m.blockAt != nil && m.blockAt(req, n) || m.blockAt == nil && n == m.block {
			if m.blocked != nil {
				m.once.Do(func() { close(m.blocked) })
			}
			<-ctx.Done()
			yield(llm.Chunk{}, ctx.Err())
			return
		}
		r, err := m.respond(req, n)
		if err != nil {
			yield(llm.Chunk{}, err)
			return
		}
		yield(llm.Chunk{Done: &r}, nil)
	}
}

func (m *recModel) respond(req *llm.Request, n int) (llm.Response, error) {
	if m.answer != nil {
		return m.answer(req, n)
	}
	return m.turns[n], nil
}

func (m *recModel) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.reqs...)
}

// call is a model's turn that calls one tool.
func call(id, name, args string) llm.Response {
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: args}}, FinishReason: "tool_calls"}
}

// crashAt runs req on env e until the model is asked the turn m blocks at, then shuts
// the orchestrator down (a stop past its shutdown timeout: the run is left unfinished).
// onEvent, when set, sees each event the client gets meanwhile.
func crashAt(t *testing.T, ctx context.Context, e *env, m *recModel, req *toolpb.RunRequest, onEvent ...func(*toolpb.RunResponse)) {
	t.Helper()
	m.blocked = make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	go func() {
		for ev, err := range e.cl.Run(rctx, req) {
			if err != nil {
				return
			}
			for _, f := range onEvent {
				f(ev)
			}
		}
	}()
	select {
	case <-m.blocked:
	case <-ctx.Done():
		t.Fatal("the model was never asked the turn the run stops at")
	}
	time.Sleep(200 * time.Millisecond) // the records before the blocked call are committed (settle)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e.srv.Shutdown(sctx)
	cancel()
}

// runToEnd runs req on e to its end.
func runToEnd(t *testing.T, ctx context.Context, e *env, req *toolpb.RunRequest) {
	t.Helper()
	for _, err := range e.cl.Run(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// watchToEnd watches run id on e until it ends.
func watchToEnd(t *testing.T, ctx context.Context, e *env, id string) {
	t.Helper()
	for _, err := range e.cl.Watch(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// rig is a run stopped on one orchestrator while its model is asked a turn, and resumed
// on a second one of the same journal: their models' requests, to compare.
type rig struct {
	j      runlog.Store
	m1, m2 *recModel
	e1, e2 *env
}

// rigOptions are what a rig's orchestrators differ in from newEnv's defaults.
type rigOptions struct {
	groups    func() []worker.Group // served by a worker of each orchestrator
	configure func(*config.Config)
	tel       *telemetry.Telemetry // the second orchestrator's telemetry
	delay     map[int]time.Duration
	// answer and blockAt, when set, are the models' (recModel's fields).
	answer  func(req *llm.Request, n int) (llm.Response, error)
	blockAt func(req *llm.Request, n int) bool
	// onEvent, when set, sees each event the client of the first orchestrator gets.
	onEvent func(r *rig, ev *toolpb.RunResponse)
	// crashed, when set, runs once the first orchestrator stopped, before the resume.
	crashed func(r *rig)
	// inProcess are both orchestrators' in-process tool groups, sinks their program's
	// artifact sinks.
	inProcess map[string]run.Group
	sinks     map[string]decorators.Sink
}

// crashThenResume runs req with the model's turns until the model is asked turn block
// (crashAt), then resumes the run on a second orchestrator of the same in-memory journal
// and waits for its end.
func crashThenResume(t *testing.T, ctx context.Context, turns []llm.Response, block int, req *toolpb.RunRequest, o rigOptions) *rig {
	t.Helper()
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	r := &rig{j: j, m1: &recModel{turns: turns, block: block, delay: o.delay, answer: o.answer, blockAt: o.blockAt},
		m2: &recModel{turns: turns, block: -1, answer: o.answer}}
	start := func(m *recModel, tel *telemetry.Telemetry, id string) *env {
		e := newEnv(t, envOptions{journal: j, provider: m, configure: o.configure, tel: tel, groups: o.inProcess, sinks: o.sinks})
		if o.groups != nil {
			e.startWorker(id, o.groups()...)
		}
		return e
	}
	r.e1 = start(r.m1, nil, "w-1")
	var seen []func(*toolpb.RunResponse)
	if o.onEvent != nil {
		seen = append(seen, func(ev *toolpb.RunResponse) { o.onEvent(r, ev) })
	}
	crashAt(t, ctx, r.e1, r.m1, req, seen...)
	if o.crashed != nil {
		o.crashed(r)
	}
	r.e2 = start(r.m2, o.tel, "w-2")
	if n, err := r.e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, r.e2, req.GetRunId())
	return r
}

// sameFirstRequest checks that the resumed run's first request to the model is the one
// asked before the crash, the before-th (from 0).
func (r *rig) sameFirstRequest(t *testing.T, before int) {
	t.Helper()
	r1, r2 := r.m1.requests(), r.m2.requests()
	if len(r1) != before+1 || len(r2) == 0 {
		t.Fatalf("requests: %d before the crash, %d after; want %d and some", len(r1), len(r2), before+1)
	}
	if r1[before] != r2[0] {
		t.Errorf("the first request after the resume differs from the one before the crash:\nbefore: %s\nafter:  %s", r1[before], r2[0])
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
	req := &toolpb.RunRequest{RunId: "ps-1", Prompt: "go", ToolGroups: []string{"agent_process"}, Detached: true}
	var first time.Time
	r := crashThenResume(t, ctx, turns, 1, req, rigOptions{delay: map[int]time.Duration{0: 1100 * time.Millisecond}, crashed: func(r *rig) {
		got, err := r.e1.cl.GetRun(ctx, "ps-1")
		if err != nil {
			t.Fatal(err)
		}
		first = got.GetStartedAt().AsTime()
	}})
	if got, err := r.e2.cl.GetRun(ctx, "ps-1"); err != nil || !got.GetStartedAt().AsTime().Equal(first) {
		t.Errorf("the resumed run started at %v (%v), want its first start %v", got.GetStartedAt().AsTime(), err, first)
	}
	r.sameFirstRequest(t, 1)
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
	shop := func() []worker.Group { return []worker.Group{examplegroups.Shop()} }
	// The uninterrupted run.
	j0, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j0.Close() })
	m0 := &recModel{turns: turns, block: -1}
	e0 := newEnv(t, envOptions{journal: j0, provider: m0})
	e0.startWorker("w-0", shop()...)
	runToEnd(t, ctx, e0, req())

	// The same run, stopped while the model is asked its third turn, and resumed.
	r := crashThenResume(t, ctx, turns, 2, req(), rigOptions{groups: shop})
	r.sameFirstRequest(t, 2)
	r0, r2 := m0.requests(), r.m2.requests()
	if len(r0) != 4 || len(r2) != 2 || r0[3] != r2[1] {
		t.Errorf("the request after the live cart_view differs from the uninterrupted run's:\nuninterrupted: %v\nafter resume:  %v", r0, r2)
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
	before := 0
	r := crashThenResume(t, ctx, turns, 2, req, rigOptions{groups: func() []worker.Group { return []worker.Group{examplegroups.Shop()} }, crashed: func(r *rig) {
		recs, _ := r.j.Read(ctx, "shop-2", 0, 1000)
		before = len(recs)
		if n := countSelection(recs, runlog.KindOutcome); n != 1 {
			t.Errorf("the selection has %d outcome records before the crash, want 1", n)
		}
	}})
	recs, _ := r.j.Read(ctx, "shop-2", 0, 1000)
	if n := countSelection(recs[before:], runlog.KindDispatch); n != 0 {
		t.Errorf("the resumed run sent the selection again (%d dispatch records)", n)
	}
	r.sameFirstRequest(t, 2)
}

// countSelection counts the records of kind of the call c1 of the first turn.
func countSelection(recs []runlog.Record, kind runlog.Kind) int {
	n := 0
	for _, rec := range recs {
		if rec.Kind == kind && strings.Contains(string(rec.Data), "/1/c1") {
			n++
		}
	}
	return n
}

// TestReplayedModelCallsCostNothing: a resumed run's cost metric counts the model calls
// it makes, not those the journal answers: the last replayed call was counted again.
func TestReplayedModelCallsCostNothing(t *testing.T) {
	ctx := testContext(t)
	usage := llm.Usage{InputTokens: 1000, OutputTokens: 1000}
	first, last := call("c1", "process_status", "{}"), llm.Response{Text: "done", FinishReason: "stop"}
	first.Usage, last.Usage = usage, usage
	rec := telemetrytest.New(t, telemetry.Options{})
	crashThenResume(t, ctx, []llm.Response{first, last}, 1,
		&toolpb.RunRequest{RunId: "cost-1", Prompt: "go", ToolGroups: []string{"agent_process"}, Detached: true},
		rigOptions{tel: rec.Telemetry, configure: func(c *config.Config) {
			c.Models.Prices = map[string]config.Price{"rec/m": {InputPerMTok: 1000, OutputPerMTok: 1000}}
		}})
	sum, ok := rec.Metric(t, telemetry.MetricCost).Data.(metricdata.Sum[float64])
	if !ok || len(sum.DataPoints) != 1 {
		t.Fatalf("cost = %+v, want one data point", rec.Metric(t, telemetry.MetricCost).Data)
	}
	if got, want := sum.DataPoints[0].Value, 2.0; got != want { // one live call: 1000 + 1000 tokens at $1000 per million
		t.Errorf("the resumed run's cost metric is $%v, want $%v (its one live model call)", got, want)
	}
}

// boardGroup's tools add to the blackboard, slow_add after a while.
func boardGroup() []worker.Group {
	add := func(name, typ string, d time.Duration) tool.Tool {
		return tool.New(name, "Adds a "+typ+".", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
			time.Sleep(d)
			if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: typ, JSON: []byte(`{"by":"` + name + `"}`)}); err != nil {
				return tool.Result{}, err
			}
			return tool.Text("added"), nil
		})
	}
	return []worker.Group{{Role: "board", Tools: []tool.Tool{add("slow_add", "Slow", 300*time.Millisecond), add("fast_add", "Fast", 0)}}}
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
		req := &toolpb.RunRequest{RunId: fmt.Sprintf("bb-%d", i), Prompt: "go", ToolGroups: []string{"board", "blackboard"}, Detached: true}
		r := crashThenResume(t, ctx, turns, 3, req, rigOptions{groups: boardGroup})
		if r1 := r.m1.requests(); len(r1) != 3 || !strings.Contains(r1[2], `[0] Fast`) {
			t.Fatalf("before the crash the blackboard did not list the fast call's entry first: %v", r1)
		}
		r.sameFirstRequest(t, 2)
	}
}

// TestReplayedCallsKeepTheirDurations: a call the journal answers after a resume took,
// in the run's history, as long as it did the first time (process_history lists it so
// after the resume); it read as taking no time at all.
func TestReplayedCallsKeepTheirDurations(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{call("c1", "slow_add", "{}"), call("c2", "process_history", "{}"), {Text: "done", FinishReason: "stop"}}
	req := &toolpb.RunRequest{RunId: "took-1", Prompt: "go", ToolGroups: []string{"board", "agent_process"}, Detached: true}
	r := crashThenResume(t, ctx, turns, 1, req, rigOptions{groups: boardGroup})
	r2 := r.m2.requests()
	if len(r2) != 2 {
		t.Fatalf("%d requests after the resume, want 2", len(r2))
	}
	m := regexp.MustCompile(`1\. slow_add \((\d+)ms\)`).FindStringSubmatch(r2[1])
	if m == nil {
		t.Fatalf("the request after process_history lists no slow_add: %s", r2[1])
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 250 {
		t.Errorf("the replayed slow_add took %d ms in the run's history, want about the 300 ms it took", ms)
	}
}

// events are run id's events as WatchRun gives them from the start on e.
func events(t *testing.T, ctx context.Context, e *env, id string) []*toolpb.RunResponse {
	t.Helper()
	var out []*toolpb.RunResponse
	for ev, err := range e.cl.Watch(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// count is how many of evs has says are of a kind.
func count(evs []*toolpb.RunResponse, has func(*toolpb.RunResponse) bool) int {
	n := 0
	for _, ev := range evs {
		if has(ev) {
			n++
		}
	}
	return n
}

// TestReusedCallIDsKeepTheirEvents: a model that gives the calls of each turn the same
// id (c1) still has every event of each sent once after a resume: the progress a call
// reports after the resume (it was taken for the first turn's, which the client saw, and
// dropped), and the decision on an approval (the second turn's was sent again).
func TestReusedCallIDsKeepTheirEvents(t *testing.T) {
	ctx := testContext(t)
	again := call("c1", "prog", "{}")
	r := crashThenResume(t, ctx, []llm.Response{again, again, again, {Text: "done", FinishReason: "stop"}}, 2,
		&toolpb.RunRequest{RunId: "prog-1", Prompt: "go", ToolGroups: []string{"p"}, Detached: true},
		rigOptions{groups: func() []worker.Group {
			return []worker.Group{{Role: "p", Tools: []tool.Tool{tool.New("prog", "Reports progress.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
				tool.Progress(ctx, "working")
				return tool.Text("ok"), nil
			}, tool.ReportsProgress())}}}
		}})
	if n := count(events(t, ctx, r.e2, "prog-1"), func(ev *toolpb.RunResponse) bool { return ev.GetProgress() != nil }); n != 3 {
		t.Errorf("%d progress events, want 3 (one a call)", n)
	}

	wipe := call("c1", "wipe", "{}")
	r = crashThenResume(t, ctx, []llm.Response{wipe, wipe, {Text: "done", FinishReason: "stop"}}, 2,
		&toolpb.RunRequest{RunId: "ap-1", Prompt: "go", ToolGroups: []string{"danger"}, Detached: true},
		rigOptions{groups: func() []worker.Group {
			return []worker.Group{{Role: "danger", Tools: []tool.Tool{tool.New("wipe", "Wipes.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
				return tool.Text("wiped"), nil
			}, tool.RequiresApproval())}}}
		}, onEvent: func(r *rig, ev *toolpb.RunResponse) {
			if a := ev.GetApprovalRequested(); a != nil {
				go func() { _ = r.e1.cl.ApproveToolCall(ctx, "ap-1", a.GetCallId(), "", true, "ok") }()
			}
		}})
	if n := count(events(t, ctx, r.e2, "ap-1"), func(ev *toolpb.RunResponse) bool { return ev.GetApprovalDecided() != nil }); n != 2 {
		t.Errorf("%d approval_decided events, want 2 (one a call)", n)
	}
}

// streamModel streams its answer in pieces; the first one it makes streams two and then
// blocks until its call ends (the crash), having told blocked.
type streamModel struct {
	first   bool
	blocked chan struct{}
}

func (m *streamModel) Name() string         { return "st" }
func (m *streamModel) DefaultModel() string { return "m" }
func (m *streamModel) Stream(ctx context.Context, _ *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		if m.first {
			for _, d := range []string{"AAA", "BBB"} {
				if !yield(llm.Chunk{TextDelta: d}, nil) {
					return
				}
			}
			close(m.blocked)
			<-ctx.Done()
			yield(llm.Chunk{}, ctx.Err())
			return
		}
		for _, d := range []string{"XXX", "YYY", "ZZZ"} {
			if !yield(llm.Chunk{TextDelta: d}, nil) {
				return
			}
		}
		yield(llm.Chunk{Done: &llm.Response{Text: "XXXYYYZZZ", FinishReason: "stop"}}, nil)
	}
}

// TestStreamedTextAfterACrash: a model call the crash interrupted had streamed some text;
// the resumed run asks it again, and the client gets all of the new answer's text after
// what it saw; the new text's first pieces were taken for those it saw, and dropped.
func TestStreamedTextAfterACrash(t *testing.T) {
	ctx := testContext(t)
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	m1 := &streamModel{first: true, blocked: make(chan struct{})}
	e1 := newEnv(t, envOptions{journal: j, provider: m1})
	rctx, stop := context.WithCancel(ctx)
	go func() {
		for _, err := range e1.cl.Run(rctx, &toolpb.RunRequest{RunId: "st-1", Prompt: "go", StreamText: true, Detached: true}) {
			if err != nil {
				return
			}
		}
	}()
	<-m1.blocked
	time.Sleep(200 * time.Millisecond) // the deltas are journaled (they linger a few ms)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx)
	cancel()
	e2 := newEnv(t, envOptions{journal: j, provider: &streamModel{}})
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, "st-1")
	var text, final string
	for _, ev := range events(t, ctx, e2, "st-1") {
		text += ev.GetTextDelta().GetText()
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if text != "AAABBB"+final {
		t.Errorf("the client's text deltas read %q, want what it saw before the crash and then the whole answer, %q", text, "AAABBB"+final)
	}
}

// TestLateApprovalIsRefused: an approval whose deadline passed while no orchestrator
// drove its run (one stopped while the call waited, none took the run over yet) is
// refused, and the resumed run refuses the call at its deadline as the uninterrupted
// run would have; the late approval was taken, and the resumed run ran the call.
func TestLateApprovalIsRefused(t *testing.T) {
	ctx := testContext(t)
	j, _ := runlog.OpenMemory(context.Background())
	t.Cleanup(func() { _ = j.Close() })
	turns := []llm.Response{call("c1", "wipe", "{}"), {Text: "done", FinishReason: "stop"}}
	start := func(m *recModel, id string) *env {
		e := newEnv(t, envOptions{journal: j, provider: m, configure: func(c *config.Config) {
			c.Tools = map[string]config.Tool{"wipe": {Approval: &config.Approval{Timeout: config.Duration(time.Second)}}}
		}})
		e.startWorker(id, worker.Group{Role: "danger", Tools: []tool.Tool{tool.New("wipe", "Wipes.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			return tool.Text("wiped"), nil
		}, tool.RequiresApproval())}})
		return e
	}
	e1 := start(&recModel{turns: turns, block: -1}, "w-1")
	rctx, stop := context.WithCancel(ctx)
	asked := make(chan struct{})
	go func() {
		for ev, err := range e1.cl.Run(rctx, &toolpb.RunRequest{RunId: "late-1", Prompt: "go", ToolGroups: []string{"danger"}, Detached: true}) {
			if err != nil {
				return
			}
			if ev.GetApprovalRequested() != nil {
				close(asked)
			}
		}
	}()
	<-asked
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx) // the call waits for its approval, in the journal
	cancel()

	m2 := &recModel{turns: turns, block: -1}
	e2 := start(m2, "w-2")
	time.Sleep(1500 * time.Millisecond) // past the approval's deadline
	if err := e2.cl.ApproveToolCall(ctx, "late-1", "c1", "", true, "late"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("the late approval: %v, want FailedPrecondition", err)
	}
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, "late-1")
	if r2 := m2.requests(); len(r2) == 0 || strings.Contains(r2[len(r2)-1], `"Text":"wiped"`) {
		t.Errorf("the resumed run ran wipe on an approval given after its deadline: %v", r2)
	}
}

// offers reports whether req offers the tool name.
func offers(req *llm.Request, name string) bool {
	for _, t := range req.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// TestNestedModelFailureReplays: an agentic tool whose nested loop's model call failed
// answers its caller with that failure; a resumed run replays the failure from the
// journal, so the parent's next request is the one asked before the crash. The failure
// was not journaled: the resumed run asked the nested model again, ran a tool the first
// run never did, and gave the parent another answer.
func TestNestedModelFailureReplays(t *testing.T) {
	ctx := testContext(t)
	var mu sync.Mutex
	nested := 0
	answers := helperModel([]llm.Response{call("s1", "fast_add", "{}"), {Text: "added", FinishReason: "stop"}},
		[]llm.Response{call("c1", "helper", `{"task":"x"}`), call("c2", "blackboard_list", "{}"), {Text: "done", FinishReason: "stop"}})
	answer := func(req *llm.Request, n int) (llm.Response, error) {
		mu.Lock()
		defer mu.Unlock()
		if !offers(req, "helper") { // the nested loop's model fails its first call
			if nested++; nested == 1 {
				return llm.Response{}, &llm.ProviderError{Provider: "rec", Kind: llm.KindUnavailable, Message: "overloaded"}
			}
		}
		return answers(req, n)
	}
	req := helperRequest("ag-2", []string{"board", "blackboard"}, &toolpb.AgenticToolSpec{Tools: []string{"fast_add"}})
	r := crashThenResume(t, ctx, nil, -1, req, rigOptions{groups: boardGroup, answer: answer,
		blockAt: func(req *llm.Request, n int) bool { return offers(req, "helper") && n == 2 }})
	for _, q := range r.m2.requests() {
		if !strings.Contains(q, `"Name":"helper"`) {
			t.Errorf("the resumed run asked the nested loop's model again: %.200s", q)
		}
	}
	r1 := r.m1.requests()
	if r2 := r.m2.requests(); len(r2) == 0 || r2[0] != r1[len(r1)-1] {
		t.Errorf("the resumed run's first request is not the one asked before the crash:\nbefore: %s\nafter:  %v", r1[len(r1)-1], r2)
	}
}

// TestGroupMissingAtStartStaysMissing: a run that started without a tool group nobody
// served (a warning said so) goes on without it after a resume, though a worker serves
// it by then: its model is offered what it was offered before the crash. The resumed run
// offered the group's tools, which the first run's model never saw.
func TestGroupMissingAtStartStaysMissing(t *testing.T) {
	ctx := testContext(t)
	starts := 0
	groups := func() []worker.Group {
		starts++
		gs := boardGroup()
		if starts > 1 { // the second orchestrator's worker serves it
			gs = append(gs, worker.Group{Role: "extra", Tools: []tool.Tool{tool.New("extra_tool", "Extra.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
				return tool.Text("x"), nil
			})}})
		}
		return gs
	}
	r := crashThenResume(t, ctx, []llm.Response{call("c1", "fast_add", "{}"), {Text: "done", FinishReason: "stop"}}, 1,
		&toolpb.RunRequest{RunId: "opt-1", Prompt: "go", ToolGroups: []string{"board", "extra"}, Detached: true}, rigOptions{groups: groups})
	r.sameFirstRequest(t, 1)
}

// helperModel answers a run of the agentic tool helper (helperRequest): its nested
// loop's model with nested[n], the run's own with parent[n], n the request's tool
// results (past the end, the last).
func helperModel(nested, parent []llm.Response) func(*llm.Request, int) (llm.Response, error) {
	return func(req *llm.Request, n int) (llm.Response, error) {
		turns := parent
		if !offers(req, "helper") {
			turns = nested
		}
		return turns[min(n, len(turns)-1)], nil
	}
}

// helperRequest is a run of an agentic tool "helper" whose nested loop has the tools
// tools (kind, when set: a subagent with its own groups) besides the run's groups.
func helperRequest(id string, groups []string, spec *toolpb.AgenticToolSpec) *toolpb.RunRequest {
	spec.Name, spec.Description = "helper", "Helps."
	spec.ParametersJsonSchema = `{"type":"object","properties":{"task":{"type":"string"}}}`
	return &toolpb.RunRequest{RunId: id, Prompt: "go", ToolGroups: groups, Tools: []string{"helper"}, AgenticTools: []*toolpb.AgenticToolSpec{spec}, Detached: true}
}

// TestAgenticCallsReplayInOrder: one turn calls an agentic tool, whose nested loop adds
// to the blackboard at once, and slow_add; the replay runs the agentic tool's call in
// the order its loop ended among the turn's calls, so that the blackboard lists the
// entries as it did. It ran after the calls the journal answers, and the blackboard
// listed slow_add's entry first.
func TestAgenticCallsReplayInOrder(t *testing.T) {
	ctx := testContext(t)
	both := llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "helper", Arguments: `{"task":"x"}`}, {ID: "c2", Name: "slow_add", Arguments: "{}"}}}
	answer := helperModel([]llm.Response{call("s1", "fast_add", "{}"), {Text: "added", FinishReason: "stop"}},
		[]llm.Response{both, {}, call("c3", "blackboard_list", "{}"), {Text: "done", FinishReason: "stop"}}) // turn 1 unused: two results come back at once
	r := crashThenResume(t, ctx, nil, -1, helperRequest("abo-1", []string{"board", "blackboard"}, &toolpb.AgenticToolSpec{Tools: []string{"fast_add"}}),
		rigOptions{groups: boardGroup, answer: answer, blockAt: func(req *llm.Request, n int) bool { return offers(req, "helper") && n == 3 }})
	r1, r2 := r.m1.requests(), r.m2.requests()
	if !strings.Contains(r1[len(r1)-1], `[0] Fast`) {
		t.Fatalf("before the crash the blackboard did not list the agentic tool's entry first: %s", r1[len(r1)-1])
	}
	if len(r2) == 0 || r2[0] != r1[len(r1)-1] {
		t.Errorf("the first request after the resume differs:\nbefore: %s\nafter:  %v", r1[len(r1)-1], r2)
	}
}

// TestAgenticCallsKeepTheirDurations: an agentic tool's call replayed after a resume took,
// in the run's history, as long as its nested loop did the first time; it read 0 ms.
func TestAgenticCallsKeepTheirDurations(t *testing.T) {
	ctx := testContext(t)
	answer := helperModel([]llm.Response{call("s1", "slow_add", "{}"), {Text: "added", FinishReason: "stop"}},
		[]llm.Response{call("c1", "helper", `{"task":"x"}`), call("c2", "process_history", "{}"), {Text: "done", FinishReason: "stop"}})
	r := crashThenResume(t, ctx, nil, -1, helperRequest("ag-1", []string{"board", "agent_process"}, &toolpb.AgenticToolSpec{Tools: []string{"slow_add"}}),
		rigOptions{groups: boardGroup, answer: answer, blockAt: func(req *llm.Request, n int) bool { return offers(req, "helper") && n == 1 }})
	r2 := r.m2.requests()
	m := regexp.MustCompile(`helper \((\d+)ms\)`).FindStringSubmatch(r2[len(r2)-1])
	if m == nil {
		t.Fatalf("no helper in the history: %s", r2[len(r2)-1])
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 250 {
		t.Errorf("after the resume the run's history says helper took %d ms; its nested slow_add alone took 300 ms", ms)
	}
}

// TestSubagentStartReplays: a subagent's run started, for its process_status after a
// resume, when it first did; it started when the replay reached it.
func TestSubagentStartReplays(t *testing.T) {
	ctx := testContext(t)
	answer := helperModel([]llm.Response{call("s1", "slow_add", "{}"), call("s2", "process_status", "{}"), {Text: "child done", FinishReason: "stop"}},
		[]llm.Response{call("c1", "helper", `{"task":"x"}`), {Text: "done", FinishReason: "stop"}})
	r := crashThenResume(t, ctx, nil, -1, helperRequest("sa-1", nil, &toolpb.AgenticToolSpec{Kind: toolpb.AgenticKind_AGENTIC_KIND_AGENT, ToolGroups: []string{"board", "agent_process"}}),
		rigOptions{groups: boardGroup, answer: answer, blockAt: func(req *llm.Request, n int) bool { return !offers(req, "helper") && n == 1 }})
	ran := time.Duration(-1)
	for _, q := range r.m2.requests() {
		if m := regexp.MustCompile(`Running time: ([0-9.]+m?s)`).FindStringSubmatch(q); m != nil {
			ran, _ = time.ParseDuration(m[1])
		}
	}
	if ran < 250*time.Millisecond {
		t.Errorf("the subagent's process_status after the resume says it ran %v; it had run slow_add for 300 ms before the crash", ran)
	}
}

// TestReplayedDurationIsTheFirstOne: the run's history says a call took, before a crash
// and after the resume, the same milliseconds: what the journal recorded. It said what
// the call's layers measured the first time (the result's encoding included: 141 ms for
// a large result) and what the journal had measured around the call after (120 ms).
func TestReplayedDurationIsTheFirstOne(t *testing.T) {
	ctx := testContext(t)
	big := strings.Repeat(`x"\<>&`, 400_000)
	turns := []llm.Response{call("c1", "big", "{}"), call("c2", "process_history", "{}"), call("c3", "process_history", "{}"), {Text: "done", FinishReason: "stop"}}
	r := crashThenResume(t, ctx, turns, 2, &toolpb.RunRequest{RunId: "dur-1", Prompt: "go", ToolGroups: []string{"big", "agent_process"}, Detached: true},
		rigOptions{groups: func() []worker.Group {
			return []worker.Group{{Role: "big", Tools: []tool.Tool{tool.New("big", "Answers much.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
				time.Sleep(100 * time.Millisecond)
				return tool.Text(big), nil
			})}}}
		}, configure: func(c *config.Config) { c.Loop.MaxToolResultBytes = 1024 }})
	re := regexp.MustCompile(`1\. big \(([^)]*)\)`)
	took := func(reqs []string) string {
		m := re.FindAllStringSubmatch(reqs[len(reqs)-1], -1)
		if m == nil {
			t.Fatalf("no history in %.300s", reqs[len(reqs)-1])
		}
		return m[len(m)-1][1]
	}
	if before, after := took(r.m1.requests()), took(r.m2.requests()); before != after {
		t.Errorf("big took %s in the history before the crash and %s after the resume", before, after)
	}
}

// TestInProcessBoardAdditionsReplay: what an in-process tool put on the run's blackboard
// itself is in its outcome's record, and a replay puts it there again: after a resume the
// blackboard lists it, GetRun has it, and a later entry's event is not taken for one the
// client saw. It was lost: the replay answered the call without running it.
func TestInProcessBoardAdditionsReplay(t *testing.T) {
	ctx := testContext(t)
	note := tool.New("note", "Notes a thing.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		if err := tool.BlackboardFrom(ctx).Add(tool.Entry{TypeName: "Note", JSON: []byte(`{"n":1}`)}); err != nil {
			return tool.Result{}, err
		}
		return tool.Text("noted"), nil
	})
	again := call("c1", "note", "{}") // the model gives every turn's call one id
	turns := []llm.Response{again, call("c2", "blackboard_list", "{}"), again, {Text: "done", FinishReason: "stop"}}
	r := crashThenResume(t, ctx, turns, 2, &toolpb.RunRequest{RunId: "note-1", Prompt: "go", ToolGroups: []string{"notes", "blackboard"}, Detached: true},
		rigOptions{inProcess: map[string]run.Group{"notes": {Description: "Notes.", Tools: []tool.Tool{note}}}})
	r.sameFirstRequest(t, 2)
	got, err := r.e2.cl.GetRun(ctx, "note-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got.GetBlackboard()); n != 2 {
		t.Errorf("GetRun's blackboard has %d entries after the resume, want 2", n)
	}
	if n := count(events(t, ctx, r.e2, "note-1"), func(ev *toolpb.RunResponse) bool { return ev.GetBlackboardChanged() != nil }); n != 2 {
		t.Errorf("%d blackboard events, want 2 (one a note)", n)
	}
}

// TestUnrecordedCallsReplayFirst: the calls of a turn the journal knows nothing of ran at
// once the first time, before any call that ended with a record, and a replay runs them
// first too: blackboard_list called beside slow_add lists the empty blackboard it saw
// the first time (it ran after the replayed slow_add and listed its entry), and a
// playbook's locked tool called beside its key is refused again (it ran after the key
// was replayed, was let through, and was sent to a worker the first run never sent it to).
func TestUnrecordedCallsReplayFirst(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{
		{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "slow_add", Arguments: "{}"}, {ID: "c2", Name: "blackboard_list", Arguments: "{}"}}},
		{}, // unused: the two results come back in one request
		{Text: "done", FinishReason: "stop"},
	}
	r := crashThenResume(t, ctx, turns, 2, &toolpb.RunRequest{RunId: "read-1", Prompt: "go", ToolGroups: []string{"board", "blackboard"}, Detached: true},
		rigOptions{groups: boardGroup})
	r.sameFirstRequest(t, 1)

	keyAndLocked := llm.Response{ToolCalls: []llm.ToolCall{{ID: "s1", Name: "slow_add", Arguments: "{}"}, {ID: "s2", Name: "fast_add", Arguments: "{}"}}}
	answer := helperModel([]llm.Response{keyAndLocked, {Text: "nested done", FinishReason: "stop"}},
		[]llm.Response{call("c1", "helper", `{"task":"x"}`), call("c2", "blackboard_list", "{}"), {Text: "done", FinishReason: "stop"}})
	spec := &toolpb.AgenticToolSpec{Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK, Tools: []string{"slow_add"},
		LockedTools: []*toolpb.LockedTool{{Tool: "fast_add", AfterAll: []string{"slow_add"}}}}
	r = crashThenResume(t, ctx, nil, -1, helperRequest("lock-1", []string{"board", "blackboard"}, spec),
		rigOptions{groups: boardGroup, answer: answer, blockAt: func(req *llm.Request, n int) bool { return offers(req, "helper") && n == 2 }})
	r1, r2 := r.m1.requests(), r.m2.requests()
	if len(r2) == 0 || r2[0] != r1[len(r1)-1] {
		t.Errorf("the first request after the resume differs:\nbefore: %s\nafter:  %v", r1[len(r1)-1], r2)
	}
}

// TestProgramSinksGetAnArtifactOnce: a program's artifact sink gets a call's artifact
// once, though the call is replayed after a resume; it got it again, and a sink that
// refuses what it holds made the replayed call an error the model read.
func TestProgramSinksGetAnArtifactOnce(t *testing.T) {
	ctx := testContext(t)
	var mu sync.Mutex
	held := map[string]int{}
	unique := decorators.SinkFunc(func(_ context.Context, c decorators.Capture) error {
		mu.Lock()
		defer mu.Unlock()
		if held[c.CallID]++; held[c.CallID] > 1 {
			return errors.New("it holds that one already")
		}
		return nil
	})
	r := crashThenResume(t, ctx, []llm.Response{call("c1", "mk", "{}"), {Text: "done", FinishReason: "stop"}}, 1,
		&toolpb.RunRequest{RunId: "sink-1", Prompt: "go", ToolGroups: []string{"arts"}, Detached: true},
		rigOptions{groups: func() []worker.Group {
			return []worker.Group{{Role: "arts", Tools: []tool.Tool{tool.New("mk", "Makes a thing.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
				return tool.ArtifactResult("made", tool.Artifact{TypeName: "Thing", JSON: []byte(`{"x":1}`)}), nil
			})}}}
		}, sinks: map[string]decorators.Sink{"archive": unique}, configure: func(c *config.Config) {
			c.Tools = map[string]config.Tool{"mk": {Artifacts: []config.ArtifactSink{{Sinks: []string{"archive"}}}}}
		}})
	if held["c1"] != 1 {
		t.Errorf("the program's sink got the artifact %d times, want once", held["c1"])
	}
	r.sameFirstRequest(t, 1)
}

// TestOneIDTwiceInATurn: a model gave two calls of one turn the same id (some servers
// of open models number every turn's calls from the same "call_0"). The loop gives the
// second an id of its own, so that each keeps its own result: in the conversation, in
// the worker's idempotency ledger, and in the journal, from which the resumed run
// replays each call's own outcome. Before, they shared the journal's key, and the
// replay gave the first call the second's result.
func TestOneIDTwiceInATurn(t *testing.T) {
	ctx := testContext(t)
	turns := []llm.Response{
		{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "one", Arguments: "{}"}, {ID: "c1", Name: "two", Arguments: "{}"}}, FinishReason: "tool_calls"},
		{},
		{Text: "done", FinishReason: "stop"},
	}
	says := func(name, text string, d time.Duration) tool.Tool {
		return tool.New(name, "Says "+text+".", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			time.Sleep(d)
			return tool.Text(text), nil
		})
	}
	r := crashThenResume(t, ctx, turns, 2, &toolpb.RunRequest{RunId: "dup-1", Prompt: "go", ToolGroups: []string{"s"}, Detached: true},
		rigOptions{groups: func() []worker.Group {
			return []worker.Group{{Role: "s", Tools: []tool.Tool{says("one", "first", 0), says("two", "second", 50*time.Millisecond)}}}
		}})
	r1 := r.m1.requests()
	if len(r1) != 2 || !strings.Contains(r1[1], `"first"`) || !strings.Contains(r1[1], `"second"`) || !strings.Contains(r1[1], `"c1_1_2"`) {
		t.Fatalf("before the crash, the request after the two calls does not hold both results, the second call as c1_1_2: %v", r1)
	}
	r.sameFirstRequest(t, 1)
}

// TestDeadlinePassedDuringTheOutage: the run's deadline passed while no orchestrator
// drove it. The resumed run replays every step the journal holds, then times out at its
// first live step: GetRun counts the calls the client saw. Before, the resumed run ended
// at once, and GetRun counted none of them.
func TestDeadlinePassedDuringTheOutage(t *testing.T) {
	ctx := testContext(t)
	says := tool.New("says", "Says ok.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("ok"), nil })
	turns := []llm.Response{call("c1", "says", "{}"), call("c2", "says", "{}"), {Text: "done", FinishReason: "stop"}}
	req := &toolpb.RunRequest{RunId: "late-1", Prompt: "go", ToolGroups: []string{"s"}, Detached: true,
		Limits: &toolpb.RunLimits{Timeout: durationpb.New(1500 * time.Millisecond)}}
	var seenCalls atomic.Int32
	r := crashThenResume(t, ctx, turns, 2, req, rigOptions{
		groups: func() []worker.Group { return []worker.Group{{Role: "s", Tools: []tool.Tool{says}}} },
		onEvent: func(_ *rig, ev *toolpb.RunResponse) {
			if ev.GetToolCallFinished() != nil {
				seenCalls.Add(1)
			}
		},
		crashed: func(*rig) { time.Sleep(1600 * time.Millisecond) }, // the deadline passes
	})
	if seenCalls.Load() != 2 {
		t.Fatalf("the client saw %d calls end before the crash, want 2", seenCalls.Load())
	}
	got, err := r.e2.cl.GetRun(ctx, "late-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolpb.RunState_RUN_STATE_FAILED || !strings.Contains(got.GetError().GetMessage(), "timed out") {
		t.Errorf("the resumed run ended %s (%v), want failed, timed out", got.GetState(), got.GetError())
	}
	if got.GetToolCalls() != 2 || got.GetIterations() != 2 {
		t.Errorf("GetRun counts %d tool calls and %d iterations, want 2 and 2 (the client saw two turns' calls end; the third turn timed out before the model answered)", got.GetToolCalls(), got.GetIterations())
	}
	if n := count(events(t, ctx, r.e2, "late-1"), func(ev *toolpb.RunResponse) bool { return ev.GetToolCallFinished() != nil }); n != 2 {
		t.Errorf("%d tool_call_finished events after the resume, want the 2 the client saw", n)
	}
	if len(r.m2.requests()) != 0 {
		t.Errorf("the resumed run asked the model %d times past its deadline", len(r.m2.requests()))
	}
}

// crashInTool runs req (the model calls the idempotent tool slow, then answers) on a
// first orchestrator until slow started, stops that orchestrator there (the call is
// dispatched, without an outcome), waits outage, then resumes the run on a second
// orchestrator whose worker serves slow2 as slow, and waits for its end.
func crashInTool(t *testing.T, ctx context.Context, req *toolpb.RunRequest, outage time.Duration, slow2 func(context.Context, string) (tool.Result, error)) *env {
	t.Helper()
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	turns := []llm.Response{call("c1", "slow", "{}"), {Text: "done", FinishReason: "stop"}}
	started := make(chan struct{})
	var once sync.Once
	slow1 := tool.New("slow", "Slow.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return tool.Text("late"), nil
	}, tool.Idempotent())
	e1 := newEnv(t, envOptions{journal: j, provider: &recModel{turns: turns, block: -1}})
	e1.startWorker("w-1", worker.Group{Role: "s", Tools: []tool.Tool{slow1}})
	rctx, stop := context.WithCancel(ctx)
	go func() {
		for _, err := range e1.cl.Run(rctx, req) {
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("slow never started")
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	e1.srv.Shutdown(sctx)
	cancel()
	time.Sleep(outage)
	e2 := newEnv(t, envOptions{journal: j, provider: &recModel{turns: turns, block: -1}})
	e2.startWorker("w-2", worker.Group{Role: "s", Tools: []tool.Tool{tool.New("slow", "Slow.", schema.Empty(), slow2, tool.Idempotent())}})
	if n, err := e2.srv.Resume(ctx); err != nil || n != 1 {
		t.Fatalf("Resume = %d, %v", n, err)
	}
	watchToEnd(t, ctx, e2, req.GetRunId())
	return e2
}

// finishedContents are the contents of the run's tool_call_finished events.
func finishedContents(t *testing.T, ctx context.Context, e *env, runID string) []string {
	t.Helper()
	var out []string
	for _, ev := range events(t, ctx, e, runID) {
		if f := ev.GetToolCallFinished(); f != nil {
			out = append(out, f.GetContent())
		}
	}
	return out
}

// TestResentCallKeepsTheRunsDeadline: a resumed run re-sends its idempotent call that was
// in flight; the call, sent while the run's deadline was held, still has the run's
// deadline (the worker sees it), and the deadline ending it reads as a timeout. Before,
// the call's context was made while the deadline did not show: the worker saw the tool's
// own 30 s, and the run's deadline ending the call read as a cancel.
func TestResentCallKeepsTheRunsDeadline(t *testing.T) {
	ctx := testContext(t)
	begun := time.Now()
	seen := make(chan time.Time, 1)
	req := &toolpb.RunRequest{RunId: "held-1", Prompt: "go", ToolGroups: []string{"s"}, Detached: true,
		Limits: &toolpb.RunLimits{Timeout: durationpb.New(3 * time.Second)}}
	e2 := crashInTool(t, ctx, req, 0, func(ctx context.Context, _ string) (tool.Result, error) {
		dl, _ := ctx.Deadline()
		seen <- dl
		<-ctx.Done()
		// Past the deadline this side and the orchestrator share: an answer at the very
		// deadline may beat the orchestrator's own end of the call (on a loaded machine
		// it did), and is then an answer, not a timeout.
		time.Sleep(time.Second)
		return tool.Text("late"), nil
	})
	if dl, runs := <-seen, begun.Add(3*time.Second); dl.IsZero() || dl.After(runs.Add(time.Second)) {
		t.Errorf("the worker saw the re-sent call's deadline at %v, the run's is at %v", dl, runs)
	}
	for _, c := range finishedContents(t, ctx, e2, "held-1") {
		if !strings.Contains(c, "timed out") {
			t.Errorf("the call the run's deadline ended does not read as a timeout: %s", c)
		}
	}
}

// TestResentCallPastTheDeadline: the run's deadline passed during the outage, and its
// first live step is the re-send of its idempotent call: the call is not sent, and says
// so, not that the journal failed nor that it timed out on its worker.
func TestResentCallPastTheDeadline(t *testing.T) {
	ctx := testContext(t)
	req := &toolpb.RunRequest{RunId: "held-2", Prompt: "go", ToolGroups: []string{"s"}, Detached: true,
		Limits: &toolpb.RunLimits{Timeout: durationpb.New(time.Second)}}
	var sent atomic.Bool
	e2 := crashInTool(t, ctx, req, 1200*time.Millisecond, func(context.Context, string) (tool.Result, error) {
		sent.Store(true)
		return tool.Text("ok"), nil
	})
	contents := finishedContents(t, ctx, e2, "held-2")
	if len(contents) == 0 || contents[len(contents)-1] != "Error: tool 'slow' was not sent: the run's deadline passed" {
		t.Errorf("the re-sent call past the run's deadline ended with %q, want it not sent", contents)
	}
	if sent.Load() {
		t.Error("the call reached the worker past the run's deadline")
	}
	got, err := e2.cl.GetRun(ctx, "held-2")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != toolpb.RunState_RUN_STATE_FAILED || !strings.Contains(got.GetError().GetMessage(), "timed out") {
		t.Errorf("the run ended %s (%v), want failed, timed out", got.GetState(), got.GetError())
	}
}
