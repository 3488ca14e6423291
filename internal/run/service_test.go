package run

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/loop"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
)

// The run service's behaviour, tested on the service itself: no gRPC, no worker, a
// scripted model and a tool group served in process.

// notesService is a run service whose in-process group "notes" has remember (which counts
// its calls) and wait (which blocks until its call is cancelled), driven by script.
func notesService(t *testing.T, cfg config.Config, script scripted.Script, calls *atomic.Int32, with ...func(*Options)) *Service {
	t.Helper()
	remember := tool.New("remember", "Remembers a note.", schema.Params(schema.String("text", "the note")), func(_ context.Context, in string) (tool.Result, error) {
		calls.Add(1)
		return tool.Text("remembered " + in), nil
	})
	wait := tool.New("wait", "Waits.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		<-ctx.Done()
		return tool.Result{}, ctx.Err()
	})
	model, err := scripted.New(script)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Config: cfg, Providers: map[string]llm.Provider{"scripted": model},
		Groups: map[string]Group{"notes": {Description: "Notes", Tools: []tool.Tool{remember, wait}}}}
	for _, w := range with {
		w(&opts)
	}
	s, err := extendedService(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// collect runs req and returns its result, every event it handed out and its error.
func collect(t *testing.T, s *Service, req Request) (*Result, []Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var evs []Event
	res, err := s.Run(ctx, req, func(ev Event) { evs = append(evs, ev) })
	return res, evs, err
}

func user(text string) []llm.Message { return []llm.Message{{Role: llm.RoleUser, Text: text}} }

// TestRunOfAnInProcessGroup: a run offered a group calls its tool, reads the result and
// answers; its events say so in order, and Get reports it succeeded.
func TestRunOfAnInProcessGroup(t *testing.T) {
	var calls atomic.Int32
	s := notesService(t, config.Default(), scripted.Script{Name: "notes", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "milk"}}}}},
		{Reply: scripted.Reply{Text: `done: {{ result "remember" }}`}},
	}}, &calls)
	res, evs, err := collect(t, s, Request{ID: "r-notes", Messages: user("note milk"), Groups: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != `done: remembered {"text":"milk"}` || res.RunID != "r-notes" || calls.Load() != 1 {
		t.Errorf("result %q of run %q after %d calls", res.Text, res.RunID, calls.Load())
	}
	started, ok := evs[0].(Started)
	if !ok || !slices.Equal(started.Tools, []string{"remember", "wait"}) {
		t.Errorf("first event %#v: want Started offering the group's tools", evs[0])
	}
	var finished []loop.ToolCallFinished
	for _, ev := range evs {
		if f, ok := ev.(loop.ToolCallFinished); ok {
			finished = append(finished, f)
		}
	}
	if len(finished) != 1 || finished[0].Call.Name != "remember" || finished[0].Outcome != loop.OutcomeOK {
		t.Errorf("finished calls %+v", finished)
	}
	if end, ok := evs[len(evs)-1].(Ended); !ok || end.Err != nil || end.Result.Text != res.Text {
		t.Errorf("last event %#v: want Ended with the result", evs[len(evs)-1])
	}
	snap, err := s.Get("r-notes")
	if err != nil || snap.State != runlog.StateSucceeded || snap.ToolCalls != 1 || snap.Iterations != 2 {
		t.Errorf("Get = %+v, %v", snap, err)
	}
}

// TestRunFailsWithItsKind: a run that never stops calling tools ends at its iteration
// limit, and its error is of the kind the API reports for that.
func TestRunFailsWithItsKind(t *testing.T) {
	var calls atomic.Int32
	s := notesService(t, config.Default(), scripted.Script{Name: "forever", Rules: []scripted.Rule{
		{Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "again"}}}}},
	}}, &calls)
	_, _, err := collect(t, s, Request{ID: "r-forever", Messages: user("go"), Groups: []string{"notes"}, MaxIterations: 3})
	if KindOf(err) != KindMaxIterations || calls.Load() != 3 {
		t.Errorf("error %v (kind %s) after %d calls; want MAX_ITERATIONS after 3", err, KindOf(err), calls.Load())
	}
	if snap, _ := s.Get("r-forever"); snap.State != runlog.StateFailed {
		t.Errorf("state %v, want failed", snap.State)
	}
}

