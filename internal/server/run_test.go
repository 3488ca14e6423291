package server

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/logtest"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/telemetry/telemetrytest"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// adderScript says a few words and calls add(2, 3) on the first turn, then answers with
// the result.
func adderScript() scripted.Script {
	return scripted.Script{Name: "adder", Rules: []scripted.Rule{
		{Name: "answer", When: scripted.When{Tool: "add"}, Reply: scripted.Reply{Text: `The sum is {{ result "add" }}.`}},
		{Name: "call", When: scripted.When{Turn: 1}, Reply: scripted.Reply{
			Text:      "Let me add.",
			ToolCalls: []scripted.ToolCall{{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}}},
		}},
	}}
}

// loopingScript calls add forever.
func loopingScript() scripted.Script {
	return scripted.Script{Name: "looping", Rules: []scripted.Rule{
		{Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "add", Arguments: map[string]any{"a": 1, "b": 1}}}}},
	}}
}

// slowScript answers prompts that start with "slow" after a minute (runs that tests
// cancel), and anything else at once.
func slowScript() scripted.Script {
	return scripted.Script{Name: "slow", Rules: []scripted.Rule{
		{Name: "slow", When: scripted.When{User: "^slow"}, Reply: scripted.Reply{Delay: time.Minute, Text: "late"}},
		{Name: "quick", Reply: scripted.Reply{Text: "quick"}},
	}}
}

// checkSequenced checks that every event carries the run's id, the next sequence number
// and a time, and returns the run id.
func checkSequenced(t *testing.T, seen []*toolpb.RunResponse) string {
	t.Helper()
	runID := seen[0].GetRunId()
	if !strings.HasPrefix(runID, "run_") {
		t.Errorf("generated run id %q does not start with run_", runID)
	}
	for i, ev := range seen {
		if ev.GetRunId() != runID {
			t.Errorf("event %d has run id %q, want %q", i, ev.GetRunId(), runID)
		}
		if ev.GetSequence() != int64(i+1) {
			t.Errorf("event %d has sequence %d, want %d", i, ev.GetSequence(), i+1)
		}
		if ev.GetTime() == nil {
			t.Errorf("event %d has no time", i)
		}
	}

	return runID
}

// checkFinishedRun checks what GetRun reports of the adder's finished run.
func checkFinishedRun(t *testing.T, e *env, ctx context.Context, runID string, in, out int64) {
	t.Helper()
	r, err := e.cl.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || r.GetIterations() != 2 || r.GetToolCalls() != 1 || r.GetFinalText() != "The sum is 5." || r.GetError() != nil {
		t.Errorf("GetRun = %v", r)
	}
	if r.GetEndedAt() == nil || r.GetStartedAt() == nil || r.GetEndedAt().AsTime().Before(r.GetStartedAt().AsTime()) {
		t.Errorf("GetRun times: started %v, ended %v", r.GetStartedAt(), r.GetEndedAt())
	}
	if r.GetUsage().GetInputTokens() != in || r.GetUsage().GetOutputTokens() != out {
		t.Errorf("GetRun usage %v, want %d in, %d out", r.GetUsage(), in, out)
	}
}

