package router

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// runContext is the context of a call made in a run: the run's blackboard and a
// progress channel that records the reports.
func runContext(ctx context.Context, p *process.Process, reports *[]string, mu *sync.Mutex) context.Context {
	ctx = toolcall.WithBlackboard(ctx, p.Board(process.Origin{Tool: "t"}))
	return toolcall.WithProgress(ctx, func(s string) {
		mu.Lock()
		defer mu.Unlock()
		*reports = append(*reports, s)
	})
}

// TestBlackboardAcrossTheWire: a tool that needs a type receives the newest entry of it,
// and what it binds joins the run's blackboard, through a real worker.
func TestBlackboardAcrossTheWire(t *testing.T) {
	ctx := testContext(t)
	reader := tool.New("reader", "reads the customer", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		b := tool.BlackboardFrom(ctx)
		e, ok := b.Last("Customer")
		if !ok {
			return tool.Text("none"), nil
		}
		if len(b.Entries()) != 1 {
			return tool.Error("the call saw more than it needs"), nil
		}
		next, _ := tool.NewEntry("crm.Note", map[string]string{"about": string(e.JSON)})
		if err := b.Bind("note", next); err != nil {
			return tool.Result{}, err
		}
		return tool.Text("read " + string(e.JSON)), nil
	}, tool.NeedsBlackboard("Customer"))
	w := startSDK(t, "w1", reader)
	r := newRouter(t, Options{})
	mustRegister(t, r, sdkRegistration(w, reader))

	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	for _, id := range []string{"1", "2"} {
		if err := p.Add(process.Origin{}, "", tool.Entry{TypeName: "crm.Customer", JSON: []byte(`{"id":` + id + `}`)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Add(process.Origin{}, "", tool.Entry{TypeName: "Other", JSON: []byte(`0`)})
	var mu sync.Mutex
	var reports []string
	res, _ := call(runContext(ctx, p, &reports, &mu), t, r, "reader", `{}`)
	if res.Content != `read {"id":2}` {
		t.Fatalf("result %+v", res)
	}
	st := p.Snapshot().Blackboard
	if e, ok := st.Get("note"); !ok || e.TypeName != "crm.Note" || string(e.JSON) != `{"about":"{\"id\":2}"}` {
		t.Errorf("note %+v %v", e, ok)
	}
}

// TestSignalsAcrossTheWire: replan (with its blackboard objects) and terminate raised on
// a worker come back as the same signals, not as error text.
func TestSignalsAcrossTheWire(t *testing.T) {
	ctx := testContext(t)
	hold := tool.Binding{Name: "hold", Entry: tool.Entry{TypeName: "Hold", JSON: []byte(`{"why":"blocked"}`)}}
	replan := tool.New("replanner", "replans", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, tool.ReplanRequested{Reason: "blocked", Add: []tool.Binding{hold}}
	})
	stop := tool.New("stopper", "stops", schema.Empty(), func(context.Context, string) (tool.Result, error) {
		return tool.Result{}, tool.Terminate{Scope: tool.TerminateAction, Reason: "enough"}
	})
	w := startSDK(t, "w1", replan, stop)
	r := newRouter(t, Options{})
	mustRegister(t, r, sdkRegistration(w, replan, stop))
	for name, want := range map[string]error{
		"replanner": tool.ReplanRequested{Reason: "blocked", Add: []tool.Binding{hold}},
		"stopper":   tool.Terminate{Scope: tool.TerminateAction, Reason: "enough"},
	} {
		tl, err := r.Tool(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tl.Call(ctx, `{}`)
		sig, ok := tool.AsSignal(err)
		if !ok {
			t.Fatalf("%s: error %v, want a signal", name, err)
		}
		if diff := cmp.Diff(want, sig); diff != "" {
			t.Errorf("%s signal (-want +got):\n%s", name, diff)
		}
	}
}

// TestProgressAcrossTheWire: a tool that reports progress is called on the stream, its
// reports arrive in order before the result, and a tool that does not declare progress
// keeps the unary call.
func TestProgressAcrossTheWire(t *testing.T) {
	ctx := testContext(t)
	slow := tool.New("slow", "reports", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		for _, s := range []string{"one", "two", strings.Repeat("x", 2000)} {
			tool.Progress(ctx, s)
		}
		return tool.Text("done"), nil
	}, tool.ReportsProgress())
	quiet := tool.New("quiet", "does not declare", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		tool.Progress(ctx, "dropped")
		return tool.Text("done"), nil
	})
	w := startSDK(t, "w1", slow, quiet)
	r := newRouter(t, Options{})
	mustRegister(t, r, sdkRegistration(w, slow, quiet))
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	var mu sync.Mutex
	var reports []string
	rctx := runContext(ctx, p, &reports, &mu)
	if res, _ := call(rctx, t, r, "slow", `{}`); res.Content != "done" {
		t.Fatalf("slow: %+v", res)
	}
	if res, _ := call(rctx, t, r, "quiet", `{}`); res.Content != "done" {
		t.Fatalf("quiet: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 3 || reports[0] != "one" || reports[1] != "two" || len(reports[2]) > 1024 {
		t.Errorf("reports %q", reports)
	}
}

// TestProgressFloodIsBounded: a tool that reports without end reaches the client with the
// first MaxProgressReports reports only, and its result still arrives.
func TestProgressFloodIsBounded(t *testing.T) {
	ctx := testContext(t)
	flood := tool.New("flood", "reports a lot", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		for i := 0; i < wire.MaxProgressReports+500; i++ {
			tool.Progress(ctx, "again")
		}
		return tool.Text("done"), nil
	}, tool.ReportsProgress())
	w := startSDK(t, "w1", flood)
	r := newRouter(t, Options{})
	mustRegister(t, r, sdkRegistration(w, flood))
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	var mu sync.Mutex
	var reports []string
	if res, _ := call(runContext(ctx, p, &reports, &mu), t, r, "flood", `{}`); res.Content != "done" {
		t.Fatalf("result %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != wire.MaxProgressReports {
		t.Errorf("%d reports reached the client, want %d", len(reports), wire.MaxProgressReports)
	}
}

// TestBadBlackboardUpdate: a worker (not built on pkg/worker) that sends an object that
// is not JSON gets the call answered with an error the model reads; nothing is added.
func TestBadBlackboardUpdate(t *testing.T) {
	ctx := testContext(t)
	f := startFake(t, func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		resp := textResponse("bound")
		resp.BlackboardUpdates = []*toolpb.BlackboardObject{
			{TypeName: "Good", Json: `{"ok":true}`},
			{TypeName: "Customer", Json: `{not json`},
		}
		return resp, nil
	})
	r := newRouter(t, Options{})
	mustRegister(t, r, registration("fake", f.addr, "crm", echoTool("bind")))
	p := process.New("run", process.Limits{}, process.Bounds{}, nil)
	var mu sync.Mutex
	var reports []string
	res, _ := call(runContext(ctx, p, &reports, &mu), t, r, "bind", `{}`)
	if !res.IsError() || res.Content != `tool 'bind' ran, but blackboard object 2 of 2 was refused: blackboard object of type "Customer": the value is not valid JSON. Its result was: bound` {
		t.Errorf("result %+v", res)
	}
	if n := len(p.Snapshot().Blackboard.Entries); n != 1 {
		t.Errorf("%d entries, want only the valid first one", n)
	}
	// Outside a run the updates have nowhere to go, and the result stands.
	if res, _ := call(ctx, t, r, "bind", `{}`); res.IsError() {
		t.Errorf("outside a run: %+v", res)
	}
}