// TestTenantGrantAndUnservedGroups: a tenant may not ask for a group outside its grant
// (the request fails naming the field, nothing runs); a group nobody serves is left out
// with a warning, and the run goes on.
func TestTenantGrantAndUnservedGroups(t *testing.T) {
	cfg := config.Default()
	cfg.Tenants = map[string]config.Tenant{"acme": {Groups: []string{"math"}}}
	var calls atomic.Int32
	s := notesService(t, cfg, scripted.Script{Name: "plain", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}}, &calls)
	_, evs, err := collect(t, s, Request{Messages: user("hi"), Groups: []string{"notes"}, Tenant: "acme"})
	var fe *FieldError
	if KindOf(err) != KindPermissionDenied || !errors.As(err, &fe) || fe.Field != "tool_groups[0]" || len(evs) != 0 {
		t.Errorf("a group outside the grant: %v (kind %s), %d events; want PERMISSION_DENIED on tool_groups[0] before the run starts", err, KindOf(err), len(evs))
	}
	res, evs, err := collect(t, s, Request{Messages: user("hi"), Groups: []string{"notes", "nobody"}})
	if err != nil || res.Text != "ok" {
		t.Fatalf("run with an unserved group: %v, %v", res, err)
	}
	var warned bool
	for _, ev := range evs {
		if w, ok := ev.(Warning); ok && strings.Contains(w.Message, "nobody") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning names the unserved group: %#v", evs)
	}
}

// TestCancelARun: cancelling a run stops its tool call in flight and ends the run as
// cancelled, with the reason.
func TestCancelARun(t *testing.T) {
	var calls atomic.Int32
	s := notesService(t, config.Default(), scripted.Script{Name: "waits", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "wait"}}}},
		{Reply: scripted.Reply{Text: "never"}},
	}}, &calls)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, Request{ID: "r-wait", Messages: user("wait"), Groups: []string{"notes"}}, func(ev Event) {
			if st, ok := ev.(loop.ToolCallStarted); ok && st.Call.Name == "wait" {
				close(waiting)
			}
		})
		done <- err
	}()
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the wait call never started")
	}
	if _, err := s.Cancel(ctx, "r-wait", "the user left"); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if KindOf(err) != KindCancelled || !strings.Contains(err.Error(), "the user left") {
		t.Errorf("run ended with %v (kind %s), want CANCELLED with the reason", err, KindOf(err))
	}
	if snap, _ := s.Get("r-wait"); snap.State != runlog.StateCancelled {
		t.Errorf("state %v, want cancelled", snap.State)
	}
}

// TestProgramStrategyAddsATool: a program's strategy runs after each call beside
// unfolding: once remember was called, the tool it adds is offered and can be called.
func TestProgramStrategyAddsATool(t *testing.T) {
	var calls atomic.Int32
	bonus := tool.New("bonus", "A tool offered after remember.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Text("bonus ran"), nil
	})
	model, err := scripted.New(scripted.Script{Name: "strategy", Rules: []scripted.Rule{
		{When: scripted.When{Turn: 1}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "remember", Arguments: map[string]any{"text": "x"}}}}},
		{When: scripted.When{Turn: 2, HasTool: "bonus"}, Reply: scripted.Reply{ToolCalls: []scripted.ToolCall{{Name: "bonus"}}}},
		{Reply: scripted.Reply{Text: `last: {{ results }}`}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	strategy := loop.StrategyFunc(func(_ context.Context, ic loop.InjectionContext) (loop.Injection, error) {
		if ic.Tool.Definition().Name == "remember" {
			return loop.Injection{Add: []tool.Tool{bonus}}, nil
		}
		return loop.Injection{}, nil
	})
	remember := tool.New("remember", "Remembers.", schema.Params(schema.String("text", "the note")), func(context.Context, string) (tool.Result, error) {
		calls.Add(1)
		return tool.Text("ok"), nil
	})
	s, err := extendedService(t, Options{Providers: map[string]llm.Provider{"scripted": model}, Strategies: []loop.Strategy{strategy},
		Groups: map[string]Group{"notes": {Tools: []tool.Tool{remember}}}})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := collect(t, s, Request{Messages: user("go"), Groups: []string{"notes"}})
	if err != nil || res.Text != "last: bonus ran" {
		t.Errorf("result %+v, %v; want the bonus tool's answer", res, err)
	}
}
