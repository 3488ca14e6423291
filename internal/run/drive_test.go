package run

import (
	"context"
	"iter"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/router"
)

// stackModel answers a call's first turn with a call of the built-in progress tool and
// its second with a text, and records the stack of the goroutine each call is made on.
type stackModel struct {
	mu     sync.Mutex
	stacks []string
}

func (m *stackModel) Name() string { return "stacks" }
func (m *stackModel) Stream(_ context.Context, req *llm.Request) iter.Seq2[llm.Chunk, error] {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	m.mu.Lock()
	m.stacks = append(m.stacks, string(buf))
	m.mu.Unlock()
	return func(yield func(llm.Chunk, error) bool) {
		if len(req.Messages) == 1 {
			yield(llm.Chunk{Done: &llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "progress", Arguments: `{"status":"working"}`}}}}, nil)
			return
		}
		yield(llm.Chunk{Done: &llm.Response{Text: "done"}}, nil)
	}
}

// A run's model calls are made on the goroutine that called Run, from the few frames
// that drive the loop: none of the run service's setup, of the loop's handling of an
// answer or of the tool calls is on that goroutine's stack while the run waits for its
// model. (Before, the model was called from the bottom of that whole chain, which a run
// waiting for its model held as a deep stack.)
func TestModelCalledFromAShallowStack(t *testing.T) {
	model := &stackModel{}
	log := slog.New(slog.DiscardHandler)
	s, err := New(Options{Router: router.New(router.Options{Logger: log}), Providers: map[string]llm.Provider{"stacks": model},
		DefaultProvider: "stacks", Config: config.Default(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Run(ctx, Request{Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}, Groups: []string{"communication"}}, nil)
	if err != nil || res.Text != "done" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if len(model.stacks) != 2 {
		t.Fatalf("%d model calls, want 2", len(model.stacks))
	}
	// The frames of toolmesh a model call may be made under: the test's call of Run, the
	// frames that drive the loop, and the model's own wrappers.
	allowed := []string{"run.TestModelCalledFromAShallowStack", "run.(*Service).Run", "run.(*Service).launch", "run.(*driver).loop",
		"loop.(*Stepper).Collect", "loop.(*state).collect", "llm.Collect", "run.tracedProvider", "run.(*tracedProvider)",
		"run.(*journalProvider)", "run.(*stackModel).Stream"}
	for i, st := range model.stacks {
		if !strings.Contains(st, "TestModelCalledFromAShallowStack") {
			t.Errorf("model call %d was not made on the goroutine that called Run:\n%s", i+1, st)
		}
		for _, line := range strings.Split(st, "\n") {
			fn, _, _ := strings.Cut(strings.TrimPrefix(line, "github.com/toolmesh/toolmesh/internal/"), "(0x")
			if !strings.HasPrefix(line, "github.com/toolmesh/toolmesh/") {
				continue
			}
			if !slices.ContainsFunc(allowed, func(a string) bool { return strings.HasPrefix(fn, a) }) {
				t.Errorf("model call %d was made with %s on the stack:\n%s", i+1, fn, st)
			}
		}
	}
}

// panickyLog panics at the log line "run started".
type panickyLog struct{ slog.Handler }

func (h panickyLog) Enabled(context.Context, slog.Level) bool { return true }
func (h panickyLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "run started" {
		panic("log")
	}
	return nil
}
func (h panickyLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panickyLog) WithGroup(string) slog.Handler      { return h }

// A panic of the log line that a run started (an embedder's handler, a value that fails
// to log itself), which the server's interceptor recovers, leaves nothing of the run
// either: the line is logged once the run is released on every way out.
func TestPanicInTheStartLogLeavesNoRun(t *testing.T) {
	panicLeavesNoRun(t, slog.New(panickyLog{}), nil)
}

// A panic while a run starts (here the observer panics on Started), which the server's
// interceptor recovers, leaves nothing of the run: no live run holding a slot of the
// orchestrator's and its tenant's, nothing for a shutdown to wait for.
func TestPanicAtStartLeavesNoRun(t *testing.T) {
	panicLeavesNoRun(t, slog.New(slog.DiscardHandler), func(ev Event) {
		if _, ok := ev.(Started); ok {
			panic("observer")
		}
	})
}

// panicLeavesNoRun runs a run whose start panics (with log or observe) and checks that
// the panic reaches Run's caller and nothing of the run stays.
func panicLeavesNoRun(t *testing.T, log *slog.Logger, observe func(Event)) {
	t.Helper()
	s, err := New(Options{Router: router.New(router.Options{Logger: slog.New(slog.DiscardHandler)}), Providers: map[string]llm.Provider{"stacks": &stackModel{}},
		DefaultProvider: "stacks", Config: config.Default(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not reach Run's caller")
			}
		}()
		_, _ = s.Run(ctx, Request{ID: "r1", Messages: []llm.Message{{Role: llm.RoleUser, Text: "go"}}}, observe)
	}()
	if n := s.store.liveCount(); n != 0 {
		t.Errorf("after a recovered panic at start, %d runs are still live", n)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	if err := s.store.wait(wctx); err != nil {
		t.Errorf("waiting for the runs to end: %v", err)
	}
}
