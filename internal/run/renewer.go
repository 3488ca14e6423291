package run

import (
	"sync"
	"time"
)

// renewParallel bounds the leases a renewer renews at once: a store call each, and a
// journal on PostgreSQL answers in about a millisecond.
const renewParallel = 32

// renewer renews the leases of a service's journals. One goroutine ticks every third of
// the lease's time to live and starts the renewal of every journal it holds whose last
// renewal has ended, renewParallel at a time, first come first served: an open run costs
// a map entry, not a goroutine with its ticker (whose stack was most of what a run
// waiting for its model held). A tick does not wait for the renewals it started, so a
// store call that hangs (it gives up after a sixth of the time to live) holds one slot
// and its own journal, never the others' renewals.
type renewer struct {
	ttl time.Duration

	mu      sync.Mutex
	js      map[*journal]struct{}
	running bool
	idle    chan struct{} // closed when the last journal leaves: the loop ends
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

// loop renews the leases every ttl/3 until idle is closed.
func (r *renewer) loop(idle <-chan struct{}) {
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	sem := make(chan struct{}, renewParallel)
	var due []*journal
	for {
		select {
		case <-idle:
			return
		case <-t.C:
		}
		r.mu.Lock()
		due = due[:0]
		for j := range r.js {
			due = append(due, j)
		}
		r.mu.Unlock()
		for _, j := range due {
			if !j.renewing.CompareAndSwap(false, true) {
				continue // its last renewal is still under way
			}
			go func() {
				sem <- struct{}{}
				defer func() {
					<-sem
					j.renewing.Store(false)
				}()
				if !j.renewOnce() {
					r.remove(j)
				}
			}()
		}
		clear(due)
	}
}
