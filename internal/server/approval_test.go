package server

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// approvalEnv serves a tool "wipe" whose definition requires approval, and "purge",
// which the config makes wait for at most a short while; calls counts what reached the
// worker.
func approvalEnv(t *testing.T) (*env, *atomic.Int32) {
	t.Helper()
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	e := newEnv(t, envOptions{journal: j,
		configure: func(c *config.Config) {
			c.Tools = map[string]config.Tool{"purge": {Approval: &config.Approval{Timeout: config.Duration(150 * time.Millisecond)}}}
		},
		script: scripted.Script{Name: "wiper", Rules: []scripted.Rule{
			{Name: "wiped", When: scripted.When{Tool: "wipe"}, Reply: scripted.Reply{Text: `wipe: {{ result "wipe" }}`}},
			{Name: "purged", When: scripted.When{Tool: "purge"}, Reply: scripted.Reply{Text: `purge: {{ result "purge" }}`}},
			{Name: "purge", When: scripted.When{User: "purge"}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "purge", Arguments: map[string]any{}}}}},
			{Name: "wipe", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "wipe", Arguments: map[string]any{}}}}},
		}}})
	var calls atomic.Int32
	run := func(_ context.Context, _ string) (tool.Result, error) { calls.Add(1); return tool.Text("done"), nil }
	e.startWorker("wiper-1", worker.Group{Role: "danger", Tools: []tool.Tool{
		tool.New("wipe", "Wipes the disk.", schema.Empty(), run, tool.RequiresApproval()),
		tool.New("purge", "Purges the cache.", schema.Empty(), run),
	}})
	return e, &calls
}

