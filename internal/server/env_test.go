package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/examplegroups"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/llm/scripted"
	"github.com/toolmesh/toolmesh/internal/logtest"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/internal/run"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every test; nothing here should come close to it.
const testTimeout = 20 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// env is an orchestrator under test, serving on loopback, with a raw gRPC client and a
// pkg/client over the same connection.
type env struct {
	t     *testing.T
	cfg   config.Config
	srv   *Server
	rt    *router.Router
	g     *grpc.Server
	addr  string
	conn  *grpc.ClientConn
	orch  toolpb.OrchestratorServiceClient
	reg   toolpb.ToolRegistryServiceClient
	cl    *client.Client
	model *scripted.Provider
	// calls observes the streaming calls the server handles.
	calls *streamCalls
}

type envOptions struct {
	script scripted.Script
	// configure adjusts the default config.
	configure func(*config.Config)
	// logs, when set, receives the server's logs as JSON lines.
	logs io.Writer
	// tel, when set, records the server's telemetry.
	tel *telemetry.Telemetry
	// provider, when set, is a second provider, the default one.
	provider llm.Provider
	// sinks are the program's artifact sinks (Options.Sinks).
	sinks map[string]decorators.Sink
	// journal, when set, is the run journal (Options.Journal, owner "test").
	journal runlog.Store
	// groups are the program's in-process tool groups (Options.Groups).
	groups map[string]run.Group
}

// echoScript answers every turn with a fixed text.
func echoScript() scripted.Script {
	return scripted.Script{Name: "echo", Rules: []scripted.Rule{{Reply: scripted.Reply{Text: "hello"}}}}
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.script.Name == "" {
		o.script = echoScript()
	}
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	if o.configure != nil {
		o.configure(&cfg)
	}
	model, err := scripted.New(o.script)
	if err != nil {
		t.Fatal(err)
	}
	rt := router.New(router.Options{GracePeriod: cfg.Registry.GracePeriod.D(), Logger: discard(), Probe: probeUnlessFake})
	log := discard()
	if o.logs != nil {
		log = slog.New(slog.NewJSONHandler(o.logs, nil))
	}
	opts := compose.Options{Router: rt, Provider: model, Config: cfg, Logger: log, Telemetry: o.tel, Sinks: o.sinks, Journal: o.journal, Owner: "test", Groups: o.groups}
	if o.provider != nil {
		opts.Providers = map[string]llm.Provider{"scripted": model, o.provider.Name(): o.provider}
		opts.DefaultProvider = o.provider.Name()
	}
	srv, err := newServer(opts)
	if err != nil {
		rt.Close()
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rt.Close()
		t.Fatal(err)
	}
	calls := newStreamCalls()
	serverOpts := PortOptions(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	// Last, so innermost: it sees the stream the handler reads its request from, within
	// the receive budget, and the handler's return.
	g := grpc.NewServer(append(serverOpts, grpc.ChainStreamInterceptor(calls.intercept))...)
	srv.Register(g)
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		t: t, cfg: cfg, srv: srv, rt: rt, g: g, addr: lis.Addr().String(), conn: conn,
		orch: toolpb.NewOrchestratorServiceClient(conn), reg: toolpb.NewToolRegistryServiceClient(conn),
		cl: client.New(conn), model: model, calls: calls,
	}
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		g.Stop()
		<-served
		rt.Close()
	})
	return e
}

// startWorker runs a pkg/worker on loopback that registers with the env, and waits until
// the orchestrator routes to it.
func (e *env) startWorker(id string, groups ...worker.Group) *worker.Worker {
	e.t.Helper()
	// The worker logs this once the orchestrator accepted its registration, after the
	// router took it in (the acknowledgement follows Router.Register).
	registered := logtest.NewSignal("registered with orchestrator")
	w, err := worker.New(worker.Options{
		ID: id, Orchestrator: e.addr, Logger: slog.New(registered),
		DrainTimeout: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}, groups...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("worker %s: Run: %v", id, err)
			}
		case <-time.After(10 * time.Second):
			e.t.Errorf("worker %s did not stop", id)
		}
	})
	select {
	case <-registered.Logged:
	case <-time.After(10 * time.Second):
		e.t.Fatalf("timed out waiting for worker %s ready", id)
	}
	ready := false
	for _, ws := range e.rt.ListWorkers() {
		if ws.GetWorkerId() == id && ws.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
			ready = true
		}
	}
	if !ready {
		e.t.Fatalf("worker %s is registered, but the orchestrator does not list it ready: %v", id, e.rt.ListWorkers())
	}
	return w
}