func TestRunWithWorker(t *testing.T) {
	e := newEnv(t, envOptions{script: adderScript()})
	ctx := testContext(t)
	e.startWorker("w1", flatMath())

	var seen []*toolpb.RunResponse
	final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "What is 2 + 3?", ToolGroups: []string{"math"}},
		func(ev *toolpb.RunResponse) { seen = append(seen, ev) })
	if err != nil {
		t.Fatal(err)
	}
	if final.GetText() != "The sum is 5." || final.GetIterations() != 2 {
		t.Errorf("final = %v, want text %q after 2 iterations", final, "The sum is 5.")
	}
	if len(seen) == 0 || seen[len(seen)-1].GetFinalResult() != final {
		t.Fatalf("the final result is not the last event handed to onEvent")
	}

	runID := checkSequenced(t, seen)

	kinds := make([]string, len(seen))
	for i, ev := range seen {
		kinds[i] = eventKind(ev)
	}
	want := []string{"started", "usage", "message", "tool_call_started", "tool_call_finished", "usage", "final_result"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}

	started := seen[0].GetStarted()
	mathTools := []string{"add", "ceiling", "divide", "floor", "max", "mean", "min", "multiply", "round", "subtract"}
	if !slices.Equal(started.GetTools(), mathTools) {
		t.Errorf("started.tools = %v, want %v (sorted)", started.GetTools(), mathTools)
	}
	if !strings.HasPrefix(started.GetModel(), "scripted") || started.GetMaxIterations() != int32(config.Default().Loop.MaxIterations) || started.GetLoopId() == "" {
		t.Errorf("started = %v", started)
	}
	labelled := false
	for _, ev := range seen {
		if m := ev.GetUsage().GetModel(); m != "" {
			if m != "scripted/adder" {
				t.Errorf("usage model %q, want scripted/adder", m)
			}
			labelled = true
		}
	}
	if !labelled {
		t.Error("no event carries the model label scripted/adder")
	}

	if msg := seen[2].GetMessage(); msg.GetText() != "Let me add." || msg.GetIteration() != 1 {
		t.Errorf("message = %v", msg)
	}
	cs, cf := seen[3].GetToolCallStarted(), seen[4].GetToolCallFinished()
	if cs.GetTool() != "add" || cs.GetCallId() == "" || cs.GetIteration() != 1 || cs.GetLoopId() != started.GetLoopId() || cs.GetArgumentsJson() != `{"a":2,"b":3}` {
		t.Errorf("tool_call_started = %v", cs)
	}
	if cf.GetCallId() != cs.GetCallId() || cf.GetTool() != "add" || cf.GetContent() != "5" || cf.GetOutcome() != toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK {
		t.Errorf("tool_call_finished = %v", cf)
	}
	if cf.GetWorkerId() != "w1" || cf.GetAttempts() != 1 || cf.GetDuration().AsDuration() <= 0 || cf.GetLoopId() != started.GetLoopId() {
		t.Errorf("tool_call_finished dispatch = worker %q, attempts %d, duration %v, loop %q", cf.GetWorkerId(), cf.GetAttempts(), cf.GetDuration().AsDuration(), cf.GetLoopId())
	}

	var in, out int64
	for _, ev := range seen {
		in += ev.GetUsage().GetInputTokens()
		out += ev.GetUsage().GetOutputTokens()
	}
	if u := final.GetUsage(); u.GetInputTokens() != in || u.GetOutputTokens() != out || in == 0 || out == 0 {
		t.Errorf("final usage %v, want the sum of the usage events (%d in, %d out)", u, in, out)
	}

	checkFinishedRun(t, e, ctx, runID, in, out)

	// The model saw the tools sorted by name, then the tool's result.
	reqs := e.model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model called %d times, want 2", len(reqs))
	}
	var offered []string
	for _, s := range reqs[0].Tools {
		offered = append(offered, s.Name)
	}
	if !slices.Equal(offered, mathTools) {
		t.Errorf("model offered %v, want %v", offered, mathTools)
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != llm.RoleTool || last.ToolName != "add" || last.Text != "5" || last.IsError {
		t.Errorf("last message of the second model call = %+v, want the result of add", last)
	}
}

func eventKind(ev *toolpb.RunResponse) string {
	switch ev.GetEvent().(type) {
	case *toolpb.RunResponse_Started:
		return "started"
	case *toolpb.RunResponse_ToolCallStarted:
		return "tool_call_started"
	case *toolpb.RunResponse_ToolCallFinished:
		return "tool_call_finished"
	case *toolpb.RunResponse_Message:
		return "message"
	case *toolpb.RunResponse_Usage:
		return "usage"
	case *toolpb.RunResponse_FinalResult:
		return "final_result"
	case *toolpb.RunResponse_Error:
		return "error"
	default:
		return "?"
	}
}

