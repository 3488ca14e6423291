package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

var allGroups = []string{"math", "text"}

// TestSpreadAndFailover: parallel calls spread over both math replicas; a replica
// SIGKILLed while it runs calls does not fail the run (math tools are idempotent, so its
// calls are re-sent to the other replica), later calls avoid it, and it leaves the
// routing table within the grace period.
func TestSpreadAndFailover(t *testing.T) {
	m := startMesh(t, "failover.yaml")
	m.startWorker("math-1", "math", "--delay", "700ms")
	m.startWorker("math-2", "math", "--delay", "700ms")
	m.waitWorkers("math-1", "math-2")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var once sync.Once
	var killedAt time.Time
	started2 := 0
	killed := make(chan struct{})
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "compute", Tools: []string{"add", "multiply", "subtract"}}, func(ev *toolpb.RunResponse) {
		if s := ev.GetToolCallStarted(); s != nil && s.GetIteration() == 2 {
			started2++
			if started2 == 4 {
				once.Do(func() {
					go func() {
						defer close(killed)
						time.Sleep(250 * time.Millisecond) // the calls are now running on both replicas
						killedAt = time.Now()
						_ = m.workers["math-1"].Kill()
					}()
				})
			}
		}
	})
	if err != nil {
		m.dump()
		t.Fatalf("run failed: %v", err)
	}
	<-killed
	text := finalText(t, evs)
	if !contains(text, "products 40", "differences 9, 8") && !contains(text, "differences 8, 9") {
		t.Errorf("final text %q does not quote the results", text)
	}

	byWorker := func(fs []*toolpb.ToolCallFinished) map[string]int {
		out := map[string]int{}
		for _, f := range fs {
			if f.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
				t.Errorf("call %s %s: outcome %s: %s", f.GetCallId(), f.GetTool(), f.GetOutcome(), f.GetContent())
			}
			out[f.GetWorkerId()]++
		}
		return out
	}
	if got := byWorker(finished(evs, 1)); got["math-1"] == 0 || got["math-2"] == 0 {
		t.Errorf("turn 1 calls were not spread over both replicas: %v", got)
	}
	failedOver := 0
	for _, f := range finished(evs, 2) {
		if f.GetAttempts() > 1 {
			failedOver++
			if f.GetWorkerId() != "math-2" {
				t.Errorf("call %s failed over to %q, want math-2", f.GetCallId(), f.GetWorkerId())
			}
		}
	}
	if got := byWorker(finished(evs, 2)); failedOver == 0 {
		t.Errorf("no call of turn 2 was re-sent after math-1 died (by worker: %v)", got)
	}
	if got := byWorker(finished(evs, 3)); got["math-2"] != 2 {
		t.Errorf("turn 3 calls went to %v, want both on math-2", got)
	}

	// The dead replica leaves the routing table within the grace period (plus polling slack).
	deadline := time.Now().Add(gracePeriod + 3*time.Second)
	for {
		ws, err := m.c.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gone := true
		for _, w := range ws {
			if w.GetWorkerId() == "math-1" {
				gone = false
			}
			if w.GetWorkerId() == "math-2" && w.GetVersion() == "" {
				t.Errorf("ListWorkers reports no version for math-2 (toolworker registers its build's)")
			}
		}
		if gone {
			t.Logf("math-1 left the routing table %s after SIGKILL", time.Since(killedAt).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("math-1 still in the routing table %s after SIGKILL: %v", time.Since(killedAt), ws)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tools, err := m.c.ListTools(ctx, "math")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if strings.Join(ti.GetWorkerIds(), ",") != "math-2" {
			t.Errorf("tool %s still routed to %v", ti.GetDefinition().GetName(), ti.GetWorkerIds())
		}
	}
	delete(m.workers, "math-1") // killed on purpose: not a shutdown failure
}

// TestConflictingDefinitionRefused: a worker that registers a tool under an existing name
// with a different definition is refused with a reason, and routing is unchanged.
func TestConflictingDefinitionRefused(t *testing.T) {
	m := startMesh(t, "")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")

	impostor := tool.MustFunc("add", "Add two numbers, but differently", func(_ context.Context, in struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}) (string, error) {
		return fmt.Sprint(in.A - in.B), nil
	})
	w, err := worker.New(worker.Options{ID: "impostor", Orchestrator: m.orch.Addr, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
		worker.Group{Role: "math", Description: "Math tools: use when you need to perform calculations",
			UsageNotes: "Use add/subtract/multiply/divide for basic arithmetic. Use mean/min/max for statistics on lists. Use floor/ceiling/round for rounding.",
			Provider:   "toolmesh", Version: "1.0.0", Tools: []tool.Tool{impostor}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stopWorker(); <-done }()

	var reasons []string
	for len(reasons) == 0 {
		if _, rej := w.Registered(); len(rej) > 0 {
			for _, r := range rej {
				reasons = append(reasons, r.GetReason())
			}
			break
		}
		select {
		case <-ctx.Done():
			m.dump()
			t.Fatal("the impostor was never refused")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if ok, _ := w.Registered(); ok {
		t.Error("the impostor is registered")
	}
	want := `tool "add" is already registered with a different definition`
	if !strings.Contains(strings.Join(reasons, "; "), want) {
		t.Errorf("rejection reasons %q do not contain %q", reasons, want)
	}
	tools, err := m.c.ListTools(ctx, "math")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tools {
		if ti.GetDefinition().GetName() == "add" {
			if got := strings.Join(ti.GetWorkerIds(), ","); got != "math-1" {
				t.Errorf("add is routed to %s, want math-1 only", got)
			}
			if ti.GetDefinition().GetDescription() != "Add two numbers: a + b" {
				t.Errorf("add's definition changed: %q", ti.GetDefinition().GetDescription())
			}
		}
	}
	if n := m.orch.CountLogs("registration refused", map[string]string{"worker_id": "impostor"}); n == 0 {
		t.Error("the orchestrator did not log the refusal")
	}
}

// TestOrchestratorRestart: after the orchestrator stops (gracefully, then by SIGKILL) and a
// new one starts on the same address, the workers re-register by themselves and runs work.
func TestOrchestratorRestart(t *testing.T) {
	m := startMesh(t, "")
	m.startWorker("math-1", "math")
	m.startWorker("text-1", "text")
	m.waitWorkers("math-1", "text-1")
	addr := m.orch.Addr

	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			if how == "SIGTERM" {
				if err := m.orch.Stop(20 * time.Second); err != nil {
					t.Fatalf("orchestrator did not stop cleanly: %v\n%s", err, m.orch.Output())
				}
			} else {
				_ = m.orch.Kill()
			}
			m.startOrchestrator(addr)
			m.waitWorkers("math-1", "text-1")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: demoPrompt, ToolGroups: allGroups}, nil)
			if err != nil {
				m.dump()
				t.Fatal(err)
			}
			if text := finalText(t, evs); !strings.Contains(text, "= 60") {
				t.Errorf("final text %q", text)
			}
		})
	}
	for id, p := range m.workers {
		if n := p.CountLogs("registered with orchestrator", nil); n < 3 {
			t.Errorf("%s registered %d times, want 3 (start and two restarts)", id, n)
		}
	}
}