// noResultWorker answers InvokeStream with one progress report and no result.
type noResultWorker struct{ fakeWorker }

func (w *noResultWorker) InvokeStream(_ *toolpb.InvokeStreamRequest, s toolpb.ToolWorkerService_InvokeStreamServer) error {
	w.calls.Add(1)
	return s.Send(&toolpb.InvokeStreamResponse{Message: &toolpb.InvokeStreamResponse_Progress{Progress: &toolpb.ProgressReport{Status: "started"}}})
}

// TestStreamWithoutResult: a worker that ends a progress call's stream without a result
// has broken the protocol after starting the call: the outcome is unknown, the call is not
// re-sent (even for an idempotent tool), and the worker is not counted as failing.
func TestStreamWithoutResult(t *testing.T) {
	ctx := testContext(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &noResultWorker{fakeWorker{addr: lis.Addr().String(), srv: grpc.NewServer()}}
	toolpb.RegisterToolWorkerServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.srv.Stop)
	r := newRouter(t, Options{EjectAfter: 1})
	def := echoTool("report", tool.ReportsProgress(), tool.Idempotent())
	mustRegister(t, r, registration("w1", f.addr, "crm", def))
	for range 3 {
		res, d := call(ctx, t, r, "report", `{}`)
		if !res.IsError() || res.Content != "worker w1 ended tool 'report' without a result; its outcome is unknown" || d.Attempts != 1 {
			t.Fatalf("result %+v after %d attempts", res, d.Attempts)
		}
	}
	if f.calls.Load() != 3 {
		t.Errorf("the worker got %d calls, want 3 (one each, no re-send)", f.calls.Load())
	}
	if w := workerOf(t, r, "w1"); !w.routable(r.now()) {
		t.Error("the worker was ejected")
	}
}
