package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// testTimeout bounds every blocking step of a test.
const testTimeout = 10 * time.Second

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newRouter returns a router that is closed when the test ends.
func newRouter(t testing.TB, opts Options) *Router {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	if opts.Probe == nil {
		// Most tests register addresses nothing listens on; the probe has tests of its own.
		opts.Probe = noProbe
	}
	r := New(opts)
	t.Cleanup(r.Close)
	return r
}

func noProbe(context.Context, *grpc.ClientConn) error { return nil }

// echoTool is a tool definition for registrations; its implementation never runs in
// the router's process.
func echoTool(name string, opts ...tool.Option) tool.Tool {
	return tool.New(name, "Echoes its input.", schema.Params(schema.String("text", "what to echo").AsOptional()),
		func(context.Context, string) (tool.Result, error) { return tool.Text("unused"), nil }, opts...)
}

func registered(t tool.Tool) *toolpb.RegisteredTool {
	def, meta := t.Definition(), t.Metadata()
	return &toolpb.RegisteredTool{Definition: wire.DefinitionToProto(def, meta), ContentHash: wire.Hash(def, meta)}
}

// registration builds a valid registration of one group.
func registration(id, addr, role string, tools ...tool.Tool) *toolpb.Registration {
	gr := &toolpb.GroupRegistration{Group: &toolpb.ToolGroupInfo{Role: role, Description: role + " tools"}}
	for _, t := range tools {
		gr.Tools = append(gr.Tools, registered(t))
	}
	return &toolpb.Registration{WorkerId: id, Address: addr, Groups: []*toolpb.GroupRegistration{gr}}
}

func mustRegister(t testing.TB, r *Router, reg *toolpb.Registration) *Lease {
	t.Helper()
	l, rej, err := r.Register(reg)
	if err != nil {
		t.Fatalf("Register(%s): %v (rejections %v)", reg.GetWorkerId(), err, rej)
	}
	return l
}

// fakeWorker is a ToolWorkerService on loopback whose behaviour each test supplies.
type fakeWorker struct {
	toolpb.UnimplementedToolWorkerServiceServer
	addr   string
	srv    *grpc.Server
	calls  atomic.Int32
	handle func(ctx context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error)
	// health is its health service, SERVING until a test says otherwise.
	health *health.Server
}

func (f *fakeWorker) Invoke(ctx context.Context, req *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	f.calls.Add(1)
	return f.handle(ctx, req)
}

func textResponse(s string) *toolpb.InvokeResponse {
	return &toolpb.InvokeResponse{Outcome: &toolpb.InvokeResponse_Text{Text: s}}
}

// answering returns a handler that answers with text.
func answering(s string) func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
	return func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		return textResponse(s), nil
	}
}

func startFake(t *testing.T, handle func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error)) *fakeWorker {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveFake(t, lis, lis.Addr().String(), handle)
}

// startMemoryFake is startFake on memory (grpc's bufconn) instead of loopback, for a
// test in a synctest bubble, where a goroutine waiting on a socket would never be idle.
// The router reaches it at its address through dial (Options.Dial).
func startMemoryFake(t *testing.T, handle func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error)) (f *fakeWorker, dial func(address string) (*grpc.ClientConn, error)) {
	t.Helper()
	lis := bufconn.Listen(64 << 10)
	f = serveFake(t, lis, "worker.memory:7000", handle)
	dial = func(address string) (*grpc.ClientConn, error) {
		if address != f.addr {
			return nil, fmt.Errorf("no worker listens at %s in memory", address)
		}
		return grpc.NewClient("passthrough:///"+address, append(DialOptions(),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))...)
	}
	return f, dial
}

// serveFake serves a fakeWorker, with a health service that reports it SERVING, on lis
// until the test ends.
func serveFake(t *testing.T, lis net.Listener, addr string, handle func(context.Context, *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error)) *fakeWorker {
	f := &fakeWorker{addr: addr, srv: grpc.NewServer(), handle: handle}
	toolpb.RegisterToolWorkerServiceServer(f.srv, f)
	f.health = health.NewServer()
	f.health.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(f.srv, f.health)
	done := make(chan struct{})
	go func() { defer close(done); _ = f.srv.Serve(lis) }()
	t.Cleanup(func() { f.srv.Stop(); <-done })
	return f
}

// deadAddress is a loopback address nothing listens on: connections are refused.
func deadAddress(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// call calls a tool through the router and returns the result and where it went.
func call(ctx context.Context, t *testing.T, r *Router, name, input string) (tool.Result, toolinternal.Dispatch) {
	t.Helper()
	tl, err := r.Tool(name)
	if err != nil {
		t.Fatalf("Tool(%q): %v", name, err)
	}
	ctx, d := toolinternal.WithDispatch(ctx)
	res, err := tl.Call(ctx, input)
	if err != nil {
		t.Fatalf("Call: unexpected error %v", err)
	}
	return res, *d
}

// workerOf returns the registered worker with the given id.
func workerOf(t *testing.T, r *Router, id string) *worker {
	t.Helper()
	r.mu.RLock()
	defer r.mu.RUnlock()
	w, ok := r.workers[id]
	if !ok {
		t.Fatalf("worker %q is not registered", id)
	}
	return w
}

// eventually polls cond until it holds, failing the test after testTimeout.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// gate is a one-shot signal.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
