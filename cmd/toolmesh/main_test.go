package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/logtest"
	"github.com/toolmesh/toolmesh/internal/meshtest"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestDescribe(t *testing.T) {
	cases := []struct {
		name string
		ev   *toolpb.RunResponse
		want string
	}{
		{"started", &toolpb.RunResponse{RunId: "r1", Event: &toolpb.RunResponse_Started{Started: &toolpb.RunStarted{
			Model: "scripted/demo", Tools: []string{"add", "multiply"}, LoopId: "loop_1", MaxIterations: 20}}},
			"▶ run r1 started: model scripted/demo, tools [add, multiply], loop loop_1"},
		{"started without tools", &toolpb.RunResponse{RunId: "r2", Event: &toolpb.RunResponse_Started{Started: &toolpb.RunStarted{Model: "scripted", LoopId: "l"}}},
			"▶ run r2 started: model scripted, tools [], loop l"},
		{"tool call started", &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallStarted{ToolCallStarted: &toolpb.ToolCallStarted{
			CallId: "call_1_0", Tool: "add", ArgumentsJson: `{"a":1,"b":2}`, Iteration: 2}}},
			`  → [2] add({"a":1,"b":2})  id=call_1_0`},
		{"tool call finished", &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: &toolpb.ToolCallFinished{
			Tool: "add", Content: "3", Outcome: toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_OK, WorkerId: "w1", Attempts: 1, Duration: durationpb.New(1234567 * time.Nanosecond)}}},
			`  ← add = "3"  [OK, on w1, 1.23ms]`},
		{"tool call failed over", &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: &toolpb.ToolCallFinished{
			Tool: "add", Content: "worker w2 unreachable\nretry", Outcome: toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_ERROR, WorkerId: "w2", Attempts: 3, Duration: durationpb.New(2 * time.Second)}}},
			`  ← add = "worker w2 unreachable\nretry"  [ERROR, on w2 after 3 attempts, 2s]`},
		{"tool call not dispatched", &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: &toolpb.ToolCallFinished{
			Tool: "nope", Content: "Error: no such tool", Outcome: toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_UNKNOWN_TOOL}}},
			`  ← nope = "Error: no such tool"  [UNKNOWN_TOOL, not dispatched, 0s]`},
		{"invalid arguments", &toolpb.RunResponse{Event: &toolpb.RunResponse_ToolCallFinished{ToolCallFinished: &toolpb.ToolCallFinished{
			Tool: "add", Content: "bad", Outcome: toolpb.ToolCallOutcome_TOOL_CALL_OUTCOME_INVALID_ARGUMENTS, Duration: durationpb.New(0)}}},
			`  ← add = "bad"  [INVALID_ARGUMENTS, not dispatched, 0s]`},
		{"message", &toolpb.RunResponse{Event: &toolpb.RunResponse_Message{Message: &toolpb.AssistantMessage{Text: "Let me add.", Iteration: 1}}},
			"  💬 Let me add."},
		{"nested loop started", &toolpb.RunResponse{Scope: &toolpb.LoopScope{LoopId: "loop_b", ParentLoopId: "loop_a", Tool: "shop", Kind: toolpb.AgenticKind_AGENTIC_KIND_PLAYBOOK, Depth: 1},
			Event: &toolpb.RunResponse_NestedLoopStarted{NestedLoopStarted: &toolpb.NestedLoopStarted{Model: "scripted/x", Tools: []string{"buy", "search"}}}},
			"  ▶ shop playbook: loop loop_b in loop_a, model scripted/x, tools [buy, search]"},
		{"a nested loop's call, two levels down", &toolpb.RunResponse{Scope: &toolpb.LoopScope{Depth: 2},
			Event: &toolpb.RunResponse_ToolCallStarted{ToolCallStarted: &toolpb.ToolCallStarted{CallId: "c", Tool: "add", ArgumentsJson: `{}`, Iteration: 1}}},
			"      → [1] add({})  id=c"},
		{"nested loop finished", &toolpb.RunResponse{Scope: &toolpb.LoopScope{Tool: "shop", Depth: 1},
			Event: &toolpb.RunResponse_NestedLoopFinished{NestedLoopFinished: &toolpb.NestedLoopFinished{Iterations: 3, ToolCalls: 1}}},
			"  ■ shop done (3 iterations, 1 tool call)"},
		{"nested loop failed", &toolpb.RunResponse{Scope: &toolpb.LoopScope{Tool: "m", Depth: 1},
			Event: &toolpb.RunResponse_NestedLoopFinished{NestedLoopFinished: &toolpb.NestedLoopFinished{Iterations: 20, Error: "too many"}}},
			"  ✖ m failed after 20 iterations: too many"},
		{"usage", &toolpb.RunResponse{Event: &toolpb.RunResponse_Usage{Usage: &toolpb.Usage{Model: "scripted/demo", InputTokens: 120, OutputTokens: 7}}},
			"  · scripted/demo: 120 input, 7 output tokens"},
		{"final result", &toolpb.RunResponse{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{Text: "The sum is 3.", Iterations: 2}}},
			"■ final (2 iterations): The sum is 3."},
		{"final result after one iteration", &toolpb.RunResponse{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{Text: "Hi.", Iterations: 1}}},
			"■ final (1 iteration): Hi."},
		{"final result without an iteration", &toolpb.RunResponse{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{Text: "", Iterations: 0}}},
			"■ final (0 iterations): "},
		{"error", &toolpb.RunResponse{Event: &toolpb.RunResponse_Error{Error: &toolpb.RunError{Code: 8, Reason: toolpb.ErrorReason_ERROR_REASON_MAX_ITERATIONS, Message: "Tool loop exceeded maximum iterations (2)."}}},
			"✖ error MAX_ITERATIONS: Tool loop exceeded maximum iterations (2)."},
	}
	obj := &toolpb.BlackboardObject{TypeName: "crm.Customer", Json: `{"id":2}`, Name: "customer"}
	cases = append(cases, []struct {
		name string
		ev   *toolpb.RunResponse
		want string
	}{
		{"warning", &toolpb.RunResponse{Event: &toolpb.RunResponse_Warning{Warning: &toolpb.Warning{Field: "tool_groups[0]", Message: "gone"}}},
			"  ⚠ tool_groups[0]: gone"},
		{"progress", &toolpb.RunResponse{Event: &toolpb.RunResponse_Progress{Progress: &toolpb.Progress{Tool: "export_report", Status: "page 2 of 3"}}},
			"  ⏳ export_report: page 2 of 3"},
		{"message to the user", &toolpb.RunResponse{Event: &toolpb.RunResponse_MessageToUser{MessageToUser: &toolpb.MessageToUser{Text: "Report ready."}}},
			"  ✉ Report ready."},
		{"blackboard changed", &toolpb.RunResponse{Event: &toolpb.RunResponse_BlackboardChanged{BlackboardChanged: &toolpb.BlackboardChanged{Index: 2, Object: obj}}},
			"  ▦ blackboard[2] crm.Customer as 'customer'"},
		{"artifact captured", &toolpb.RunResponse{Event: &toolpb.RunResponse_Artifact{Artifact: &toolpb.ArtifactCaptured{Tool: "find", Sink: "blackboard", Object: obj}}},
			"  ⇢ find's crm.Customer to blackboard"},
		{"asset", &toolpb.RunResponse{Event: &toolpb.RunResponse_AssetAdded{AssetAdded: &toolpb.AssetAdded{Asset: &toolpb.Asset{Tool: "export", Object: &toolpb.BlackboardObject{TypeName: "crm.Report"}}}}},
			"  ★ asset crm.Report from export"},
		{"replan", &toolpb.RunResponse{Event: &toolpb.RunResponse_ReplanRequested{ReplanRequested: &toolpb.ReplanRequested{Tool: "check_credit", Reason: "blocked", Added: []*toolpb.BlackboardObject{obj}}}},
			"↻ replan requested by check_credit: blocked (1 object added)"},
		{"terminated", &toolpb.RunResponse{Event: &toolpb.RunResponse_Terminated{Terminated: &toolpb.Terminated{Tool: "escalate", Scope: toolpb.TerminateScope_TERMINATE_SCOPE_AGENT, Reason: "human"}}},
			"■ terminated (agent) by escalate: human"},
	}...)
	for _, tc := range cases {
		if got := Describe(tc.ev); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
	if got := Describe(&toolpb.RunResponse{RunId: "r1"}); !strings.HasPrefix(got, "? ") || strings.Contains(got, "\n") {
		t.Errorf("event without a kind: %q", got)
	}
}

