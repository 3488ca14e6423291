package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// journalEnv is an orchestrator with an in-memory journal and a worker whose tool
// "gate" blocks until release is closed.
func journalEnv(t *testing.T) (*env, chan struct{}) {
	t.Helper()
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	e := newEnv(t, envOptions{journal: j, script: scripted.Script{Name: "gate", Rules: []scripted.Rule{
		{Name: "answer", When: scripted.When{Tool: "gate"}, Reply: scripted.Reply{Text: `gate said {{ result "gate" }}`}},
		{Name: "call", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "gate", Arguments: map[string]any{}}}}},
	}}})
	release := make(chan struct{})
	gate := tool.New("gate", "Waits until the test lets it go.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		select {
		case <-release:
			return tool.Text("open"), nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	})
	e.startWorker("gate-1", worker.Group{Role: "gates", Tools: []tool.Tool{gate}})
	return e, release
}

// A detached run goes on when its client goes away; WatchRun streams its events from the
// journal and then live, and again after any sequence number; ListRuns pages through the
// journal's runs.
func TestWatchRunDetached(t *testing.T) {
	e, release := journalEnv(t)
	ctx := testContext(t)

	first, stop := context.WithCancel(ctx)
	var seen []*toolpb.RunResponse
	for ev, err := range e.cl.Run(first, &toolpb.RunRequest{RunId: "detached-1", Prompt: "go", ToolGroups: []string{"gates"}, Detached: true}) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
		if ev.GetToolCallStarted() != nil {
			break // the client goes away mid-call
		}
	}
	stop()
	// A watch started while the call blocks gets the journal's events, then the rest live.
	watched := make(chan []*toolpb.RunResponse, 1)
	caughtUp := make(chan struct{}) // closed once the watch has the events the run's stream had
	go func() {
		var evs []*toolpb.RunResponse
		for ev, err := range e.cl.Watch(ctx, "detached-1", 0) {
			if err != nil {
				t.Errorf("Watch: %v", err)
				break
			}
			evs = append(evs, ev)
			if len(evs) == len(seen) {
				close(caughtUp)
			}
		}
		watched <- evs
	}()
	// The server saw the client go away: the Run call's handler returned (after the run
	// ended, had the run not been detached).
	e.calls.waitEnded(t, toolpb.OrchestratorService_Run_FullMethodName, 1)
	select {
	case <-caughtUp:
	case evs := <-watched:
		t.Fatalf("the watch ended with %d events, before it had the %d of the run's stream", len(evs), len(seen))
	}
	if snap, err := e.cl.GetRun(ctx, "detached-1"); err != nil || snap.GetState() != toolpb.RunState_RUN_STATE_RUNNING {
		t.Fatalf("a detached run whose client went away: %v, %v; want it running", snap.GetState(), err)
	}
	close(release)
	evs := <-watched
	if len(evs) == 0 || evs[len(evs)-1].GetFinalResult().GetText() != "gate said open" {
		t.Fatalf("watched %d events, the last %v; want the final result", len(evs), evs[len(evs)-1])
	}
	for i, ev := range seen {
		if evs[i].GetSequence() != ev.GetSequence() || fmt.Sprint(evs[i].GetEvent()) != fmt.Sprint(ev.GetEvent()) {
			t.Errorf("event %d: watched %v, the run's stream had %v", i, evs[i], ev)
		}
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].GetSequence() <= evs[i-1].GetSequence() || evs[i].GetRunId() != "detached-1" || evs[i].GetTime() == nil {
			t.Errorf("event %d: run %q, sequence %d after %d", i, evs[i].GetRunId(), evs[i].GetSequence(), evs[i-1].GetSequence())
		}
	}
	after := seen[len(seen)-1].GetSequence()
	var rest []*toolpb.RunResponse
	for ev, err := range e.cl.Watch(ctx, "detached-1", after) {
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, ev)
	}
	if len(rest) != len(evs)-len(seen) || rest[0].GetSequence() <= after {
		t.Errorf("a watch after %d got %d events, want %d", after, len(rest), len(evs)-len(seen))
	}

	// A second run, attached.
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{RunId: "attached-1", Prompt: "go", ToolGroups: []string{"gates"}}, nil); err != nil {
		t.Fatal(err)
	}

	// ListRuns pages through both.
	runs, next, err := e.cl.ListRuns(ctx, toolpb.RunState_RUN_STATE_UNSPECIFIED, 1, "")
	if err != nil || len(runs) != 1 || runs[0].GetRunId() != "attached-1" || next != "attached-1" {
		t.Fatalf("ListRuns page 1 = %v, %q, %v", runs, next, err)
	}
	runs, next, err = e.cl.ListRuns(ctx, toolpb.RunState_RUN_STATE_UNSPECIFIED, 1, next)
	if err != nil || len(runs) != 1 || runs[0].GetRunId() != "detached-1" || runs[0].GetState() != toolpb.RunState_RUN_STATE_SUCCEEDED || runs[0].GetOwner() != "test" {
		t.Fatalf("ListRuns page 2 = %v, %q, %v", runs, next, err)
	}
	runs, _, err = e.cl.ListRuns(ctx, toolpb.RunState_RUN_STATE_SUCCEEDED, 10, "")
	if err != nil || len(runs) != 2 {
		t.Errorf("ListRuns(succeeded) = %v, %v", runs, err)
	}
	if runs, _, err := e.cl.ListRuns(ctx, toolpb.RunState_RUN_STATE_RUNNING, 10, ""); err != nil || len(runs) != 0 {
		t.Errorf("ListRuns(running) = %v, %v", runs, err)
	}
	// A run id the journal holds cannot be used again.
	stream, err := e.orch.Run(ctx, &toolpb.RunRequest{RunId: "detached-1", Prompt: "again", ToolGroups: []string{"gates"}})
	if err == nil {
		_, err = stream.Recv()
	}
	if reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_RUN_EXISTS {
		t.Errorf("a run id used before: %v, want RUN_EXISTS", err)
	}
}