func TestRunMaxIterations(t *testing.T) {
	e := newEnv(t, envOptions{script: loopingScript()})
	ctx := testContext(t)
	e.startWorker("w1", flatMath())

	req := &toolpb.RunRequest{Prompt: "loop", Tools: []string{"add"}, RunId: "looper", Limits: &toolpb.RunLimits{MaxIterations: 2}}
	stream, err := e.orch.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := collect(stream)
	st, info, _ := statusDetails(t, err)
	if st.Code() != codes.ResourceExhausted || info.GetReason() != wire.ReasonName(toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS) || info.GetMetadata()["run_id"] != "looper" || info.GetDomain() != wire.ErrorDomain {
		t.Fatalf("status %v %v, want ResourceExhausted MAX_ITERATIONS for run looper", st, info)
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if started := evs[0].GetStarted(); started.GetMaxIterations() != 2 || !slices.Equal(started.GetTools(), []string{"add"}) {
		t.Errorf("started = %v", started)
	}
	last := evs[len(evs)-1].GetError()
	if last == nil || last.GetReason() != toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS || codes.Code(last.GetCode()) != codes.ResourceExhausted || !strings.Contains(last.GetMessage(), "maximum iterations (2)") {
		t.Errorf("last event %v, want the MAX_ITERATIONS error", evs[len(evs)-1])
	}
	for _, ev := range evs {
		if ev.GetFinalResult() != nil {
			t.Error("a failed run sent a final result")
		}
	}

	r, err := e.cl.GetRun(ctx, "looper")
	if err != nil {
		t.Fatal(err)
	}
	if r.GetState() != toolpb.RunState_RUN_STATE_FAILED || r.GetError().GetReason() != toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS || r.GetIterations() != 2 || r.GetToolCalls() != 2 || r.GetEndedAt() == nil {
		t.Errorf("GetRun = %v", r)
	}

	// Through pkg/client. The run id is free again (the first run is finished).
	_, err = e.cl.RunAndWait(ctx, req, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrMaxIterations) || !errors.As(err, &ce) || ce.RunID != "looper" || ce.Code != codes.ResourceExhausted {
		t.Errorf("client error %#v, want ErrMaxIterations for run looper", err)
	}
}

// startSlowRun starts a run that waits for the model and returns once the run is live.
func startSlowRun(t *testing.T, ctx context.Context, e *env, runID string) (toolpb.OrchestratorService_RunClient, *toolpb.RunResponse) {
	t.Helper()
	stream, err := e.orch.Run(ctx, &toolpb.RunRequest{Prompt: "slow please", RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("run %s: %v", runID, err)
	}
	if first.GetStarted() == nil {
		t.Fatalf("first event %v, want started", first)
	}
	return stream, first
}

func TestCancelRun(t *testing.T) {
	var logs logtest.Buffer
	e := newEnv(t, envOptions{script: slowScript(), logs: &logs})
	ctx := testContext(t)

	var events []*toolpb.RunResponse
	var runErr error
	for ev, err := range e.cl.Run(ctx, &toolpb.RunRequest{Prompt: "slow down", RunId: "to-cancel"}) {
		if err != nil {
			runErr = err
			break
		}
		events = append(events, ev)
		if ev.GetStarted() != nil {
			r, err := e.cl.GetRun(ctx, "to-cancel")
			if err != nil || r.GetState() != toolpb.RunState_RUN_STATE_RUNNING || r.GetEndedAt() != nil {
				t.Errorf("GetRun while running = %v, %v", r, err)
			}
			st, err := e.cl.CancelRun(ctx, "to-cancel", "changed my mind")
			if err != nil || st != toolpb.RunState_RUN_STATE_CANCELLED {
				t.Errorf("CancelRun = %v, %v; want CANCELLED", st, err)
			}
		}
	}
	var ce *client.Error
	if !errors.Is(runErr, client.ErrCancelled) || !errors.As(runErr, &ce) || ce.Code != codes.Canceled || ce.RunID != "to-cancel" {
		t.Fatalf("run error %#v, want ErrCancelled with code Canceled", runErr)
	}
	if !strings.Contains(ce.Message, "changed my mind") || strings.Count(ce.Message, "run cancelled") != 1 {
		t.Errorf("message %q, want the reason once", ce.Message)
	}
	if len(events) != 2 || events[1].GetError().GetReason() != toolpb.ErrorReason_ERROR_REASON_CANCELLED {
		t.Errorf("events %v, want started then a CANCELLED error", events)
	}
	// A cancellation was asked for: it is logged as such, not warned about as a failure.
	if l := logs.String(); !strings.Contains(l, `"level":"INFO","msg":"run cancelled"`) || strings.Contains(l, `"run failed"`) {
		t.Errorf("logs do not say the run was cancelled at INFO, or call it failed:\n%s", l)
	}

	r, err := e.cl.GetRun(ctx, "to-cancel")
	if err != nil {
		t.Fatal(err)
	}
	if r.GetState() != toolpb.RunState_RUN_STATE_CANCELLED || r.GetError().GetReason() != toolpb.ErrorReason_ERROR_REASON_CANCELLED || r.GetEndedAt() == nil || r.GetFinalText() != "" {
		t.Errorf("GetRun = %v", r)
	}
	// Cancelling again reports the final state.
	if st, err := e.cl.CancelRun(ctx, "to-cancel", ""); err != nil || st != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("second CancelRun = %v, %v", st, err)
	}

	// A finished run is not cancelled: CancelRun reports its state.
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast", RunId: "done"}, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := e.cl.CancelRun(ctx, "done", ""); err != nil || st != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("CancelRun of a finished run = %v, %v; want SUCCEEDED", st, err)
	}
}