// orchestrator is an in-process orchestrator on loopback with one worker serving math
// and text.
type orchestrator struct {
	addr       string
	workerAddr string
}

func startOrchestrator(t *testing.T, script scripted.Script) *orchestrator {
	t.Helper()
	return startOrchestratorWith(t, script, nil)
}

// startOrchestratorWith is startOrchestrator with the config changed by configure (nil:
// the defaults), and the interceptors that authenticate callers as it asks.
func startOrchestratorWith(t *testing.T, script scripted.Script, configure func(*config.Config)) *orchestrator {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.Models.Roles = map[string]string{"fast": "scripted/quick"}
	if configure != nil {
		configure(&cfg)
	}
	model, err := scripted.New(script)
	if err != nil {
		t.Fatal(err)
	}
	rt := router.New(router.Options{Logger: log})
	journal, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = journal.Close() })
	srv, err := meshtest.NewServer(compose.Options{Router: rt, Provider: model, Config: cfg, Logger: log, Journal: journal, Owner: "cli-test"})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(server.RecoveryInterceptors(log), srv.AuthOptions()...)...)
	srv.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		g.Stop()
		<-served
		rt.Close()
	})

	// The worker logs this once the orchestrator accepted its registration.
	registered := logtest.NewSignal("registered with orchestrator")
	w, err := worker.New(worker.Options{ID: "w1", Orchestrator: lis.Addr().String(), Logger: slog.New(registered), DrainTimeout: time.Second, MinBackoff: 10 * time.Millisecond},
		examplegroups.Math(), examplegroups.TextGroup())
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	select {
	case <-registered.Logged:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not register")
	}
	if ok, _ := w.Registered(); !ok {
		t.Fatal("the worker logged its registration but does not report it")
	}
	waddr, err := w.Addr(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return &orchestrator{addr: lis.Addr().String(), workerAddr: waddr.String()}
}