// Bad WatchRun and ListRuns requests name the field; an unknown run is NOT_FOUND; an
// orchestrator without a journal says so.
func TestWatchRunErrors(t *testing.T) {
	e, _ := journalEnv(t)
	ctx := testContext(t)
	watch := func(e *env, req *toolpb.WatchRunRequest) error {
		s, err := e.orch.WatchRun(ctx, req)
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	for _, tc := range []struct {
		name  string
		err   error
		code  codes.Code
		field string
	}{
		{"no run id", watch(e, &toolpb.WatchRunRequest{}), codes.InvalidArgument, "run_id"},
		{"negative after", watch(e, &toolpb.WatchRunRequest{RunId: "x", AfterSequence: -1}), codes.InvalidArgument, "after_sequence"},
		{"unknown run", watch(e, &toolpb.WatchRunRequest{RunId: "nope"}), codes.NotFound, "run_id"},
		{"page size", func() error { _, err := e.orch.ListRuns(ctx, &toolpb.ListRunsRequest{PageSize: 1001}); return err }(), codes.InvalidArgument, "page_size"},
		{"state", func() error { _, err := e.orch.ListRuns(ctx, &toolpb.ListRunsRequest{State: 99}); return err }(), codes.InvalidArgument, "state"},
	} {
		st := status.Convert(tc.err)
		if st.Code() != tc.code || !containsField(tc.err, tc.field) {
			t.Errorf("%s: %v, want %s naming %s", tc.name, tc.err, tc.code, tc.field)
		}
	}
	plain := newEnv(t, envOptions{})
	if err := watch(plain, &toolpb.WatchRunRequest{RunId: "x"}); reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_JOURNAL_UNAVAILABLE {
		t.Errorf("WatchRun without a journal: %v, want JOURNAL_UNAVAILABLE", err)
	}
}

func containsField(err error, field string) bool {
	return strings.Contains(status.Convert(err).Message(), field)
}

// CancelRun on a replica that does not drive the run reaches its owner through the
// journal: the run ends CANCELLED with the reason, and the call reports it.
func TestCancelRunFromAnotherReplica(t *testing.T) {
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	short := func(c *config.Config) { c.Journal.LeaseTTL = config.Duration(1500 * time.Millisecond) }
	script := scripted.Script{Name: "gate", Rules: []scripted.Rule{
		{Name: "call", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "gate", Arguments: map[string]any{}}}}},
	}}
	owner := newEnv(t, envOptions{journal: j, configure: short, script: script})
	other := newEnv(t, envOptions{journal: j, configure: short, script: script})
	gate := tool.New("gate", "Waits until cancelled.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	})
	owner.startWorker("gate-1", worker.Group{Role: "gates", Tools: []tool.Tool{gate}})
	ctx := testContext(t)
	started := make(chan struct{})
	ended := make(chan error, 1)
	go func() {
		var last error
		for ev, err := range owner.cl.Run(ctx, &toolpb.RunRequest{RunId: "far-1", Prompt: "go", ToolGroups: []string{"gates"}}) {
			if err != nil {
				last = err
				break
			}
			if ev.GetToolCallStarted() != nil {
				close(started)
			}
		}
		ended <- last
	}()
	<-started
	st, err := other.cl.CancelRun(ctx, "far-1", "stop it from over here")
	if err != nil || st != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Fatalf("CancelRun through the other replica = %v, %v; want CANCELLED", st, err)
	}
	if err := <-ended; err == nil || !strings.Contains(err.Error(), "stop it from over here") {
		t.Errorf("the run's stream ended with %v, want the cancellation and its reason", err)
	}
	snap, err := other.cl.GetRun(ctx, "far-1")
	if err != nil || snap.GetState() != toolpb.RunState_RUN_STATE_CANCELLED {
		t.Errorf("GetRun = %v, %v", snap.GetState(), err)
	}
}
