package router

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	workersdk "github.com/toolmesh/toolmesh/pkg/worker"
)

// These tests put real workers (pkg/worker) behind the router. The workers are
// registered with the router directly; their own registration loop points at an address
// that refuses connections and just keeps retrying.

// connTracker is a listener that can cut every connection it accepted, which is what
// the orchestrator sees when a worker process dies.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connTracker) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

type sdkWorker struct {
	w    *workersdk.Worker
	addr string
	lis  *connTracker
	stop context.CancelFunc
	done chan error
}

func startSDK(t testing.TB, id string, tools ...tool.Tool) *sdkWorker {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &connTracker{Listener: inner}
	w, err := workersdk.New(workersdk.Options{ID: id, Orchestrator: deadAddress(t), Listener: lis, Logger: discard()},
		workersdk.Group{Role: "text", Description: "text tools", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sdkWorker{w: w, addr: inner.Addr().String(), lis: lis, stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// sdkRegistration is the registration the SDK worker would send.
func sdkRegistration(s *sdkWorker, tools ...tool.Tool) *toolpb.Registration {
	return registration(s.w.ID(), s.addr, "text", tools...)
}

// counted is a tool that counts its executions and runs body.
func counted(name string, n *atomic.Int32, body func(ctx context.Context) tool.Result, opts ...tool.Option) tool.Tool {
	return tool.New(name, "Charges a card.", schema.Empty(), func(ctx context.Context, _ string) (tool.Result, error) {
		n.Add(1)
		return body(ctx), nil
	}, opts...)
}

// A worker that dies while running a non-idempotent tool leaves the outcome unknown: the
// model is told so and the call is not sent again.
func TestWorkerDiesMidCall(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		name := "not idempotent"
		if idempotent {
			name = "idempotent"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			var opts []tool.Option
			if idempotent {
				opts = append(opts, tool.Idempotent())
			}
			var dyingRuns, otherRuns atomic.Int32
			started := newGate()
			dying := startSDK(t, "dying", counted("charge", &dyingRuns, func(ctx context.Context) tool.Result {
				started.open()
				<-ctx.Done() // until the connection is cut
				return tool.Text("charged on the dying worker")
			}, opts...))
			other := startSDK(t, "other", counted("charge", &otherRuns, func(context.Context) tool.Result {
				return tool.Text("charged")
			}, opts...))

			r := newRouter(t, Options{})
			def := counted("charge", nil, nil, opts...)
			mustRegister(t, r, sdkRegistration(dying, def))
			mustRegister(t, r, sdkRegistration(other, def))
			workerOf(t, r, "other").calls.Store(1000) // the dying worker gets the call

			go func() {
				if started.wait(ctx) == nil {
					dying.lis.kill()
				}
			}()
			res, d := call(ctx, t, r, "charge", `{}`)

			if dyingRuns.Load() != 1 {
				t.Errorf("dying worker ran the tool %d times", dyingRuns.Load())
			}
			if !idempotent {
				if !res.IsError() || res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "outcome of tool 'charge' is unknown") {
					t.Errorf("result = %+v, want UNAVAILABLE saying the outcome is unknown", res)
				}
				if otherRuns.Load() != 0 || d.Attempts != 1 {
					t.Errorf("non-idempotent call re-sent: other ran it %d times, %d attempts", otherRuns.Load(), d.Attempts)
				}
				return
			}
			if res.IsError() || res.Content != "charged" || d.Attempts != 2 || d.WorkerID != "other" {
				t.Errorf("result = %+v via %+v, want the other replica's answer after 2 attempts", res, d)
			}
			if otherRuns.Load() != 1 {
				t.Errorf("other replica ran the tool %d times, want 1", otherRuns.Load())
			}
		})
	}
}

// A worker that is draining refuses new calls with UNAVAILABLE/WORKER_DRAINING before
// running them; the router sends them to another replica even for a non-idempotent tool.
func TestDrainingSDKWorkerCallIsResent(t *testing.T) {
	ctx := testContext(t)
	var drainingRuns, otherRuns atomic.Int32
	started, release := newGate(), newGate()
	draining := startSDK(t, "draining", counted("charge", &drainingRuns, func(ctx context.Context) tool.Result {
		started.open()
		_ = release.wait(ctx)
		return tool.Text("held call done")
	}))
	other := startSDK(t, "other", counted("charge", &otherRuns, func(context.Context) tool.Result { return tool.Text("charged") }))

	r := newRouter(t, Options{})
	def := counted("charge", nil, nil)
	mustRegister(t, r, sdkRegistration(draining, def))
	mustRegister(t, r, sdkRegistration(other, def))
	workerOf(t, r, "other").calls.Store(1000)

	// Hold a call on the draining worker directly, so that its drain has to wait.
	conn, err := grpc.NewClient(draining.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	held := make(chan *toolpb.InvokeResponse, 1)
	go func() {
		resp, _ := toolpb.NewToolWorkerServiceClient(conn).Invoke(ctx, &toolpb.InvokeRequest{Tool: "charge", ArgumentsJson: `{}`})
		held <- resp
	}()
	if err := started.wait(ctx); err != nil {
		t.Fatal(err)
	}
	draining.stop()
	health := healthpb.NewHealthClient(conn)
	eventually(t, "the worker to report NOT_SERVING", func() bool {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})

	res, d := call(ctx, t, r, "charge", `{}`)
	if res.IsError() || res.Content != "charged" || d.Attempts != 2 || d.WorkerID != "other" {
		t.Errorf("result = %+v via %+v, want other's answer after 2 attempts", res, d)
	}
	if drainingRuns.Load() != 1 || otherRuns.Load() != 1 {
		t.Errorf("runs: draining %d (want 1, the held call) other %d (want 1)", drainingRuns.Load(), otherRuns.Load())
	}
	release.open()
	if resp := <-held; resp.GetText() != "held call done" {
		t.Errorf("held call = %v", resp)
	}
	if err := <-draining.done; err != nil {
		t.Errorf("Run = %v after a clean drain", err)
	}
	draining.done <- nil // for the cleanup
}