func TestCancelAndGetUnknownRun(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)

	for name, call := range map[string]func(id string) error{
		"CancelRun": func(id string) error { _, err := e.cl.CancelRun(ctx, id, ""); return err },
		"GetRun":    func(id string) error { _, err := e.cl.GetRun(ctx, id); return err },
	} {
		err := call("nope")
		var ce *client.Error
		if !errors.Is(err, client.ErrRunNotFound) || !errors.As(err, &ce) || ce.Code != codes.NotFound || ce.Field != "run_id" {
			t.Errorf("%s(nope) = %#v, want ErrRunNotFound", name, err)
		}
		err = call("")
		if !errors.Is(err, client.ErrInvalidRequest) || !errors.As(err, &ce) || ce.Field != "run_id" {
			t.Errorf("%s(\"\") = %#v, want ErrInvalidRequest naming run_id", name, err)
		}
	}
}

func TestRunDuplicateID(t *testing.T) {
	e := newEnv(t, envOptions{script: slowScript()})
	ctx := testContext(t)
	stream, _ := startSlowRun(t, ctx, e, "dup")

	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast", RunId: "dup"}, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrRunExists) || !errors.As(err, &ce) || ce.Code != codes.AlreadyExists || ce.Field != "run_id" {
		t.Fatalf("second run with a live id = %#v, want ErrRunExists", err)
	}
	// The refused run did not disturb the live one.
	if r, err := e.cl.GetRun(ctx, "dup"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_RUNNING {
		t.Fatalf("GetRun(dup) = %v, %v", r, err)
	}

	if _, err := e.cl.CancelRun(ctx, "dup", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(stream); reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_CANCELLED {
		t.Fatalf("cancelled run ended with %v", err)
	}

	// Run ids must be unique among live runs only: a finished run's id can be used again,
	// and GetRun then reports the new run.
	final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast", RunId: "dup"}, nil)
	if err != nil {
		t.Fatalf("reusing the id of a finished run: %v", err)
	}
	if final.GetText() != "quick" {
		t.Errorf("final %v", final)
	}
	if r, err := e.cl.GetRun(ctx, "dup"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("GetRun(dup) after reuse = %v, %v", r, err)
	}
}

// reasonOf returns the ErrorInfo reason of a status error.
func reasonOf(err error) toolpb.ErrorReason {
	r, _, _, _ := wire.StatusReason(status.Convert(err))
	return r
}

func codeOf(err error) codes.Code { return status.Code(err) }

func TestRunOverloaded(t *testing.T) {
	e := newEnv(t, envOptions{script: slowScript(), configure: func(c *config.Config) { c.Loop.MaxConcurrentRuns = 1 }})
	ctx := testContext(t)
	stream, _ := startSlowRun(t, ctx, e, "first")

	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast"}, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrOverloaded) || !errors.As(err, &ce) || ce.Code != codes.ResourceExhausted || ce.Reason != toolpb.ErrorReason_ERROR_REASON_OVERLOADED {
		t.Fatalf("run beyond the limit = %#v, want ErrOverloaded", err)
	}

	if _, err := e.cl.CancelRun(ctx, "first", ""); err != nil {
		t.Fatal(err)
	}
	_, _ = collect(stream)
	// A slot is free again.
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast"}, nil); err != nil {
		t.Errorf("run after the first ended: %v", err)
	}
}

