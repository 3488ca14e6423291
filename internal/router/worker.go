package router

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// worker is one registered worker process and the connection to it.
type worker struct {
	id           string
	address      string
	version      string
	capacity     int32
	groups       []string
	tools        []string
	leaseID      string
	registeredAt time.Time

	conn   *grpc.ClientConn
	client toolpb.ToolWorkerServiceClient

	inFlight atomic.Int32
	calls    atomic.Int64
	reported atomic.Int32 // in-flight count the worker reported in its last heartbeat

	mu           sync.Mutex
	state        toolpb.WorkerState // READY, DRAINING or DISCONNECTED
	failures     int                // consecutive transport failures
	ejectedUntil time.Time
	graceTimer   *time.Timer
	removed      bool
}

// routable reports whether the worker may be given a new call now.
func (w *worker) routable(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.removed && w.state == toolpb.WorkerState_WORKER_STATE_READY && !now.Before(w.ejectedUntil)
}

// status is the worker's state as reported to clients.
func (w *worker) status(now time.Time) toolpb.WorkerState {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == toolpb.WorkerState_WORKER_STATE_READY && now.Before(w.ejectedUntil) {
		return toolpb.WorkerState_WORKER_STATE_EJECTED
	}
	return w.state
}

// succeeded records a call that reached the worker and came back.
func (w *worker) succeeded() {
	w.mu.Lock()
	w.failures = 0
	w.mu.Unlock()
}

// failed records a transport failure and reports whether it ejected the worker.
func (w *worker) failed(now time.Time, after int, ejectFor time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures++
	if w.failures >= after {
		// Each further failure while ejected doubles the stay, up to 8 times the base.
		n := w.failures - after
		if n > 3 {
			n = 3
		}
		w.ejectedUntil = now.Add(ejectFor << n)
		return true
	}
	return false
}

func (w *worker) setState(s toolpb.WorkerState) {
	w.mu.Lock()
	w.state = s
	w.mu.Unlock()
}

func (w *worker) close() {
	w.mu.Lock()
	if w.graceTimer != nil {
		w.graceTimer.Stop()
	}
	w.mu.Unlock()
	if w.conn != nil {
		_ = w.conn.Close()
	}
}
