package worker_test

import (
	"context"
	"io"
	"iter"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

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
// loopback gRPC server, in front of a real router.

const timeout = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// noModel is a provider that is never asked anything: these tests make no runs.
type noModel struct{}

func (noModel) Name() string { return "none" }
func (noModel) Stream(context.Context, *llm.Request) iter.Seq2[llm.Chunk, error] {
	return func(func(llm.Chunk, error) bool) {}
}

type orchestrator struct {
	addr   string
	router *router.Router
	stop   func()
}

// startOrchestrator serves an orchestrator on addr ("127.0.0.1:0" for any port) until
// stop is called or the test ends. stop is abrupt, like a crash.
func startOrchestrator(t *testing.T, addr string) *orchestrator {
	t.Helper()
	var lis net.Listener
	deadline := time.Now().Add(timeout)
	for {
		var err error
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen %s: %v", addr, err)
		}
		time.Sleep(5 * time.Millisecond) // the previous orchestrator's port may linger
	}
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
	o := &orchestrator{addr: lis.Addr().String(), router: rt}
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
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
	first := startOrchestrator(t, "127.0.0.1:0")
	w, err := worker.New(worker.Options{ID: "w1", Orchestrator: first.addr, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quiet()},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	eventually(t, "registration with the first orchestrator", func() bool { ok, _ := w.Registered(); return ok && first.has("w1") })

	first.stop()
	eventually(t, "the worker to notice", func() bool { ok, _ := w.Registered(); return !ok })

	second := startOrchestrator(t, first.addr)
	eventually(t, "registration with the second orchestrator", func() bool { ok, _ := w.Registered(); return ok && second.has("w1") })

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
	o := startOrchestrator(t, "127.0.0.1:0")
	// Another worker already serves "upper" with another definition.
	first, err := worker.New(worker.Options{ID: "other", Orchestrator: o.addr, Logger: quiet()},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{tool.WithDescription(upper(), "Shouts.")}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, first)
	eventually(t, "the first worker's registration", func() bool { return o.has("other") })

	w, err := worker.New(worker.Options{ID: "w1", Orchestrator: o.addr, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Logger: quiet()},
		worker.Group{Role: "text", Description: "Text tools", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	var rej []*toolpb.Rejection
	eventually(t, "the refusal", func() bool {
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
	a, b := startOrchestrator(t, "127.0.0.1:0"), startOrchestrator(t, "127.0.0.1:0")
	w, err := worker.New(worker.Options{ID: "w-all", Orchestrator: a.addr + "," + b.addr, Logger: quiet(),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		worker.Group{Role: "text", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	eventually(t, "registered with both replicas", func() bool { return a.has("w-all") && b.has("w-all") && len(w.RegisteredWith()) == 2 })
	addr := b.addr
	b.stop()
	eventually(t, "only one replica left", func() bool { return len(w.RegisteredWith()) == 1 })
	if ok, _ := w.Registered(); !ok {
		t.Error("a worker registered with one replica of two reports itself unregistered")
	}
	b = startOrchestrator(t, addr)
	eventually(t, "registered with the restarted replica", func() bool { return b.has("w-all") && a.has("w-all") })

	_, port, _ := net.SplitHostPort(a.addr)
	d, err := worker.New(worker.Options{ID: "w-dns", Orchestrator: "dns:///127.0.0.1:" + port, Logger: quiet(), ResolveInterval: 20 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		worker.Group{Role: "text", Tools: []tool.Tool{upper()}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	eventually(t, "registered through the dns:/// name", func() bool { return a.has("w-dns") && len(d.RegisteredWith()) == 1 })
	if got := d.RegisteredWith(); got[0] != "127.0.0.1:"+port {
		t.Errorf("RegisteredWith = %v", got)
	}
}