// streamCalls observes the streaming calls a server handles, by method: each call's
// first read of a message, which the handler does within the receive budget (so the
// budget admitted it), and each handler's return (the call's status follows it). A test
// waits on these rather than for a while.
type streamCalls struct {
	mu       sync.Mutex
	admitted map[string]int
	ended    map[string]int
	changed  chan struct{} // closed, and replaced, at every change
}

func newStreamCalls() *streamCalls {
	return &streamCalls{admitted: map[string]int{}, ended: map[string]int{}, changed: make(chan struct{})}
}

func (c *streamCalls) note(counts map[string]int, method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts[method]++
	close(c.changed)
	c.changed = make(chan struct{})
}

// intercept is the server's innermost stream interceptor.
func (c *streamCalls) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	defer c.note(c.ended, info.FullMethod)
	return h(srv, &observedStream{ServerStream: ss, first: func() { c.note(c.admitted, info.FullMethod) }})
}

// observedStream reports its first RecvMsg: the server reads a request through it.
type observedStream struct {
	grpc.ServerStream
	first func()
}

func (s *observedStream) RecvMsg(m any) error {
	if f := s.first; f != nil {
		s.first = nil
		f()
	}
	return s.ServerStream.RecvMsg(m)
}

// waitAdmitted waits until n calls of method have had their request read begin within
// the receive budget.
func (c *streamCalls) waitAdmitted(t *testing.T, method string, n int) {
	t.Helper()
	c.wait(t, c.admitted, "admitted", method, n)
}

// waitEnded waits until n handlers of method have returned.
func (c *streamCalls) waitEnded(t *testing.T, method string, n int) {
	t.Helper()
	c.wait(t, c.ended, "ended", method, n)
}

func (c *streamCalls) wait(t *testing.T, counts map[string]int, what, method string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got, changed := counts[method], c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %d %s calls %s (%d so far)", n, method, what, got)
		}
	}
}

// fakeAddress is the address of registrations made by hand, which nothing serves: the
// router dials lazily, and probeUnlessFake does not probe it.
const fakeAddress = "127.0.0.1:1"

// probeUnlessFake probes every address but fakeAddress as the orchestrator does.
func probeUnlessFake(ctx context.Context, conn *grpc.ClientConn) error {
	if conn.Target() == fakeAddress {
		return nil
	}
	return router.HealthProbe(ctx, conn)
}

// registration builds a valid registration of the given groups for a worker that
// serves on fakeAddress.
func registration(id string, groups ...worker.Group) *toolpb.Registration {
	grs, err := groupRegistrations(groups...)
	if err != nil {
		panic(err)
	}
	return &toolpb.Registration{WorkerId: id, Address: fakeAddress, Groups: grs}
}

// registerRaw opens a registration stream, registers, and checks the ack. The stream
// stays open until the test ends (or the caller cancels it).
func (e *env) registerRaw(ctx context.Context, reg *toolpb.Registration) (toolpb.ToolRegistryService_ConnectClient, context.CancelFunc) {
	e.t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	e.t.Cleanup(cancel)
	stream, err := e.reg.Connect(sctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := stream.Send(&toolpb.ConnectRequest{Message: &toolpb.ConnectRequest_Register{Register: reg}}); err != nil {
		e.t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		e.t.Fatalf("registration of %s: %v", reg.GetWorkerId(), err)
	}
	if !resp.GetAck().GetAccepted() {
		e.t.Fatalf("registration of %s refused: %v", reg.GetWorkerId(), resp.GetAck().GetRejections())
	}
	return stream, cancel
}

// collect drains a Run or WatchRun stream: its events and the error it ended with (nil on
// OK).
func collect(stream interface {
	Recv() (*toolpb.RunResponse, error)
}) ([]*toolpb.RunResponse, error) {
	var evs []*toolpb.RunResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// flatMath is the math group with its ten operations offered directly instead of behind
// the math facade, for tests that call them by name.
func flatMath() worker.Group {
	g := examplegroups.Math()
	g.Facades, g.Tools = nil, examplegroups.MathOperations()
	return g
}

// groupRegistrations is what a worker serving groups registers.
func groupRegistrations(groups ...worker.Group) ([]*toolpb.GroupRegistration, error) {
	w, err := worker.New(worker.Options{Orchestrator: "unused:1"}, groups...)
	if err != nil {
		return nil, err
	}
	return w.Registration().GetGroups(), nil
}

// newServer builds a Server as the orchestrator does: the run service from o, with the
// API's codec, and the server over it.
func newServer(o compose.Options) (*Server, error) {
	o.Codec = RunCodec()
	runs, err := compose.Runs(o)
	if err != nil {
		return nil, err
	}
	return New(Options{Router: o.Router, Runs: runs, Config: &o.Config, Logger: o.Logger, Journal: o.Journal, Owner: o.Owner})
}
