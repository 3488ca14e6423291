package toolcall_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolctx"
)

// tracing is a layer that logs around the calls of the tools skip does not exclude.
func tracing(name string, log *[]string, skip string) toolcall.Layer {
	return toolcall.Layer{Name: name, For: func(t tool.Tool) func(toolcall.Handler) toolcall.Handler {
		if t.Definition().Name == skip {
			return nil
		}
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				*log = append(*log, name+" in")
				res, err := next(ctx, c)
				*log = append(*log, name+" out")
				return res, err
			}
		}
	}}
}

// TestPipelineOrder: the first layer is outermost; a layer with nothing to do for a tool
// is not in its calls' way.
func TestPipelineOrder(t *testing.T) {
	var log []string
	p := toolcall.Pipeline{tracing("a", &log, ""), tracing("b", &log, "t"), tracing("c", &log, "")}
	if diff := cmp.Diff([]string{"a", "b", "c"}, p.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	w := p.Wrap(newTool(func(context.Context, string) (tool.Result, error) {
		log = append(log, "tool")
		return tool.Text("ok"), nil
	}))
	if got := w.(*toolcall.Tool).Layers(); !cmp.Equal(got, []string{"a", "c"}) {
		t.Errorf("Layers = %v, want [a c]: b does nothing for t", got)
	}
	res, err := toolcall.Run(t.Context(), nil, &toolcall.Call{Tool: w, Input: "{}"})
	if err != nil || res.Content != "ok" {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if diff := cmp.Diff([]string{"a in", "c in", "tool", "c out", "a out"}, log); diff != "" {
		t.Errorf("call order (-want +got):\n%s", diff)
	}
	// Called as a plain tool (as a worker's tool is, or an MCP client's), the same.
	log = nil
	if _, err := w.Call(t.Context(), "{}"); err != nil {
		t.Fatal(err)
	}
	if len(log) != 5 {
		t.Errorf("a plain call of the wrapped tool: %v, want the same five steps", log)
	}
}

// TestCallFieldsReachTheTool: what the call holds is what the tool reads from its
// context, through one context value; an unset field leaves the enclosing context's.
func TestCallFieldsReachTheTool(t *testing.T) {
	state := toolcall.NewState([]byte(`{"n":1}`))
	var got struct {
		info      tool.CallInfo
		bag       toolctx.Context
		state     *tool.State
		validated bool
		tenant    string
		dispatch  *toolinternal.Dispatch
		progress  []string
	}
	probe := newTool(func(ctx context.Context, input string) (tool.Result, error) {
		got.info, _ = tool.CallInfoFrom(ctx)
		got.bag = toolctx.FromContext(ctx)
		got.state = tool.StateFrom(ctx)
		got.validated = toolinternal.Validated(ctx, input)
		got.tenant = toolinternal.TenantFrom(ctx)
		got.dispatch = toolinternal.DispatchFrom(ctx)
		tool.Progress(ctx, "half way")
		return tool.Text("ok"), nil
	})
	d := &toolinternal.Dispatch{}
	c := &toolcall.Call{Tool: probe, Name: "t", Input: `{"q":1}`, Validated: true,
		Info:  tool.CallInfo{RunID: "r", LoopID: "l", CallID: "c", Iteration: 2},
		Bag:   toolctx.MustOf("user_id", "u1"),
		State: state, Dispatch: d,
		Progress: func(s string) { got.progress = append(got.progress, s) }}
	ctx := toolinternal.WithTenant(t.Context(), "acme") // the run's, not the call's
	if _, err := toolcall.Run(ctx, nil, c); err != nil {
		t.Fatal(err)
	}
	if got.info != c.Info {
		t.Errorf("CallInfo = %+v, want %+v", got.info, c.Info)
	}
	if v, _ := got.bag.Get("user_id"); v != "u1" {
		t.Errorf("ToolCallContext user_id = %q, want u1", v)
	}
	if v, _ := got.bag.Get(toolctx.LoopIDKey); v != "l" {
		t.Errorf("ToolCallContext shows loop id %q, want l", v)
	}
	if got.state != state || !got.validated || got.dispatch != d || got.tenant != "acme" {
		t.Errorf("state %v validated %v dispatch %v tenant %q: want the call's, and the run's tenant", got.state, got.validated, got.dispatch, got.tenant)
	}
	if !cmp.Equal(got.progress, []string{"half way"}) {
		t.Errorf("progress = %v", got.progress)
	}
}

// TestErrorsMapOnceAtTheEnd: the layers see a tool's returned error as an error result
// and a panic as one with code PANIC, logged once; a signal passes as the error; a panic
// in a layer is an error result too.
func TestErrorsMapOnceAtTheEnd(t *testing.T) {
	var seen []tool.Result
	watch := toolcall.Layer{Name: "watch", For: func(tool.Tool) func(toolcall.Handler) toolcall.Handler {
		return func(next toolcall.Handler) toolcall.Handler {
			return func(ctx context.Context, c *toolcall.Call) (tool.Result, error) {
				res, err := next(ctx, c)
				seen = append(seen, res)
				return res, err
			}
		}
	}}
	p := toolcall.Pipeline{watch}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	run := func(fn func(context.Context, string) (tool.Result, error)) (tool.Result, error) {
		return toolcall.Run(t.Context(), log, &toolcall.Call{Tool: p.Wrap(newTool(fn)), Input: "{}"})
	}
	if res, err := run(func(context.Context, string) (tool.Result, error) { return tool.Result{}, errors.New("boom") }); err != nil || res.Render() != "Error: boom" {
		t.Errorf("failing tool = %+v, %v", res, err)
	}
	if res, err := run(func(context.Context, string) (tool.Result, error) { panic("kaputt") }); err != nil || res.Code != tool.CodePanic {
		t.Errorf("panicking tool = %+v, %v", res, err)
	}
	if n := strings.Count(buf.String(), "tool panicked"); n != 1 {
		t.Errorf("%d log lines for one panic, want 1:\n%s", n, buf.String())
	}
	if _, err := run(func(context.Context, string) (tool.Result, error) { return tool.Result{}, tool.Terminate{} }); !errors.As(err, new(tool.Terminate)) {
		t.Errorf("signal = %v, want Terminate", err)
	}
	if len(seen) != 3 || seen[0].Content != "boom" || seen[1].Code != tool.CodePanic {
		t.Errorf("the layer saw %+v, want the error result and the panic's", seen)
	}
	broken := toolcall.Pipeline{{Name: "broken", For: func(tool.Tool) func(toolcall.Handler) toolcall.Handler {
		return func(toolcall.Handler) toolcall.Handler {
			return func(context.Context, *toolcall.Call) (tool.Result, error) { panic("layer") }
		}
	}}}
	res, err := toolcall.Run(t.Context(), nil, &toolcall.Call{Tool: broken.Wrap(newTool(nil)), Input: "{}"})
	if err != nil || res.Code != tool.CodePanic {
		t.Errorf("panicking layer = %+v, %v; want an error result with code PANIC", res, err)
	}
}

// TestOutcomeByCodeNotText: a tool's error whose text reads like an unknown outcome is a
// failure; only a dispatch that reports no answer back makes outcome_unknown. (The
// journal used to match the text.)
func TestOutcomeByCodeNotText(t *testing.T) {
	ctx, d := toolinternal.WithDispatch(t.Context())
	lookalike := tool.ErrorWithCode(tool.CodeUnavailable, "the outcome of tool 'charge' is unknown: the bank said so; its outcome is unknown")
	if got := toolcall.OutcomeOf(ctx, lookalike); got != toolinternal.OutcomeFailed {
		t.Errorf("a tool's own error text = %s, want %s", got, toolinternal.OutcomeFailed)
	}
	d.Unknown = true
	if got := toolcall.OutcomeOf(ctx, tool.ErrorWithCode(tool.CodeFailed, "no answer")); got != toolinternal.OutcomeUnknown {
		t.Errorf("a dispatch without an answer = %s, want %s", got, toolinternal.OutcomeUnknown)
	}
	if got := toolcall.OutcomeOf(ctx, tool.ErrorWithCode(tool.CodeTimeout, "slow")); got != toolinternal.OutcomeTimedOut {
		t.Errorf("a timeout = %s, want %s", got, toolinternal.OutcomeTimedOut)
	}
	if got := toolcall.OutcomeOf(ctx, tool.Text("ok")); got != toolinternal.OutcomeSucceeded {
		t.Errorf("a result = %s", got)
	}
}

// journal is a toolinternal.Journal in memory.
type journal struct {
	outcome    []byte
	done       bool
	dispatched []string
	finished   []string
}

func (j *journal) Recorded(context.Context) ([]byte, bool, bool) {
	return j.outcome, j.done, len(j.dispatched) > 0
}
func (j *journal) Dispatched(_ context.Context, worker string, _ int) error {
	j.dispatched = append(j.dispatched, worker)
	return nil
}
func (j *journal) Finished(_ context.Context, outcome string, data []byte, _ bool) error {
	j.finished = append(j.finished, outcome)
	j.outcome, j.done = data, true
	return nil
}
func (j *journal) Damaged(context.Context, error) {}

// TestJournaled: a call is recorded as dispatched before it leaves and its outcome after;
// a recorded outcome is replayed without sending; a dispatch without an outcome is sent
// again only when idempotent.
func TestJournaled(t *testing.T) {
	sends := 0
	d := toolcall.Dispatcher{Worker: "w1", Send: func(ctx context.Context) (tool.Result, []byte) {
		sends++
		toolinternal.DispatchFrom(ctx).Unknown = true
		return tool.ErrorWithCode(tool.CodeFailed, "no answer"), nil
	}}
	j := &journal{}
	ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, j)
	res, sent := toolcall.Journaled(ctx, "charge", false, d)
	if !sent || sends != 1 || res.Content != "no answer" {
		t.Fatalf("first call = %+v, sent %v, %d sends", res, sent, sends)
	}
	if !cmp.Equal(j.dispatched, []string{"w1"}) || !cmp.Equal(j.finished, []string{toolinternal.OutcomeUnknown}) {
		t.Errorf("journal: dispatched %v finished %v", j.dispatched, j.finished)
	}
	res, sent = toolcall.Journaled(ctx, "charge", false, d)
	if !sent || sends != 1 || res.Content != "no answer" {
		t.Errorf("replayed call = %+v, sent %v, %d sends: want the recorded outcome, not sent", res, sent, sends)
	}
	j2 := &journal{dispatched: []string{"w1"}}
	res, sent = toolcall.Journaled(context.WithValue(t.Context(), toolinternal.JournalKey{}, j2), "charge", false, d)
	if sent || sends != 1 || !strings.Contains(res.Content, "outcome of tool 'charge' is unknown") {
		t.Errorf("dispatched, not idempotent = %+v, sent %v, %d sends: want outcome_unknown, not sent", res, sent, sends)
	}
	j3 := &journal{dispatched: []string{"w1"}}
	if _, sent = toolcall.Journaled(context.WithValue(t.Context(), toolinternal.JournalKey{}, j3), "add", true, d); !sent || sends != 2 {
		t.Errorf("dispatched, idempotent: sent %v, %d sends; want it sent again", sent, sends)
	}
}

// TestNotSentTexts pins what a call the journal refused to dispatch, its context having
// ended first, reads: the run's deadline, or any other cancellation; other failures of
// the journal read as such.
func TestNotSentTexts(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code tool.ErrorCode
		want string
	}{
		{fmt.Errorf("%w: %w", toolinternal.ErrNotSent, context.DeadlineExceeded), tool.CodeTimeout, "tool 'wipe' was not sent: the run's deadline passed"},
		{fmt.Errorf("%w: %w", toolinternal.ErrNotSent, context.Canceled), tool.CodeUnavailable, "tool 'wipe' was not sent: it was cancelled before it left"},
		{errors.New("disk full"), tool.CodeUnavailable, "tool 'wipe' was not run: the run's journal failed: disk full"},
	} {
		if res := toolcall.JournalFailed("wipe", tc.err); res.Content != tc.want || res.Code != tc.code {
			t.Errorf("JournalFailed(%v) = %q (%s), want %q (%s)", tc.err, res.Content, res.Code, tc.want, tc.code)
		}
	}
}