func adderScript() scripted.Script {
	return scripted.Script{Name: "adder", Rules: []scripted.Rule{
		{Name: "answer", When: scripted.When{Tool: "add"}, Reply: scripted.Reply{Text: `The sum is {{ result "add" }}.`}},
		{Name: "call", When: scripted.When{Turn: 1}, Reply: scripted.Reply{
			Text:      "Let me add.",
			ToolCalls: []scripted.ToolCall{{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}}},
		}},
	}}
}

func (o *orchestrator) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, stderr bytes.Buffer
	err := run(testContext(t), append([]string{"-addr", o.addr}, args...), &out, &stderr)
	if stderr.Len() > 0 {
		t.Logf("toolmesh %q wrote to stderr:\n%s", args, stderr.String())
	}
	return out.String(), err
}

// table renders rows the way the commands' tabwriter does: each column but the last
// padded to its widest cell plus two spaces.
func table(rows ...[]string) string {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			fmt.Fprintf(&b, "%s%s", c, strings.Repeat(" ", widths[i]+2-len([]rune(c))))
		}
		b.WriteString(r[len(r)-1] + "\n")
	}
	return b.String()
}

func TestListingCommands(t *testing.T) {
	o := startOrchestrator(t, adderScript())

	out, err := o.run(t, "groups")
	if err != nil {
		t.Fatal(err)
	}
	want := table(
		[]string{"GROUP", "SOURCE", "TOOLS", "WORKERS", "DESCRIPTION"},
		[]string{"agent_process", "orchestrator", "agent_process", "", "Introspection of the current run: status, budget, cost, history, tool statistics, models"},
		[]string{"blackboard", "orchestrator", "blackboard", "", "Access to the objects on the current run's blackboard"},
		[]string{"communication", "orchestrator", "communicate,progress", "", "Progress updates and messages to the user"},
		[]string{"math", "workers", "add,ceiling,divide,floor,math,max,mean,min,multiply,round,subtract", "w1", examplegroups.MathDescription},
		[]string{"text", "workers", "lowercase,reverse,uppercase,word_count", "w1", examplegroups.TextDescription},
	)
	if out != want {
		t.Errorf("groups:\n%s\nwant:\n%s", out, want)
	}

	out, err = o.run(t, "workers")
	if err != nil {
		t.Fatal(err)
	}
	want = table(
		[]string{"WORKER", "ADDRESS", "GROUPS", "STATE", "IN-FLIGHT", "CALLS"},
		[]string{"w1", o.workerAddr, "math,text", "READY", "0", "0"},
	)
	if out != want {
		t.Errorf("workers:\n%s\nwant:\n%s", out, want)
	}

	out, err = o.run(t, "tools", "-group", "text")
	if err != nil {
		t.Fatal(err)
	}
	want = table(
		[]string{"TOOL", "GROUP", "REPLICAS", "DESCRIPTION"},
		[]string{"lowercase", "text", "1", "Convert a text to lower case"},
		[]string{"reverse", "text", "1", "Reverse the characters of a text"},
		[]string{"uppercase", "text", "1", "Convert a text to upper case"},
		[]string{"word_count", "text", "1", "Count the words of a text (runs of letters, digits, apostrophes or hyphens)"},
	)
	if out != want {
		t.Errorf("tools -group text:\n%s\nwant:\n%s", out, want)
	}

	_, err = o.run(t, "tools", "-group", "weather")
	if !errors.Is(err, client.ErrUnknownGroup) {
		t.Errorf("tools -group weather = %v, want ErrUnknownGroup", err)
	}
}