// TestBadToolCalls: invalid JSON, an unknown tool, a schema violation and a duplicate key
// from the model each become an error the model reads; no worker is contacted for them;
// the run continues and succeeds.
func TestBadToolCalls(t *testing.T) {
	m := startMesh(t, "badcalls.yaml")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")
	before := workerCalls(t, m.c)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "go", Tools: mathOperations}, nil)
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if text := finalText(t, evs); text != "recovered: 3" {
		t.Errorf("final text %q, want %q", text, "recovered: 3")
	}
	bad := finished(evs, 1)
	if len(bad) != 4 {
		t.Fatalf("turn 1 finished %d calls, want 4", len(bad))
	}
	const tools = "add, ceiling, divide, floor, max, mean, min, multiply, round, subtract"
	want := []struct {
		outcome toolpb.ToolCallOutcome
		content []string
	}{
		{toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS, []string{"Error: invalid arguments for tool 'add': ", "JSON"}},
		{toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL, []string{"Tool 'ad' does not exist. Available tools: [" + tools + "]. Use the exact tool name from this list. Do not combine or prefix tool names — tool names found in source code or search results are not callable."}},
		{toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS, []string{"Error: invalid arguments for tool 'add': ", `"a"`}},
		{toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS, []string{"Error: invalid arguments for tool 'add': ", `duplicate`, `"a"`}},
	}
	byID := map[string]*toolpb.ToolCallFinished{}
	for _, f := range bad {
		byID[f.GetCallId()] = f
	}
	for i, w := range want {
		f := byID[fmt.Sprintf("call_1_%d", i)]
		if f == nil {
			t.Fatalf("no finished event for call %d: %v", i, bad)
		}
		if f.GetOutcome() != w.outcome || !contains(f.GetContent(), w.content...) {
			t.Errorf("call %d: got %s %q, want %s containing %q", i, f.GetOutcome(), f.GetContent(), w.outcome, w.content)
		}
		if f.GetWorkerId() != "" || f.GetAttempts() != 0 {
			t.Errorf("call %d reached worker %q (%d attempts); it must be refused before dispatch", i, f.GetWorkerId(), f.GetAttempts())
		}
	}
	after := workerCalls(t, m.c)
	if got := after["math-1"] - before["math-1"]; got != 1 {
		t.Errorf("math-1 received %d calls, want 1 (only the valid one)", got)
	}
}