func TestRunTimeout(t *testing.T) {
	e := newEnv(t, envOptions{script: slowScript()})
	ctx := testContext(t)
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "slow", RunId: "timed", Limits: &toolpb.RunLimits{Timeout: durationpb.New(20 * time.Millisecond)}}, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrRunTimeout) || !errors.As(err, &ce) || ce.Code != codes.DeadlineExceeded {
		t.Fatalf("err = %#v, want ErrRunTimeout", err)
	}
	if r, err := e.cl.GetRun(ctx, "timed"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_FAILED || r.GetError().GetReason() != toolpb.ErrorReason_ERROR_REASON_RUN_TIMEOUT {
		t.Errorf("GetRun = %v, %v", r, err)
	}
	if !strings.HasPrefix(ce.Message, "run timed out after 20ms") {
		t.Errorf("message %q does not say the run timed out and after how long", ce.Message)
	}
}

func TestRunClientGoesAway(t *testing.T) {
	e := newEnv(t, envOptions{script: slowScript()})
	ctx := testContext(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	for ev, err := range e.cl.Run(rctx, &toolpb.RunRequest{Prompt: "slow", RunId: "abandoned"}) {
		if err != nil {
			runErr = err
			break
		}
		if ev.GetStarted() != nil {
			cancel()
		}
	}
	if !errors.Is(runErr, context.Canceled) {
		t.Errorf("the caller's own cancellation came back as %#v, want context.Canceled", runErr)
	}
	// The Run handler returns only once its run has ended.
	e.calls.waitEnded(t, toolpb.OrchestratorService_Run_FullMethodName, 1)
	if r, err := e.cl.GetRun(ctx, "abandoned"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Fatalf("the abandoned run: %v, %v; want CANCELLED", r.GetState(), err)
	}
	if r, _ := e.cl.GetRun(ctx, "abandoned"); !strings.Contains(r.GetError().GetMessage(), "the client went away") {
		t.Errorf("error %q does not say the client went away", r.GetError().GetMessage())
	}
}

func TestShutdown(t *testing.T) {
	e := newEnv(t, envOptions{script: slowScript()})
	ctx := testContext(t)
	regStream, _ := e.registerRaw(ctx, registration("w-math", examplegroups.Math()))
	stream, _ := startSlowRun(t, ctx, e, "in-flight")

	// A deadline that has passed: Shutdown cancels the runs in progress at once.
	expired, cancel := context.WithCancel(ctx)
	cancel()
	e.srv.Shutdown(expired)

	// The client is told to retry elsewhere: Unavailable, SHUTTING_DOWN.
	evs, err := collect(stream)
	if codeOf(err) != codes.Unavailable || reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN {
		t.Errorf("run in progress ended with %v, want Unavailable SHUTTING_DOWN", err)
	}
	if len(evs) == 0 || evs[len(evs)-1].GetError().GetReason() != toolpb.ErrorReason_ERROR_REASON_SHUTTING_DOWN {
		t.Errorf("events %v, want a SHUTTING_DOWN error last", evs)
	}
	if r, err := e.cl.GetRun(ctx, "in-flight"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("GetRun = %v, %v", r, err)
	}

	// New runs are refused.
	_, err = e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "fast"}, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrShuttingDown) || !errors.As(err, &ce) || ce.Code != codes.Unavailable {
		t.Errorf("run after shutdown = %#v, want ErrShuttingDown", err)
	}

	// Registration streams are closed, and new ones refused.
	if _, err := regStream.Recv(); codeOf(err) != codes.Unavailable {
		t.Errorf("registration stream after shutdown: %v, want Unavailable", err)
	}
	s2, err := e.reg.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); codeOf(err) != codes.Unavailable {
		t.Errorf("new registration stream after shutdown: %v, want Unavailable", err)
	}
}

