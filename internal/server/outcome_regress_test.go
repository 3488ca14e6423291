package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// A tool answer within the message limit whose outcome record is over the record limit.
func TestOversizedOutcome(t *testing.T) {
	j, err := runlog.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	finished := &finishSignal{Store: j, runID: "big-1", finished: make(chan struct{})}
	e := newEnv(t, envOptions{journal: finished,
		configure: func(c *config.Config) { c.Journal.LeaseTTL = config.Duration(400 * time.Millisecond) },
		script: scripted.Script{Name: "p", Rules: []scripted.Rule{
			{Name: "done", When: scripted.When{Tool: "page"}, Reply: scripted.Reply{Text: "read it"}},
			{Name: "call", Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "page", Arguments: map[string]any{}}}}},
		}}})
	var calls atomic.Int32
	e.startWorker("w-1", worker.Group{Role: "web", Tools: []tool.Tool{
		tool.New("page", "Fetches a page.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			calls.Add(1)
			return tool.Text(strings.Repeat("<p>&", 3<<20/4)), nil
		}, tool.Idempotent()),
	}})
	ctx := testContext(t)
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	go e.srv.Maintain(mctx)
	var last *toolpb.RunResponse
	var runErr error
	for ev, err := range e.cl.Run(ctx, &toolpb.RunRequest{RunId: "big-1", Prompt: "go", ToolGroups: []string{"web"}}) {
		if err != nil {
			runErr = err
			break
		}
		last = ev
	}
	if runErr != nil || last.GetFinalResult() == nil {
		t.Errorf("a 3 MiB tool answer: the run's stream ended with %v after %v, want its final result", runErr, last)
	}
	// The journal ends the run with it; nothing takes the run over and calls the tool
	// again meanwhile (Maintain runs).
	select {
	case <-finished.finished:
	case <-time.After(10 * time.Second):
	}
	r, _ := j.Get(ctx, "big-1")
	if calls.Load() > 1 || !r.State.Terminal() {
		t.Errorf("a 3 MiB tool answer: the run never ends (%s, epoch %d) and the tool ran %d times", r.State, r.Epoch, calls.Load())
	}
	stop()
}

// finishSignal is a store that closes finished once a Finish of run runID succeeded.
type finishSignal struct {
	runlog.Store
	runID    string
	finished chan struct{}
	once     sync.Once
}

func (f *finishSignal) Finish(ctx context.Context, lease runlog.Lease, state runlog.State, last ...runlog.Record) error {
	err := f.Store.Finish(ctx, lease, state, last...)
	if err == nil && lease.RunID == f.runID {
		f.once.Do(func() { close(f.finished) })
	}
	return err
}

// Volatile passes the store's through: an in-memory journal stays one.
func (f *finishSignal) Volatile() bool {
	v, ok := f.Store.(interface{ Volatile() bool })
	return ok && v.Volatile()
}
