package run

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// extendedService is a run service with the program's own layers and groups.
func extendedService(t *testing.T, opts Options) (*Service, error) {
	t.Helper()
	model, err := scripted.New(scripted.Script{Name: "s", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	opts.DefaultProvider, opts.Logger = "scripted", log
	if opts.Router == nil {
		opts.Router = router.New(router.Options{Logger: log})
	}
	if opts.Providers == nil {
		opts.Providers = map[string]llm.Provider{"scripted": model}
	}
	if opts.Config.Loop.MaxIterations == 0 {
		opts.Config = config.Default()
	}
	return New(opts)
}

func layer(name string) toolcall.Layer {
	return toolcall.Layer{Name: name, For: func(tool.Tool) func(toolcall.Handler) toolcall.Handler { return nil }}
}

// TestProgramLayersTakeTheirPlace: a program's layers go right after the built-in layer
// they name (after the events layer when they name none), in the order given.
func TestProgramLayersTakeTheirPlace(t *testing.T) {
	s, err := extendedService(t, Options{Layers: []Placed{
		{Layer: layer("audit")}, {After: LayerGrant, Layer: layer("org-policy")}, {Layer: layer("redact")}, {After: LayerGrant, Layer: layer("quota")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := s.pipeline("", Caller{}, config.Tenant{}, false, false, s.chain).Names()
	want := []string{LayerGrant, "org-policy", "quota", LayerPolicy, LayerApproval, "binding", "receiver", decorators.LayerTelemetry, decorators.LayerEvents,
		"audit", "redact", decorators.LayerOneShot, decorators.LayerAssets, decorators.LayerSinks, decorators.LayerReplan, decorators.LayerBound}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pipeline (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(BuiltinLayers(), (&Service{}).pipeline("", Caller{}, config.Tenant{}, false, false, &decorators.Chain{}).Names()); diff != "" {
		t.Errorf("BuiltinLayers: %s", diff)
	}
}

func TestExtensionsRefusedAtStart(t *testing.T) {
	noop := func(context.Context, string) (tool.Result, error) { return tool.Text("ok"), nil }
	plain := tool.New("plain", "Plain.", schema.Empty(), noop)
	facade := tool.Of("box", "A box.", []tool.Tool{tool.New("inside", "Inside.", schema.Empty(), noop)})
	mcpCfg := config.Default()
	mcpCfg.MCPServers = map[string]config.MCPServer{"s": {URL: "http://127.0.0.1:1/"}}
	mcpCfg.Groups = map[string]config.Group{"remote": {MCP: &config.GroupMCP{Server: "s"}}}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown place", Options{Layers: []Placed{{After: "nowhere", Layer: layer("x")}}}, `After names no built-in layer: "nowhere"`},
		{"a built-in name", Options{Layers: []Placed{{Layer: layer(LayerApproval)}}}, `the name "approval" is taken`},
		{"the same name twice", Options{Layers: []Placed{{Layer: layer("x")}, {Layer: layer("x")}}}, `the name "x" is taken`},
		{"no For", Options{Layers: []Placed{{Layer: toolcall.Layer{Name: "x"}}}}, "needs a name and For"},
		{"a built-in role", Options{Groups: map[string]Group{"blackboard": {Tools: []tool.Tool{plain}}}}, "built-in groups"},
		{"a bad role", Options{Groups: map[string]Group{"no role!": {Tools: []tool.Tool{plain}}}}, "a role is 1 to 64"},
		{"no tools", Options{Groups: map[string]Group{"g": {}}}, "has no tools"},
		{"a facade", Options{Groups: map[string]Group{"g": {Tools: []tool.Tool{facade}}}}, "is a facade"},
		{"a tool in two groups", Options{Groups: map[string]Group{"a": {Tools: []tool.Tool{plain}}, "b": {Tools: []tool.Tool{plain}}}}, `both have a tool "plain"`},
		{"an MCP group's role", Options{Config: mcpCfg, Groups: map[string]Group{"remote": {Tools: []tool.Tool{plain}}}}, "groups.remote makes the role"},
	}
	for _, tt := range tests {
		if _, err := extendedService(t, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// callJournal is one call's toolinternal.Journal, in memory.
type callJournal struct {
	outcome    []byte
	done       bool
	dispatched []string
	finished   []string
}

func (j *callJournal) Recorded(context.Context) ([]byte, bool, bool) {
	return j.outcome, j.done, len(j.dispatched) > 0
}
func (j *callJournal) Dispatched(_ context.Context, worker string, _ int) error {
	j.dispatched = append(j.dispatched, worker)
	return nil
}
func (j *callJournal) Finished(_ context.Context, outcome string, data []byte, _ bool) error {
	j.finished = append(j.finished, outcome)
	j.outcome, j.done = data, true
	return nil
}
func (j *callJournal) Damaged(context.Context, error) {}

// A callJournal whose methods drift from the interface would silently stop being a
// journal (the tool finds none in its context).
var _ toolinternal.Journal = (*callJournal)(nil)

// TestInProcessGroupIsJournaled: a call of an in-process group's tool is recorded as
// dispatched before it runs and its outcome after; after a crash its recorded outcome is
// replayed without running it again, and one in flight runs again only when the tool is
// idempotent.
func TestInProcessGroupIsJournaled(t *testing.T) {
	runs := 0
	charge := tool.New("charge", "Charges.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		runs++
		return tool.Text("charged"), nil
	})
	s, err := extendedService(t, Options{Groups: map[string]Group{"billing": {Description: "Billing", Tools: []tool.Tool{charge}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts, _, _, err := s.served(t.Context(), "billing")
	if err != nil || len(ts) != 1 {
		t.Fatal(ts, err)
	}
	local := ts[0]
	if role, ok := groupOf(local); !ok || role != "billing" {
		t.Errorf("groupOf = %q, %v: an in-process tool belongs to its group", role, ok)
	}
	j := &callJournal{}
	ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, j)
	if res, err := local.Call(ctx, `{}`); err != nil || res.Content != "charged" || runs != 1 {
		t.Fatalf("first call = %+v, %v, %d runs", res, err, runs)
	}
	if !cmp.Equal(j.dispatched, []string{inProcessWorker}) || !cmp.Equal(j.finished, []string{toolinternal.OutcomeSucceeded}) {
		t.Errorf("journal: dispatched %v finished %v", j.dispatched, j.finished)
	}
	if res, _ := local.Call(ctx, `{}`); res.Content != "charged" || runs != 1 {
		t.Errorf("replayed call = %+v, %d runs: want the recorded outcome, not run", res, runs)
	}
	inFlight := &callJournal{dispatched: []string{inProcessWorker}}
	if res, _ := local.Call(context.WithValue(t.Context(), toolinternal.JournalKey{}, inFlight), `{}`); runs != 1 || !strings.Contains(res.Content, "outcome of tool 'charge' is unknown") {
		t.Errorf("in flight, not idempotent = %+v, %d runs: want outcome unknown, not run", res, runs)
	}

	panics := tool.New("boom", "Panics.", schema.Empty(), func(context.Context, string) (tool.Result, error) { panic("boom") }, tool.Idempotent())
	s, err = extendedService(t, Options{Groups: map[string]Group{"g": {Tools: []tool.Tool{panics}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts, _, _, _ = s.served(t.Context(), "g")
	j = &callJournal{dispatched: []string{inProcessWorker}}
	res, err := ts[0].Call(context.WithValue(t.Context(), toolinternal.JournalKey{}, j), `{}`)
	if err != nil || !res.IsError() || res.Code != tool.CodePanic || !cmp.Equal(j.finished, []string{toolinternal.OutcomeFailed}) {
		t.Errorf("a panic in flight, idempotent: %+v, %v, journal %v; want it run again, its panic an error result, journaled failed", res, err, j.finished)
	}
}

// escalate is a signal of a type of a program's own: a run fails on it.
type escalate struct{ To string }

func (e escalate) Error() string { return "escalated to " + e.To }
func (escalate) ToolSignal()     {}

// TestInProcessSignalReplays: a call of an in-process tool that ended with a control
// signal is answered from the journal with that signal after a crash, as a worker's is:
// a resumed run ends as it would have, instead of reading an empty result. A signal of
// the program's own type replays as a signal with its text (it was dropped, and the
// resumed run went on).
func TestInProcessSignalReplays(t *testing.T) {
	entry, err := tool.NewEntry("crm.Hold", map[string]any{"id": 7})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, sig := range []tool.Signal{
		tool.ReplanRequested{Reason: "the customer is blocked", Add: []tool.Binding{{Name: "hold", Entry: entry}}},
		tool.Terminate{Scope: tool.TerminateAgent, Reason: "a person takes over"},
		escalate{To: "billing"},
	} {
		check := tool.New("check", "Checks.", schema.Empty(), func(context.Context, string) (tool.Result, error) {
			runs++
			return tool.Result{}, sig
		})
		s, err := extendedService(t, Options{Groups: map[string]Group{"crm": {Tools: []tool.Tool{check}}}})
		if err != nil {
			t.Fatal(err)
		}
		ts, _, _, _ := s.served(t.Context(), "crm")
		j := &callJournal{}
		ctx := context.WithValue(t.Context(), toolinternal.JournalKey{}, j)
		before := runs
		_, first := ts[0].Call(ctx, `{}`)
		_, replayed := ts[0].Call(ctx, `{}`)
		if runs != before+1 {
			t.Errorf("%T: the tool ran %d times, want once", sig, runs-before)
		}
		if _, own := sig.(escalate); own {
			if _, ok := tool.AsSignal(replayed); !cmp.Equal(first, sig) || !ok || replayed.Error() != sig.Error() {
				t.Errorf("%T: first call %#v, replayed %#v; want the signal, then a signal with its text", sig, first, replayed)
			}
			continue
		}
		if !cmp.Equal(first, sig) || !cmp.Equal(replayed, sig) {
			t.Errorf("%T: first call %#v, replayed %#v; want the signal both times", sig, first, replayed)
		}
	}
}

// TestWorkerCannotShadowAnInProcessTool: a run that names an in-process tool gets it,
// and its grant is checked against the in-process group, whatever a worker registered
// under the same name.
func TestWorkerCannotShadowAnInProcessTool(t *testing.T) {
	local := tool.New("lookup", "Looks up, in process.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("local"), nil })
	rt := router.New(router.Options{Logger: slog.New(slog.DiscardHandler),
		Dial: func(addr string) (*grpc.ClientConn, error) {
			return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		},
		Probe: func(context.Context, *grpc.ClientConn) error { return nil }})
	defer rt.Close()
	s, err := extendedService(t, Options{Router: rt, Groups: map[string]Group{"crm": {Tools: []tool.Tool{local}}}})
	if err != nil {
		t.Fatal(err)
	}
	shadow := tool.New("lookup", "Looks up, on a worker.", schema.Empty(), func(context.Context, string) (tool.Result, error) { return tool.Text("worker"), nil })
	w, err := worker.New(worker.Options{Orchestrator: "unused:1"}, worker.Group{Role: "shadow", Description: "Shadow.", Tools: []tool.Tool{shadow}})
	if err != nil {
		t.Fatal(err)
	}
	reg := w.Registration()
	reg.WorkerId, reg.Address = "w1", "127.0.0.1:1"
	if _, _, err := rt.Register(reg); err != nil {
		t.Fatal(err)
	}
	got, err := s.namedTool("lookup")
	if role, _ := groupOf(got); err != nil || role != "crm" {
		t.Errorf("namedTool(lookup) = group %q, %v; want the in-process group's", role, err)
	}
	if role, ok := s.groupOfName("lookup"); !ok || role != "crm" {
		t.Errorf("groupOfName(lookup) = %q, %v; want crm", role, ok)
	}
}