func TestRunCommand(t *testing.T) {
	o := startOrchestrator(t, adderScript())

	out, err := o.run(t, "run", "-tool", "add", "-max-iterations", "5", "What", "is", "2", "+", "3?")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 7 {
		t.Fatalf("run printed %d lines, want 7:\n%s", len(lines), out)
	}
	var runID, loopID string
	if _, err := fmt.Sscanf(lines[0], "▶ run %s started:", &runID); err != nil {
		t.Fatalf("first line %q: %v", lines[0], err)
	}
	loopID = lines[0][strings.LastIndex(lines[0], " ")+1:]
	checks := []struct{ prefix, suffix string }{
		{"▶ run " + runID + " started: model scripted/adder, tools [add], loop " + loopID, ""},
		{"  · scripted/adder: ", " output tokens"},
		{"  💬 Let me add.", ""},
		{`  → [1] add({"a":2,"b":3})  id=call_1_0`, ""},
		{`  ← add = "5"  [OK, on w1, `, "]"},
		{"  · scripted/adder: ", " output tokens"},
		{"■ final (2 iterations): The sum is 5.", ""},
	}
	for i, c := range checks {
		if !strings.HasPrefix(lines[i], c.prefix) || !strings.HasSuffix(lines[i], c.suffix) || (c.suffix == "" && lines[i] != c.prefix) {
			t.Errorf("line %d = %q, want %q…%q", i, lines[i], c.prefix, c.suffix)
		}
	}

	// watch prints the finished run's events again, from the journal.
	watched, err := o.run(t, "watch", runID)
	if err != nil {
		t.Fatal(err)
	}
	if wl := strings.Split(strings.TrimSuffix(watched, "\n"), "\n"); len(wl) != len(lines) || wl[0] != lines[0] || wl[6] != lines[6] {
		t.Errorf("watch printed:\n%s\nwant what run printed:\n%s", watched, out)
	}
	// runs lists it.
	listed, err := o.run(t, "runs", "-state", "succeeded")
	if err != nil || !strings.Contains(listed, runID) || !strings.Contains(listed, "SUCCEEDED") || !strings.Contains(listed, "cli-test") {
		t.Errorf("runs = %q, %v", listed, err)
	}
	if _, err := o.run(t, "runs", "-state", "bogus"); err == nil || !strings.Contains(err.Error(), "not a run state") {
		t.Errorf("runs -state bogus = %v", err)
	}

	// get shows the finished run as JSON.
	out, err = o.run(t, "get", runID)
	if err != nil {
		t.Fatal(err)
	}
	var r toolpb.GetRunResponse
	if err := protojson.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("get printed %q: %v", out, err)
	}
	if r.GetRunId() != runID || r.GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || r.GetFinalText() != "The sum is 5." || r.GetToolCalls() != 1 {
		t.Errorf("get = %v", &r)
	}

	// cancel of a finished run prints its state.
	out, err = o.run(t, "cancel", runID)
	if err != nil || out != "SUCCEEDED\n" {
		t.Errorf("cancel of a finished run = %q, %v", out, err)
	}

	// -json prints one RunResponse per line.
	out, err = o.run(t, "run", "-json", "-tool", "add", "-context", "tenant=acme", "-timeout", "10s", "What is 2 + 3?")
	if err != nil {
		t.Fatal(err)
	}
	jl := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var last int64
	for i, l := range jl {
		var ev toolpb.RunResponse
		if err := protojson.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if ev.GetSequence() <= last {
			t.Errorf("line %d has sequence %d after %d", i, ev.GetSequence(), last)
		}
		last = ev.GetSequence()
		if i == len(jl)-1 && ev.GetFinalResult().GetText() != "The sum is 5." {
			t.Errorf("last line %q, want the final result", l)
		}
	}
}

