package run

import (
	"sync"
	"time"
)

// renewParallel bounds the leases a renewer renews at once: a store call each, and a
// journal on PostgreSQL answers in about a millisecond.
const renewParallel = 32

// renewer renews the leases of a service's journals. One goroutine ticks every third of
// the lease's time to live and queues every journal it holds whose last renewal has
// ended; at most renewParallel workers take them from the queue, first come first
// served, and end once it is empty. An open run costs a map entry, not a goroutine
// with its ticker, nor one at each tick (goroutines waiting for a worker: their stacks
// would be most of what runs waiting for their models hold, kept by the process once
// the tick is over). A tick does not wait for the renewals it queued: a store call that
// hangs gives up after a sixth of the time to live, holding one worker meanwhile, and the
// others go on with the queue.
type renewer struct {
	ttl time.Duration

	mu      sync.Mutex
	js      map[*journal]struct{}
	running bool
	idle    chan struct{} // closed when the last journal leaves: the loop ends
	// queue are the journals due for renewal that no worker has taken yet; workers
	// counts the workers renewing.
	queue   []*journal
	workers int
}

func newRenewer(ttl time.Duration) *renewer {
	return &renewer{ttl: ttl, js: map[*journal]struct{}{}}
}

// add renews j's lease from the next tick on, until remove.
func (r *renewer) add(j *journal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.js[j] = struct{}{}
	if !r.running {
		r.running = true
		r.idle = make(chan struct{})
		go r.loop(r.idle)
	}
}

func (r *renewer) remove(j *journal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.js, j)
	if len(r.js) == 0 && r.running {
		r.running = false
		close(r.idle)
	}
}

// loop queues the leases for renewal every ttl/3 until idle is closed.
func (r *renewer) loop(idle <-chan struct{}) {
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-idle:
			return
		case <-t.C:
		}
		r.mu.Lock()
		for j := range r.js {
			if j.renewing.CompareAndSwap(false, true) { // else its last renewal is under way
				r.queue = append(r.queue, j)
			}
		}
		start := min(renewParallel-r.workers, len(r.queue))
		r.workers += start
		r.mu.Unlock()
		for range start {
			go r.work()
		}
	}
}

// work renews the queued leases until the queue is empty.
func (r *renewer) work() {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.queue = nil // what a tick of many runs grew
			r.workers--
			r.mu.Unlock()
			return
		}
		j := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		r.mu.Unlock()
		if !j.renewOnce() {
			r.remove(j)
		}
		j.renewing.Store(false)
	}
}
