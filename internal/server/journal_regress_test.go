package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// ListRuns with the largest page size it accepts never says there is a next page.
func TestListRunsPageSize1000(t *testing.T) {
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	for i := range 1001 {
		if _, err := j.Create(context.Background(), fmt.Sprintf("r%04d", i), "x", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, envOptions{journal: j})
	resp, err := e.orch.ListRuns(testContext(t), &toolpb.ListRunsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetRuns()) != 1000 || resp.GetNextPageToken() == "" {
		t.Errorf("1001 runs, a page of 1000: %d runs and next_page_token %q; want 1000 and a token (the listing looks complete)", len(resp.GetRuns()), resp.GetNextPageToken())
	}
}

// flakyDecision fails one poll of the store for the decision on an approval (not the
// renewals' poll for a cancellation, key "cancel"), and closes polledAfter at the next
// such poll: the wait for the decision went on.
type flakyDecision struct {
	runlog.Store
	fail        atomic.Bool
	failed      atomic.Bool
	polledAfter chan struct{}
	once        sync.Once
}

func newFlakyDecision(s runlog.Store) *flakyDecision {
	return &flakyDecision{Store: s, polledAfter: make(chan struct{})}
}

func (f *flakyDecision) Decision(ctx context.Context, runID, key string) (runlog.Decision, bool, error) {
	if key != "cancel" {
		if f.fail.CompareAndSwap(true, false) {
			f.failed.Store(true)
			return runlog.Decision{}, false, errors.New("connection reset by peer")
		}
		if f.failed.Load() {
			f.once.Do(func() { close(f.polledAfter) })
		}
	}
	return f.Store.Decision(ctx, runID, key)
}

// One failed poll of the store ends a wait for approval that may last an hour.
func TestApprovalPollError(t *testing.T) {
	mem, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	j := newFlakyDecision(mem)
	e := newEnv(t, envOptions{journal: j, script: scripted.Script{Name: "w", Rules: []scripted.Rule{
		{Name: "wiped", When: scripted.When{Tool: "wipe"}, Reply: scripted.Reply{Text: `wipe: {{ result "wipe" }}`}},
		{Name: "wipe", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "wipe", Arguments: map[string]any{}}}}},
	}}})
	e.startWorker("w-1", worker.Group{Role: "danger", Tools: []tool.Tool{
		tool.New("wipe", "Wipes.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("wiped"), nil }, tool.RequiresApproval()),
	}})
	ctx := testContext(t)
	var final string
	// The approval's answer may reach this test after the run's last event: the test
	// waits for it before its context ends.
	var approving sync.WaitGroup
	defer approving.Wait()
	runOver := make(chan struct{}) // closed as the test returns, the run over
	defer close(runOver)
	for ev, err := range e.cl.Run(ctx, &toolpb.RunRequest{RunId: "ap-1", Prompt: "go", ToolGroups: []string{"danger"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetApprovalRequested(); a != nil {
			j.fail.Store(true) // the store blips once while the person decides
			approving.Add(1)
			go func() {
				defer approving.Done()
				// Past the failed poll: the wait polled again.
				select {
				case <-j.polledAfter:
				case <-runOver:
					return // the wait ended with the failed poll: the final result says so
				}
				if err := e.cl.ApproveToolCall(ctx, "ap-1", a.GetCallId(), "", true, ""); err != nil {
					t.Errorf("approve: %v", err)
				}
			}()
		}
		if f := ev.GetFinalResult(); f != nil {
			final = f.GetText()
		}
	}
	if final != "wipe: wiped" {
		t.Errorf("one failed poll of the store decided the approval: %q", final)
	}
}
