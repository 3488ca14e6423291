package router

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/toolmesh/toolmesh/pkg/tool"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// worker is one registered worker process and the connection to it.
type worker struct {
	id string
	// identity is the SPIFFE ID the worker registered under ("" without mutual TLS).
	identity     string
	address      string
	version      string
	capacity     int32
	groups       []string
	tools        []string
	domainTypes  map[string]tool.DomainType
	typeBytes    int64 // encoded size of domainTypes, counted in the router's defBytes
	leaseID      string
	registeredAt time.Time

	conn *grpc.ClientConn

	inFlight atomic.Int32 // changed under mu, read without it by the picker
	calls    atomic.Int64
	reported atomic.Int32 // in-flight count the worker reported in its last heartbeat

	mu           sync.Mutex
	state        toolpb.WorkerState // READY, DRAINING or DISCONNECTED
	failures     int                // consecutive transport failures
	ejectedUntil time.Time
	graceTimer   *time.Timer
	replaced     chan struct{} // closed when a registration on another stream took its place
	replaceOnce  sync.Once
	removed      bool
	closing      bool // the connection closes when the last call in flight ends
	connClosed   bool
}

// live reports whether the worker's registration stream is still open (it may be
// draining): then its id is taken.
func (w *worker) live() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.removed && w.state != toolpb.WorkerState_WORKER_STATE_DISCONNECTED
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

// acquireUnder starts a call unless the worker is closed or already has limit calls in
// flight (full; 0: no limit).
func (w *worker) acquireUnder(limit int64) (ok, full bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return false, false
	}
	if limit > 0 && int64(w.inFlight.Load()) >= limit {
		return false, true
	}
	w.inFlight.Add(1)
	return true, false
}

// limit is the most calls in flight the router sends the worker: max, and at most four
// times the capacity it declares.
func (w *worker) limit(max int) int64 {
	if w.capacity > 0 {
		return min(int64(max), 4*int64(w.capacity))
	}
	return int64(max)
}

// release ends a call acquire allowed, closing the connection if the worker was closed
// while the call was in flight.
func (w *worker) release() {
	w.mu.Lock()
	w.inFlight.Add(-1)
	last := w.closing && w.inFlight.Load() == 0
	w.mu.Unlock()
	if last {
		w.closeConn()
	}
}

// close stops the grace timer and closes the connection once no call uses it. A worker
// that was replaced by a new registration, or that left the table, may still be running
// calls it accepted: those finish (or fail on their own) rather than being cut off here.
// replace marks w as taken over by a registration of the same worker on another stream.
func (w *worker) replace() {
	w.replaceOnce.Do(func() {
		if w.replaced != nil {
			close(w.replaced)
		}
	})
}

func (w *worker) close() {
	w.mu.Lock()
	if w.graceTimer != nil {
		w.graceTimer.Stop()
	}
	w.closing = true
	idle := w.inFlight.Load() == 0
	w.mu.Unlock()
	if idle {
		w.closeConn()
	}
}

// closeNow closes the connection at once, failing calls in flight.
func (w *worker) closeNow() {
	w.close()
	w.closeConn()
}

func (w *worker) closeConn() {
	w.mu.Lock()
	done := w.connClosed
	w.connClosed = true
	w.mu.Unlock()
	if !done && w.conn != nil {
		_ = w.conn.Close()
	}
}