// -model and -role reach the orchestrator as llm.model and llm.role: the model chosen
// shows in the started event, a mistake is refused naming the field.
func TestRunModelAndRole(t *testing.T) {
	o := startOrchestrator(t, adderScript())
	for _, tc := range []struct {
		args      []string
		model     string // in the started event
		errorText string // when the run is refused
	}{
		{args: []string{"-model", "scripted/precise"}, model: "scripted/precise"},
		{args: []string{"-model", "my-org/my-model"}, model: "scripted/my-org/my-model"}, // no such provider: a model of the default one
		{args: []string{"-role", "fast"}, model: "scripted/quick"},
		{args: []string{"-role", "fast", "-model", "scripted/precise"}, model: "scripted/precise"},
		{args: []string{"-model", "anthropic/claude-sonnet-4-5"}, errorText: "llm.model"},
		{args: []string{"-role", "smart"}, errorText: "llm.role"},
	} {
		out, err := o.run(t, append(append([]string{"run", "-tool", "add"}, tc.args...), "What is 2 + 3?")...)
		if tc.errorText != "" {
			if !errors.Is(err, client.ErrInvalidRequest) || !strings.Contains(err.Error(), tc.errorText) {
				t.Errorf("%q: %v, want an invalid request naming %s", tc.args, err, tc.errorText)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v\n%s", tc.args, err, out)
			continue
		}
		first, _, _ := strings.Cut(out, "\n")
		if !strings.Contains(first, " started: model "+tc.model+", ") {
			t.Errorf("%q: first line %q, want model %s", tc.args, first, tc.model)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	o := startOrchestrator(t, adderScript())
	cases := []struct {
		args     []string
		sentinel error
		contains string
	}{
		{args: nil, contains: "no command"},
		{args: []string{"frobnicate"}, contains: `unknown command "frobnicate"`},
		{args: []string{"get"}, contains: "exactly one RUN_ID"},
		{args: []string{"cancel", "a", "b"}, contains: "exactly one RUN_ID"},
		{args: []string{"get", "nope"}, sentinel: client.ErrRunNotFound},
		{args: []string{"cancel", "nope"}, sentinel: client.ErrRunNotFound},
		{args: []string{"run", "-context", "novalue", "p"}, contains: `-context "novalue": want key=value`},
		{args: []string{"run"}, sentinel: client.ErrInvalidRequest},
		{args: []string{"run", "-max-iterations", "-1", "p"}, sentinel: client.ErrInvalidRequest},
		{args: []string{"run", "-max-iterations", "4294967297", "p"}, contains: "-max-iterations 4294967297: out of range"},
		{args: []string{"run", "-require", "weather", "p"}, sentinel: client.ErrUnknownGroup},
		{args: []string{"run", "-require", "math:add,teleport", "p"}, sentinel: client.ErrRequiredToolsMissing},
	}
	for _, tc := range cases {
		out, err := o.run(t, tc.args...)
		switch {
		case err == nil:
			t.Errorf("%q: no error (output %q)", tc.args, out)
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%q: %v, want %v", tc.args, err, tc.sentinel)
		case tc.contains != "" && !strings.Contains(err.Error(), tc.contains):
			t.Errorf("%q: %v, want it to mention %q", tc.args, err, tc.contains)
		}
	}
}

// TestPrinter: on a terminal, progress is a status line the next output replaces; streamed
// text is written as it arrives and the final line does not repeat it; elsewhere every
// event is a line.
func TestPrinter(t *testing.T) {
	evs := []*toolpb.RunResponse{
		{Event: &toolpb.RunResponse_Progress{Progress: &toolpb.Progress{Tool: "t", Status: "one"}}},
		{Event: &toolpb.RunResponse_Progress{Progress: &toolpb.Progress{Tool: "t", Status: "two"}}},
		{Event: &toolpb.RunResponse_MessageToUser{MessageToUser: &toolpb.MessageToUser{Text: "Done."}}},
		{Event: &toolpb.RunResponse_TextDelta{TextDelta: &toolpb.TextDelta{Text: "The ans"}}},
		{Event: &toolpb.RunResponse_TextDelta{TextDelta: &toolpb.TextDelta{Text: "wer."}}},
		{Event: &toolpb.RunResponse_FinalResult{FinalResult: &toolpb.FinalResult{Text: "The answer.", Iterations: 1}}},
	}
	var term strings.Builder
	p := &printer{out: &term, terminal: true}
	for _, ev := range evs {
		p.print(ev)
	}
	p.endLine()
	want := "\r\x1b[K  ⏳ one\r\x1b[K\r\x1b[K  ⏳ two\r\x1b[K  ✉ Done.\n  ✎ The answer.\n■ final (1 iteration)\n"
	if term.String() != want {
		t.Errorf("terminal output:\n got %q\nwant %q", term.String(), want)
	}
	var plain strings.Builder
	p = &printer{out: &plain}
	for _, ev := range evs[:3] {
		p.print(ev)
	}
	if want := "  ⏳ t: one\n  ⏳ t: two\n  ✉ Done.\n"; plain.String() != want {
		t.Errorf("plain output:\n got %q\nwant %q", plain.String(), want)
	}
}
