package worker_test

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/toolmesh/toolmesh/internal/compose"
	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/llm"
	"github.com/toolmesh/toolmesh/internal/meshtest"
	"github.com/toolmesh/toolmesh/internal/router"
	"github.com/toolmesh/toolmesh/pkg/schema"
	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
	"github.com/toolmesh/toolmesh/pkg/worker"
)

// These tests run workers against a real orchestrator: internal/server's registry on a
// gRPC server, in front of a real router, which calls the workers on loopback. The
// orchestrators serve on memory (grpc's bufconn), at addresses of a network of the
// test's own, so that one started again at the address of one stopped serves there at
// once, with no port of the operating system to wait for.

const timeout = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// noModel is a provider that is never asked anything: these tests make no runs.
type noModel struct{}

func (noModel) Name() string { return "none" }
func (noModel) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(func(llm.Chunk, error) bool) {}
}

// network is where a test's orchestrators listen, in memory: an address (host:port) at
// which no orchestrator serves refuses connections, as a port nothing listens on does.
type network struct {
	mu        sync.Mutex
	listeners map[string]*bufconn.Listener
	ports     int
}

func newNetwork() *network { return &network{listeners: map[string]*bufconn.Listener{}} }

// listen returns a listener at addr, or at a new address when addr is empty; it takes
// the place of the listener an orchestrator stopped at addr closed.
func (n *network) listen(addr string) (*bufconn.Listener, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" {
		n.ports++
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(7000+n.ports))
	}
	// Small buffers: a connection's stay allocated until the deadline gRPC set on it for
	// its handshake has passed, after the test, and gc_test.go measures the heap.
	lis := bufconn.Listen(64 << 10)
	n.listeners[addr] = lis
	return lis, addr
}

// dialer is the dial option with which a worker reaches the orchestrators of n
// (Options.DialOptions).
func (n *network) dialer() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		n.mu.Lock()
		lis, ok := n.listeners[addr]
		n.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("dial %s: connection refused", addr)
		}
		return lis.DialContext(ctx)
	})
}

type orchestrator struct {
	addr   string
	router *router.Router
	stop   func()
}

// startOrchestrator serves an orchestrator on n at addr ("" for a new address) until stop
// is called or the test ends. stop is abrupt, like a crash.
func startOrchestrator(t *testing.T, n *network, addr string) *orchestrator {
	t.Helper()
	lis, addr := n.listen(addr)
	cfg := config.Default()
	cfg.Registry.HeartbeatInterval = config.Duration(20 * time.Millisecond)
	cfg.Registry.LeaseTTL = config.Duration(time.Second)
	rt := router.New(router.Options{Logger: quiet(), GracePeriod: time.Minute})
	srv, err := meshtest.NewServer(compose.Options{Router: rt, Provider: noModel{}, Config: cfg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(lis) }()
	o := &orchestrator{addr: addr, router: rt}
	stopped := false
	o.stop = func() {
		if stopped {
			return
		}
		stopped = true
		g.Stop()
		<-done
		rt.Close()
	}
	t.Cleanup(o.stop)
	return o
}

func (o *orchestrator) has(workerID string) bool {
	for _, w := range o.router.ListWorkers() {
		if w.GetWorkerId() == workerID && w.GetState() == toolpb.WorkerState_WORKER_STATE_READY {
			return true
		}
	}
	return false
}

// workerLog is the log of a test's workers, read for its events: a worker logs every
// change of its registration (accepted, refused, stream ended) after making it, and an
// orchestrator has a worker in its routing table before it accepts it. await checks its
// condition again at each record, rather than on a clock.
type workerLog struct{ records chan struct{} }

func newWorkerLog() *workerLog { return &workerLog{records: make(chan struct{}, 1)} }

func (l *workerLog) logger() *slog.Logger { return slog.New(l) }

func (l *workerLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *workerLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *workerLog) WithGroup(string) slog.Handler            { return l }
func (l *workerLog) Handle(context.Context, slog.Record) error {
	select {
	case l.records <- struct{}{}:
	default: // a record not yet seen wakes await already
	}
	return nil
}

// await waits until cond holds, checking it once now and again after each record the
// workers log; it fails the test if cond does not hold within the timeout.
func (l *workerLog) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for !cond() {
		select {
		case <-l.records:
		case <-timer.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func upper() tool.Tool {
	return tool.New("upper", "Upper-cases text.", schema.Params(schema.String("text", "the text")),
		func(_ context.Context, input string) (tool.Result, error) {
			return tool.Text(strings.ToUpper(input)), nil
		})
}

func run(t *testing.T, w *worker.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(timeout):
			t.Error("Run did not return")
		}
	})
}

func TestWorkerReRegistersAfterOrchestratorRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, logs := newNetwork(), newWorkerLog()
	first := startOrchestrator(t, n, "")
	w, err := worker.New(worker.Options{ID: "w1", Orchestrator: first.addr, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: logs.logger(),
		DialOptions: []grpc.DialOption{n.dialer()}},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	logs.await(t, "registration with the first orchestrator", func() bool { ok, _ := w.Registered(); return ok && first.has("w1") })

	first.stop()
	logs.await(t, "the worker to notice", func() bool { ok, _ := w.Registered(); return !ok })

	second := startOrchestrator(t, n, first.addr)
	logs.await(t, "registration with the second orchestrator", func() bool { ok, _ := w.Registered(); return ok && second.has("w1") })

	// The new orchestrator can call the worker.
	up, err := second.router.Tool("upper")
	if err != nil {
		t.Fatal(err)
	}
	res, err := up.Call(ctx, `{"text":"hi"}`)
	if err != nil || res.Content != `{"TEXT":"HI"}` {
		t.Errorf("call through the second orchestrator = %+v, %v", res, err)
	}
}

func TestRefusedRegistrationIsReported(t *testing.T) {
	n, logs := newNetwork(), newWorkerLog()
	o := startOrchestrator(t, n, "")
	// Another worker already serves "upper" with another definition.
	first, err := worker.New(worker.Options{ID: "other", Orchestrator: o.addr, Logger: logs.logger(), DialOptions: []grpc.DialOption{n.dialer()}},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{tool.WithDescription(upper(), "Shouts.")}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, first)
	logs.await(t, "the first worker's registration", func() bool { return o.has("other") })

	w, err := worker.New(worker.Options{ID: "w1", Orchestrator: o.addr, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: logs.logger(),
		DialOptions: []grpc.DialOption{n.dialer()}},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	var rej []*toolpb.Rejection
	logs.await(t, "the refusal", func() bool {
		var ok bool
		ok, rej = w.Registered()
		return !ok && len(rej) > 0
	})
	if len(rej) != 1 || rej[0].GetTool() != "upper" || rej[0].GetGroup() != "text" || !strings.Contains(rej[0].GetReason(), "different definition") {
		t.Errorf("rejections = %v", rej)
	}
	if o.has("w1") {
		t.Error("a refused worker is in the routing table")
	}
}

// A worker given several orchestrator replicas registers with each, so that each routes
// to it, and comes back to a replica that restarts; one given a dns:/// name registers
// with the addresses it resolves to.
func TestRegistersWithEveryReplica(t *testing.T) {
	n, logs := newNetwork(), newWorkerLog()
	a, b := startOrchestrator(t, n, ""), startOrchestrator(t, n, "")
	w, err := worker.New(worker.Options{ID: "w-all", Orchestrator: a.addr + "," + b.addr, Logger: logs.logger(), DialOptions: []grpc.DialOption{n.dialer()},
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		worker.Group{Role: "text", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	logs.await(t, "registered with both replicas", func() bool { return a.has("w-all") && b.has("w-all") && len(w.RegisteredWith()) == 2 })
	addr := b.addr
	b.stop()
	logs.await(t, "only one replica left", func() bool { return len(w.RegisteredWith()) == 1 })
	if ok, _ := w.Registered(); !ok {
		t.Error("a worker registered with one replica of two reports itself unregistered")
	}
	b = startOrchestrator(t, n, addr)
	logs.await(t, "registered with the restarted replica", func() bool { return b.has("w-all") && a.has("w-all") })

	_, port, _ := net.SplitHostPort(a.addr)
	d, err := worker.New(worker.Options{ID: "w-dns", Orchestrator: "dns:///127.0.0.1:" + port, Logger: logs.logger(), DialOptions: []grpc.DialOption{n.dialer()},
		ResolveInterval: 20 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		worker.Group{Role: "text", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	logs.await(t, "registered through the dns:/// name", func() bool { return a.has("w-dns") && len(d.RegisteredWith()) == 1 })
	if got := d.RegisteredWith(); got[0] != "127.0.0.1:"+port {
		t.Errorf("RegisteredWith = %v", got)
	}
}