func TestShutdownWaitsForRuns(t *testing.T) {
	script := scripted.Script{Name: "brief", Rules: []scripted.Rule{{Reply: scripted.Reply{Delay: 30 * time.Millisecond, Text: "done"}}}}
	e := newEnv(t, envOptions{script: script})
	ctx := testContext(t)
	stream, err := e.orch.Run(ctx, &toolpb.RunRequest{Prompt: "p", RunId: "brief"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	e.srv.Shutdown(ctx) // returns when the run has finished
	if r, err := e.cl.GetRun(ctx, "brief"); err != nil || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED {
		t.Errorf("GetRun after Shutdown = %v, %v; want SUCCEEDED", r, err)
	}
	evs, err := collect(stream)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].GetFinalResult().GetText() != "done" {
		t.Errorf("stream = %v, %v", evs, err)
	}
}

// TestCostIsLabelledByTheRequestedModel: the cost metric says which model the run asked
// for, as the chat spans do, not the (possibly dated) name of the model that answered.
func TestCostIsLabelledByTheRequestedModel(t *testing.T) {
	rec := telemetrytest.New(t, telemetry.Options{})
	e := newEnv(t, envOptions{tel: rec.Telemetry, configure: func(c *config.Config) {
		c.Models.Prices = map[string]config.Price{"scripted/priced": {InputPerMTok: 1000, OutputPerMTok: 1000}}
	}})
	ctx := testContext(t)
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", Llm: &toolpb.LlmOptions{Model: "scripted/priced"}}, nil); err != nil {
		t.Fatal(err)
	}
	sum, ok := rec.Metric(t, telemetry.MetricCost).Data.(metricdata.Sum[float64])
	if !ok || len(sum.DataPoints) != 1 {
		t.Fatalf("cost = %+v, want one data point", rec.Metric(t, telemetry.MetricCost).Data)
	}
	if v, _ := sum.DataPoints[0].Attributes.Value(telemetry.KeyRequestModel); v.AsString() != "priced" || sum.DataPoints[0].Value <= 0 {
		t.Errorf("cost recorded for model %q (%v), want \"priced\" and a positive cost", v.AsString(), sum.DataPoints[0].Value)
	}
}

// cancellingProvider fails every call with an error that wraps context.Canceled, as an
// SDK may when it cancels a request of its own.
type cancellingProvider struct{}

func (cancellingProvider) Name() string { return "cancelling" }
func (cancellingProvider) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(yield func(llm.Chunk, error) bool) {
		yield(llm.Chunk{}, fmt.Errorf("upstream gave up: %w", context.Canceled))
	}
}

// TestInnerCancellationIsAFailure: a run whose context is live but whose provider fails
// with context.Canceled failed; only Cancel, a shutdown or the client going away cancel
// a run.
func TestInnerCancellationIsAFailure(t *testing.T) {
	e := newEnv(t, envOptions{provider: cancellingProvider{}})
	ctx := testContext(t)
	_, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi", RunId: "inner"}, nil)
	if err == nil || errors.Is(err, client.ErrCancelled) {
		t.Fatalf("run = %v, want a failure that is not a cancellation", err)
	}
	if r, _ := e.cl.GetRun(ctx, "inner"); r.GetState() != toolpb.RunState_RUN_STATE_FAILED {
		t.Errorf("state = %s, want FAILED", r.GetState())
	}
}