// runUntilApproval starts a detached run and returns its approval request.
func runUntilApproval(t *testing.T, e *env, id, prompt string) *toolpb.ApprovalRequested {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	for ev, err := range e.cl.Run(ctx, &toolpb.RunRequest{RunId: id, Prompt: prompt, ToolGroups: []string{"danger"}, Detached: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetApprovalRequested(); a != nil {
			return a
		}
	}
	t.Fatal("the run ended without asking for approval")
	return nil
}

func finalOf(t *testing.T, e *env, id string) (string, []*toolpb.RunResponse) {
	t.Helper()
	var evs []*toolpb.RunResponse
	for ev, err := range e.cl.Watch(testContext(t), id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs[len(evs)-1].GetFinalResult().GetText(), evs
}

// A call of a tool that requires approval waits for it: approved, it runs once; denied,
// it never reaches the worker and the model reads the denial and its reason; unanswered,
// the deadline ends the wait.
func TestApprovals(t *testing.T) {
	e, calls := approvalEnv(t)
	ctx := testContext(t)

	a := runUntilApproval(t, e, "deny-1", "wipe it")
	if a.GetTool() != "wipe" || a.GetCallId() == "" || a.GetDeadline().AsTime().Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("approval request %v: want wipe, a call id, the default one-hour deadline", a)
	}
	if snap, _ := e.cl.GetRun(ctx, "deny-1"); snap.GetState() != toolpb.RunState_RUN_STATE_RUNNING {
		t.Errorf("a run waiting for approval is %v", snap.GetState())
	}
	if err := e.cl.ApproveToolCall(ctx, "deny-1", a.GetCallId(), "", false, "not on a Friday"); err != nil {
		t.Fatal(err)
	}
	text, evs := finalOf(t, e, "deny-1")
	if want := "wipe: Error: The user denied the call of tool 'wipe', so it did not run. Their reason: not on a Friday Do not call it again with the same arguments unless the user asks."; text != want {
		t.Errorf("final text %q\nwant %q", text, want)
	}
	decided := 0
	for _, ev := range evs {
		if d := ev.GetApprovalDecided(); d != nil {
			decided++
			if d.GetApproved() || d.GetReason() != "not on a Friday" || d.GetDecidedBy() != "client via test" {
				t.Errorf("decision event %v", d)
			}
		}
	}
	if decided != 1 || calls.Load() != 0 {
		t.Errorf("%d decision events, %d calls reached the worker; want 1 and 0", decided, calls.Load())
	}
	// A decided call cannot be decided again.
	if err := e.cl.ApproveToolCall(ctx, "deny-1", a.GetCallId(), "", true, ""); !errors.Is(err, client.ErrApprovalNotPending) {
		t.Errorf("a second decision: %v, want APPROVAL_NOT_PENDING", err)
	}
	// The same decision sent again (a client that lost the first's answer, and tries
	// again) took effect: it is told so. Before, it was told the call was decided
	// already, as a retry on UNAVAILABLE is.
	if err := e.cl.ApproveToolCall(ctx, "deny-1", a.GetCallId(), "", false, "not on a Friday"); err != nil {
		t.Errorf("the same decision again: %v, want it accepted", err)
	}

	a = runUntilApproval(t, e, "approve-1", "wipe it")
	if err := e.cl.ApproveToolCall(ctx, "approve-1", a.GetCallId(), a.GetLoopId(), true, ""); err != nil {
		t.Fatal(err)
	}
	if text, _ := finalOf(t, e, "approve-1"); text != "wipe: done" || calls.Load() != 1 {
		t.Errorf("approved: final %q, %d calls; want the tool's answer, one call", text, calls.Load())
	}
	if err := e.cl.ApproveToolCall(ctx, "approve-1", a.GetCallId(), a.GetLoopId(), true, ""); err != nil || calls.Load() != 1 {
		t.Errorf("the same approval again, the run ended: %v (%d calls), want it accepted, the call run once", err, calls.Load())
	}

	a = runUntilApproval(t, e, "late-1", "purge it")
	text, _ = finalOf(t, e, "late-1")
	if want := "purge: Error: The call of tool 'purge' was not approved within 150ms, so it did not run. Do not call it again unless the user asks."; text != want || calls.Load() != 1 {
		t.Errorf("unanswered: final %q (%d calls)\nwant %q", text, calls.Load(), want)
	}
	if err := e.cl.ApproveToolCall(ctx, "late-1", a.GetCallId(), "", true, ""); !errors.Is(err, client.ErrApprovalNotPending) {
		t.Errorf("approving after the deadline: %v, want APPROVAL_NOT_PENDING", err)
	}
}

// Bad ApproveToolCall requests name the field; an unknown run is NOT_FOUND; an unknown
// call is APPROVAL_NOT_PENDING.
func TestApproveToolCallErrors(t *testing.T) {
	e, _ := approvalEnv(t)
	ctx := testContext(t)
	a := runUntilApproval(t, e, "errs-1", "wipe it")
	for _, tc := range []struct {
		name  string
		req   *toolpb.ApproveToolCallRequest
		code  codes.Code
		field string
	}{
		{"no decision", &toolpb.ApproveToolCallRequest{RunId: "errs-1", CallId: a.GetCallId()}, codes.InvalidArgument, "decision"},
		{"no call", &toolpb.ApproveToolCallRequest{RunId: "errs-1", Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_APPROVE}, codes.InvalidArgument, "call_id"},
		{"long reason", &toolpb.ApproveToolCallRequest{RunId: "errs-1", CallId: "c", Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_DENY, Reason: strings.Repeat("x", 1025)}, codes.InvalidArgument, "reason"},
		// The journal keeps no NUL bytes (PostgreSQL refused the decision, and every retry
		// was answered JOURNAL_UNAVAILABLE).
		{"NUL in the reason", &toolpb.ApproveToolCallRequest{RunId: "errs-1", CallId: a.GetCallId(), Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_DENY, Reason: "no\x00"}, codes.InvalidArgument, "reason"},
		{"NUL in the call", &toolpb.ApproveToolCallRequest{RunId: "errs-1", CallId: "c\x00", Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_DENY}, codes.InvalidArgument, "call_id"},
		{"unknown run", &toolpb.ApproveToolCallRequest{RunId: "nope", CallId: "c", Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_DENY}, codes.NotFound, "run_id"},
		{"unknown call", &toolpb.ApproveToolCallRequest{RunId: "errs-1", CallId: "c9", Decision: toolpb.ApprovalDecision_APPROVAL_DECISION_DENY}, codes.FailedPrecondition, "call_id"},
	} {
		_, err := e.orch.ApproveToolCall(ctx, tc.req)
		if st := status.Convert(err); st.Code() != tc.code || !containsField(err, tc.field) && tc.code == codes.InvalidArgument {
			t.Errorf("%s: %v, want %s naming %s", tc.name, err, tc.code, tc.field)
		}
	}
	if err := e.cl.ApproveToolCall(ctx, "errs-1", a.GetCallId(), "", true, ""); err != nil {
		t.Fatal(err)
	}
	finalOf(t, e, "errs-1")
}