// TestWorkerDrainsOnSIGTERM: a worker sent SIGTERM while it runs a call finishes that call,
// leaves the routing table, and exits 0 — also when the call outlasts the registry's lease
// TTL: the draining worker goes on sending heartbeats, so its lease does not expire.
// pkg/worker stopped its heartbeats once it had sent Draining: the lease expired
// mid-drain, the orchestrator probed the worker, whose health said NOT_SERVING (it
// drains), closed its connection and failed the call in flight.
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	for _, delay := range []string{"1s", "5s"} { // the lease TTL is 3s
		t.Run("a call of "+delay, func(t *testing.T) { drainMidCall(t, delay) })
	}
}

func drainMidCall(t *testing.T, delay string) {
	m := startMesh(t, "onecall.yaml")
	w := m.startWorker("math-1", "math", "--delay", delay)
	m.waitWorkers("math-1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var signalled time.Time
	evs, err := m.run(ctx, &toolpb.RunRequest{Prompt: "go", Tools: []string{"add"}}, func(ev *toolpb.RunResponse) {
		if ev.GetToolCallStarted() != nil {
			go func() {
				time.Sleep(200 * time.Millisecond)
				signalled = time.Now()
				_ = w.Signal(syscall.SIGTERM)
			}()
		}
	})
	if err != nil {
		m.dump()
		t.Fatal(err)
	}
	if text := finalText(t, evs); text != "the answer is 42" {
		t.Errorf("final text %q", text)
	}
	if f := finished(evs, 1); len(f) != 1 || f[0].GetWorkerId() != "math-1" || f[0].GetAttempts() != 1 || f[0].GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
		m.dump()
		t.Errorf("the call in flight did not complete on the draining worker: %v", f)
	}
	if err := w.Wait(15 * time.Second); err != nil {
		t.Fatalf("worker exit after SIGTERM: %v\n%s", err, w.Output())
	}
	t.Logf("worker exited %s after SIGTERM", time.Since(signalled).Round(time.Millisecond))
	if w.CountLogs("worker draining", nil) == 0 {
		t.Error("the worker did not log its drain")
	}
	if n := m.orch.CountLogs("worker lease expired: no heartbeat", map[string]string{"worker_id": "math-1"}); n != 0 {
		t.Errorf("the draining worker's lease expired (%d times) while it finished its call", n)
	}
	m.waitWorkers() // none left
}

// TestBadRunRequests: malformed requests fail with InvalidArgument or NotFound and a
// message naming the field, through the Go client.
func TestBadRunRequests(t *testing.T) {
	m := startMesh(t, "")
	m.startWorker("math-1", "math")
	m.waitWorkers("math-1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		name     string
		req      *toolpb.RunRequest
		code     codes.Code
		sentinel error
		field    string
	}{
		{"unknown required group", &toolpb.RunRequest{Prompt: "hi", ToolGroups: []string{"math"}, RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "web"}}}, codes.NotFound, client.ErrUnknownGroup, "required_tool_groups[0]"},
		{"missing required tool", &toolpb.RunRequest{Prompt: "hi", RequiredToolGroups: []*toolpb.ToolGroupRequirement{{Role: "math", Tools: []string{"sqrt"}}}}, codes.FailedPrecondition, client.ErrRequiredToolsMissing, "required_tool_groups[0].tools"},
		{"unknown tool", &toolpb.RunRequest{Prompt: "hi", Tools: []string{"teleport"}}, codes.NotFound, client.ErrUnknownTool, "tools[0]"},
		{"empty prompt", &toolpb.RunRequest{Prompt: "  ", ToolGroups: []string{"math"}}, codes.InvalidArgument, client.ErrInvalidRequest, "prompt"},
		{"negative max iterations", &toolpb.RunRequest{Prompt: "hi", Limits: &toolpb.RunLimits{MaxIterations: -1}}, codes.InvalidArgument, client.ErrInvalidRequest, "limits.max_iterations"},
		{"negative parallelism", &toolpb.RunRequest{Prompt: "hi", Limits: &toolpb.RunLimits{MaxParallelToolCalls: -3}}, codes.InvalidArgument, client.ErrInvalidRequest, "limits.max_parallel_tool_calls"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.run(ctx, tc.req, nil)
			var ce *client.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a *client.Error", err)
			}
			if ce.Code != tc.code || !errors.Is(err, tc.sentinel) || ce.Field != tc.field || !strings.Contains(ce.Message, tc.field) {
				t.Errorf("got code %s field %q message %q (is sentinel: %v); want code %s field %q", ce.Code, ce.Field, ce.Message, errors.Is(err, tc.sentinel), tc.code, tc.field)
			}
		})
	}
}

const demoPrompt = "What is (12.5 + 7.5) * 3, how many words are in 'the quick brown fox', and how does it read in capitals?"
