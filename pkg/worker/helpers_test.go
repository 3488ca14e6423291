package worker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/wire"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

const testTimeout = 10 * time.Second

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
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

// deadAddress is a loopback address nothing listens on.
func deadAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// running is a worker whose Run goroutine the test owns.
type running struct {
	*Worker
	stop context.CancelFunc
	done chan error
	conn *grpc.ClientConn
}

func (r *running) client() toolpb.ToolWorkerServiceClient {
	return toolpb.NewToolWorkerServiceClient(r.conn)
}
func (r *running) health() healthpb.HealthClient { return healthpb.NewHealthClient(r.conn) }

// wait returns Run's result, failing the test if Run does not return in time.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(testTimeout):
		t.Fatal("Run did not return")
		return nil
	}
}

// start runs a worker until the test ends. Without an orchestrator address it points at
// one that refuses connections.
func start(t *testing.T, opts Options, groups ...Group) *running {
	t.Helper()
	if opts.Orchestrator == "" {
		opts.Orchestrator = deadAddress(t)
	}
	if opts.Logger == nil {
		opts.Logger = discard()
	}
	w, err := New(opts, groups...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Worker: w, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = r.wait(t)
	})
	actx, acancel := context.WithTimeout(context.Background(), testTimeout)
	defer acancel()
	addr, err := w.Addr(actx)
	if err != nil {
		t.Fatal(err)
	}
	r.conn, err = grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.conn.Close() })
	return r
}

func group(tools ...tool.Tool) Group {
	return Group{Role: "text", Description: "Text tools", Tools: tools}
}

func echo() tool.Tool {
	return tool.New("echo", "Echoes its text.", schema.Params(schema.String("text", "what to echo")),
		func(_ context.Context, input string) (tool.Result, error) { return tool.Text(input), nil })
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

// isDraining reports whether err is the refusal of a draining worker.
func isDraining(err error) bool {
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == wire.ReasonName(toolpb.ErrorReason_ERROR_REASON_WORKER_DRAINING) {
			return true
		}
	}
	return false
}

// fakeRegistry is a ToolRegistryService that accepts every worker and records what the
// workers send.
type fakeRegistry struct {
	toolpb.UnimplementedToolRegistryServiceServer
	addr      string
	heartbeat time.Duration
	drain     chan struct{} // closed: every session asks its worker to drain

	mu    sync.Mutex
	regs  []*toolpb.Registration
	times []time.Time // when each registration arrived
	// refuse, when set, refuses every registration with this status after the ack.
	refuse     error
	heartbeats []int32
	drainings  int
}

func startRegistry(t *testing.T, heartbeat time.Duration) *fakeRegistry {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRegistry{addr: lis.Addr().String(), heartbeat: heartbeat, drain: make(chan struct{})}
	g := grpc.NewServer()
	toolpb.RegisterToolRegistryServiceServer(g, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return f
}

func (f *fakeRegistry) Connect(stream toolpb.ToolRegistryService_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.regs = append(f.regs, first.GetRegister())
	f.times = append(f.times, time.Now())
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		ack := &toolpb.RegistrationAck{Rejections: []*toolpb.Rejection{{Reason: "refused by the test"}}}
		_ = stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: ack}})
		return refuse
	}
	ack := &toolpb.RegistrationAck{Accepted: true, HeartbeatInterval: durationpb.New(f.heartbeat), LeaseId: "lease"}
	if err := stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Ack{Ack: ack}}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		select {
		case <-f.drain:
			_ = stream.Send(&toolpb.ConnectResponse{Message: &toolpb.ConnectResponse_Drain{Drain: &toolpb.DrainRequest{Reason: "test"}}})
		case <-ctx.Done():
		}
	})
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		f.mu.Lock()
		switch {
		case m.GetHeartbeat() != nil:
			f.heartbeats = append(f.heartbeats, m.GetHeartbeat().GetInFlight())
		case m.GetDraining() != nil:
			f.drainings++
		}
		f.mu.Unlock()
	}
}

func (f *fakeRegistry) counts() (regs, heartbeats, drainings int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.regs), len(f.heartbeats), f.drainings
}

// groupRegistrations is what a worker serving groups registers.
func groupRegistrations(groups ...Group) ([]*toolpb.GroupRegistration, error) {
	c, err := buildCatalog(groups)
	if err != nil {
		return nil, err
	}
	return c.groups, nil
}