// TestShutdownKeepsTheLastRecordsOfWatches: watchers of runs that end as the orchestrator
// shuts down get the runs' last records and end with them; a watch the shutdown cuts
// ends with SHUTTING_DOWN, never with the journal's failure. The watches were cut the
// moment the runs had stopped, in the middle of reading the records of runs that had
// just ended: JOURNAL_UNAVAILABLE, "context canceled", the final answer never sent.
func TestShutdownKeepsTheLastRecordsOfWatches(t *testing.T) {
	const runs = 40
	store, err := runlog.OpenSQLite(testContext(t), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	script := scripted.Script{Name: "brief", Rules: []scripted.Rule{{Reply: scripted.Reply{Delay: 50 * time.Millisecond, Text: "done"}}}}
	e := newEnv(t, envOptions{script: script, journal: store})
	ctx := testContext(t)
	type watch struct {
		evs []*toolpb.RunResponse
		err error
	}
	watches := make([]chan watch, runs)
	for i := range runs {
		id := fmt.Sprintf("brief-%d", i)
		stream, err := e.orch.Run(ctx, &toolpb.RunRequest{Prompt: "p", RunId: id, Detached: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
		watches[i] = make(chan watch, 1)
		first := make(chan struct{})
		go func() {
			var w watch
			for ev, err := range e.cl.Watch(ctx, id, 0) {
				if err != nil {
					w.err = err
					break
				}
				if len(w.evs) == 0 {
					close(first)
				}
				w.evs = append(w.evs, ev)
			}
			if len(w.evs) == 0 {
				close(first)
			}
			watches[i] <- w
		}()
		<-first
	}
	e.srv.Shutdown(ctx)
	for i, ch := range watches {
		w := <-ch
		last := &toolpb.RunResponse{}
		if len(w.evs) > 0 {
			last = w.evs[len(w.evs)-1]
		}
		switch {
		case w.err == nil && last.GetFinalResult().GetText() == "done":
		case w.err != nil && status.Code(w.err) == codes.Unavailable && strings.Contains(w.err.Error(), "shutting down"):
		default:
			t.Errorf("watch %d ended after %d events, the last %v, with %v; want the final answer, or SHUTTING_DOWN", i, len(w.evs), last, w.err)
		}
	}
}

// TestWatchesOpenedAtShutdownSendWhatTheJournalHolds: a WatchRun opened once the shutdown
// has ended the watches (in its last moments, before the server stops) sends what the
// journal holds: a finished run's events through its end, and ends as the run did; an
// unfinished one's events, then SHUTTING_DOWN naming the last. Such a watch ended at once
// with SHUTTING_DOWN, a finished run's too, and sent nothing.
func TestWatchesOpenedAtShutdownSendWhatTheJournalHolds(t *testing.T) {
	store, err := runlog.OpenSQLite(testContext(t), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	script := scripted.Script{Name: "two", Rules: []scripted.Rule{
		{When: scripted.When{User: "^slow$"}, Reply: scripted.Reply{Delay: time.Hour, Text: "late"}},
		{Reply: scripted.Reply{Text: "done"}},
	}}
	e := newEnv(t, envOptions{script: script, journal: store})
	ctx := testContext(t)
	if final, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "quick", RunId: "finished-1"}, nil); err != nil || final.GetText() != "done" {
		t.Fatalf("the finished run: %v, %v", final, err)
	}
	stream, err := e.orch.Run(ctx, &toolpb.RunRequest{Prompt: "slow", RunId: "open-1", Detached: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	// The open run does not end within the shutdown's time: it is stopped, unfinished.
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	e.srv.Shutdown(sctx)
	cancel()

	evs, end := watchAll(ctx, t, e.orch, "finished-1")
	if end != nil {
		t.Fatalf("the finished run's watch ended after %d events with %v; want its end", len(evs), end)
	}
	if len(evs) == 0 || evs[len(evs)-1].GetFinalResult().GetText() != "done" {
		t.Errorf("the finished run's watch sent %d events, the last %v; want through its final answer", len(evs), evs)
	}
	evs, end = watchAll(ctx, t, e.orch, "open-1")
	if len(evs) == 0 || status.Code(end) != codes.Unavailable || !strings.Contains(end.Error(), "shutting down") ||
		!strings.Contains(end.Error(), fmt.Sprintf("after sequence %d", evs[len(evs)-1].GetSequence())) {
		t.Errorf("the open run's watch sent %d events and ended with %v; want its events, then SHUTTING_DOWN naming the last", len(evs), end)
	}
}

// watchAll is the events of a WatchRun of run id from its start, and how it ended (nil:
// at the run's end).
func watchAll(ctx context.Context, t *testing.T, orch toolpb.OrchestratorServiceClient, id string) ([]*toolpb.RunResponse, error) {
	t.Helper()
	stream, err := orch.WatchRun(ctx, &toolpb.WatchRunRequest{RunId: id})
	if err != nil {
		return nil, err
	}
	return collect(stream)
}
