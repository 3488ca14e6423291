package router

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// cuttableProxy forwards TCP connections to a backend until cut: then it forwards
// nothing more, in either direction, and keeps the connections open, as a network
// partition does (no reset, no FIN).
type cuttableProxy struct {
	addr string
	cut  atomic.Bool
	mu   sync.Mutex
}

func startProxy(t *testing.T, backend string) *cuttableProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{addr: lis.Addr().String()}
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			conns = append(conns, c, b)
			p.mu.Unlock()
			go p.pipe(c, b)
			go p.pipe(b, c)
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return p
}

// pipe copies from src to dst while the proxy is not cut; once cut, what arrives is
// dropped.
func (p *cuttableProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A worker whose lease expired because nothing came through any more: its calls in
// flight fail at once — an idempotent one goes to another replica and succeeds, a
// non-idempotent one is reported with an unknown outcome — long before their deadlines.
//
// So does a draining worker that no longer answers at all (its host gone): it keeps its
// calls only while it answers.
func TestLostWorkerFailsItsCallsInFlight(t *testing.T) {
	for _, c := range []struct{ idempotent, draining bool }{{true, false}, {false, false}, {false, true}} {
		idempotent := c.idempotent
		name := map[bool]string{true: "idempotent", false: "not idempotent"}[idempotent]
		if c.draining {
			name += ", draining"
		}
		t.Run(name, func(t *testing.T) {
			r := newRouter(t, Options{Probe: HealthProbe, ProbeTimeout: 300 * time.Millisecond, DefaultTimeout: time.Minute, GracePeriod: time.Minute})
			started := make(chan struct{}, 1)
			stuck := startFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			})
			proxy := startProxy(t, stuck.addr)
			var opts []tool.Option
			if idempotent {
				opts = append(opts, tool.Idempotent())
			}
			lease := mustRegister(t, r, registration("stuck", proxy.addr, "text", echoTool("echo", opts...)))
			ctx := testContext(t)
			type answer struct {
				res tool.Result
				at  time.Duration
			}
			done := make(chan answer, 1)
			begin := time.Now()
			go func() {
				res, _ := call(ctx, t, r, "echo", `{}`)
				done <- answer{res, time.Since(begin)}
			}()
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the call never reached the worker")
			}
			// A healthy replica joins; then the first one is cut off and its lease ends.
			healthy := startFake(t, answering("from the healthy replica"))
			mustRegister(t, r, registration("healthy", healthy.addr, "text", echoTool("echo", opts...)))
			if c.draining {
				lease.Drain()
			}
			proxy.cut.Store(true)
			lease.Lost()
			var a answer
			select {
			case a = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the call to the lost worker did not fail within 10 s (its deadline is a minute away)")
			}
			switch {
			case idempotent && (a.res.IsError() || a.res.Content != "from the healthy replica"):
				t.Errorf("idempotent call: %+v, want the healthy replica's answer", a.res)
			case !idempotent && (!a.res.IsError() || !strings.Contains(a.res.Content, "outcome of tool 'echo' is unknown")):
				t.Errorf("non-idempotent call: %+v, want an unknown outcome", a.res)
			}
			if stuck.calls.Load() != 1 {
				t.Errorf("the lost worker got %d calls, want 1", stuck.calls.Load())
			}
		})
	}
}

// A worker whose registration stream went silent but which still answers keeps its
// calls in flight: they end as the worker ends them. So does a draining worker, whose
// health says NOT_SERVING (it takes no new calls) while it finishes them: its lease
// expired (a worker that stopped its heartbeats once it drained), and the router took
// the NOT_SERVING for a worker gone and failed its calls. A worker that answers
// NOT_SERVING without having said it drains is taken for gone: its calls fail at once.
//
// It runs in a synctest bubble, the worker on memory: once the bubble's clock is past the
// probe's timeout, synctest.Wait returns when the probe Lost starts has ended and
// whatever the router does about it is done.
func TestLostLeaseOfAnAnsweringWorkerKeepsItsCalls(t *testing.T) {
	for _, c := range []struct {
		name                 string
		draining, notServing bool
	}{{"serving", false, false}, {"draining", true, true}, {"not serving, not draining", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { lostLease(t, c.draining, c.notServing) })
		})
	}
}

func lostLease(t *testing.T, draining, notServing bool) {
	release := newGate()
	started := make(chan struct{}, 1)
	w, dial := startMemoryFake(t, func(ctx context.Context, _ *toolpb.InvokeRequest) (*toolpb.InvokeResponse, error) {
		started <- struct{}{}
		if err := release.wait(ctx); err != nil {
			return nil, err
		}
		return textResponse("finished"), nil
	})
	r := newRouter(t, Options{Probe: HealthProbe, ProbeTimeout: 300 * time.Millisecond, DefaultTimeout: time.Minute, GracePeriod: time.Minute, Dial: dial})
	lease := mustRegister(t, r, registration("w", w.addr, "text", echoTool("echo")))
	ctx := testContext(t)
	done := make(chan tool.Result, 1)
	go func() {
		res, _ := call(ctx, t, r, "echo", `{}`)
		done <- res
	}()
	<-started
	if draining {
		lease.Drain()
	}
	if notServing {
		w.health.SetServingStatus(toolpb.ToolWorkerService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	lease.Lost()
	time.Sleep(3 * 300 * time.Millisecond) // past the probe's timeout, in the bubble's time
	synctest.Wait()                        // the probe answered, and the router acted on it
	if notServing && !draining {
		select {
		case res := <-done:
			if !res.IsError() || !strings.Contains(res.Content, "outcome of tool 'echo' is unknown") {
				t.Errorf("call = %+v, want an unknown outcome", res)
			}
		default:
			t.Fatal("the call of a worker that answers NOT_SERVING without draining was kept after its lease expired")
		}
		release.open()
		return
	}
	select {
	case res := <-done:
		t.Fatalf("the call ended before the worker answered: %+v", res)
	default:
	}
	release.open()
	if res := <-done; res.IsError() || res.Content != "finished" {
		t.Errorf("call = %+v, want the worker's answer", res)
	}
}
