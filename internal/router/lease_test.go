package router

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"testing/synctest"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// The tests in this file run in a synctest bubble: grace periods pass in fake time. They
// make no RPC (a worker that is not routable is never dialled), so no real I/O happens
// inside the bubble.

func stateOf(r *Router, id string) toolpb.WorkerState {
	for _, w := range r.ListWorkers() {
		if w.GetWorkerId() == id {
			return w.GetState()
		}
	}
	return toolpb.WorkerState_WORKER_STATE_UNSPECIFIED
}

func TestLeaseEndStopsCallsAtOnceAndRemovesAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Options{GracePeriod: 3 * time.Second, Logger: discard(), Probe: noProbe})
		defer r.Close()
		lease := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
		stub, err := r.Tool("echo")
		if err != nil {
			t.Fatal(err)
		}
		lease.End()
		lease.End() // a second report changes nothing

		if got := stateOf(r, "a"); got != toolpb.WorkerState_WORKER_STATE_DISCONNECTED {
			t.Errorf("state after End = %v, want DISCONNECTED", got)
		}
		res, err := stub.Call(context.Background(), `{}`)
		if err != nil || !res.IsError() || res.Code != tool.CodeUnavailable || !strings.Contains(res.Content, "no worker of group 'text'") {
			t.Errorf("call during grace = %+v, %v; want an UNAVAILABLE error result", res, err)
		}

		time.Sleep(3*time.Second - time.Millisecond)
		synctest.Wait()
		if len(r.ListTools()) != 1 || len(r.ListGroups()) != 1 {
			t.Errorf("tools left before the grace period ended: tools %v groups %v", r.ListTools(), r.ListGroups())
		}

		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := len(r.ListWorkers()) + len(r.ListTools()) + len(r.ListGroups()); n != 0 {
			t.Errorf("%d entries remain after the grace period", n)
		}
		if _, err := r.Tool("echo"); !errors.Is(err, ErrUnknownTool) {
			t.Errorf("Tool(echo) after grace: err = %v, want ErrUnknownTool", err)
		}
	})
}

func TestReRegisterWithinGraceKeepsTools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Options{GracePeriod: 3 * time.Second, Logger: discard(), Probe: noProbe})
		defer r.Close()
		lease := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
		lease.End()
		time.Sleep(2 * time.Second)
		mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))

		time.Sleep(time.Minute) // the first registration's grace timer must not fire
		synctest.Wait()
		if got := stateOf(r, "a"); got != toolpb.WorkerState_WORKER_STATE_READY {
			t.Errorf("state = %v, want READY", got)
		}
		stub, _ := r.Tool("echo")
		if w, _ := r.pick(stub.(*remoteTool), nil); w == nil {
			t.Errorf("echo is not routable after re-registration")
		}
	})
}

func TestDrainingWorkerLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New(Options{GracePeriod: time.Hour, Logger: discard(), Probe: noProbe})
		defer r.Close()
		mustRegister(t, r, registration("b", "127.0.0.1:9002", "text", echoTool("echo")))
		lease := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
		lease.Drain()
		if got := stateOf(r, "a"); got != toolpb.WorkerState_WORKER_STATE_DRAINING {
			t.Errorf("state after Drain = %v", got)
		}
		stub, _ := r.Tool("echo")
		for range 10 {
			if w, _ := r.pick(stub.(*remoteTool), nil); w == nil || w.id != "b" {
				t.Fatalf("pick = %v, want b: a draining worker takes no new calls", w)
			}
		}
		lease.End()
		synctest.Wait()
		if got := stateOf(r, "a"); got != toolpb.WorkerState_WORKER_STATE_UNSPECIFIED {
			t.Errorf("draining worker still listed as %v after its stream ended", got)
		}
		if ids := r.ListTools()[0].GetWorkerIds(); len(ids) != 1 || ids[0] != "b" {
			t.Errorf("echo served by %v, want [b]", ids)
		}
	})
}

func TestLeaseHeartbeatRecordsLoad(t *testing.T) {
	r := newRouter(t, Options{})
	lease := mustRegister(t, r, registration("a", "127.0.0.1:9001", "text", echoTool("echo")))
	if lease.WorkerID() != "a" || lease.ID() == "" {
		t.Errorf("lease = %q/%q", lease.WorkerID(), lease.ID())
	}
	lease.Heartbeat(7)
	if got := workerOf(t, r, "a").reported.Load(); got != 7 {
		t.Errorf("reported in-flight = %d, want 7", got)
	}
}
