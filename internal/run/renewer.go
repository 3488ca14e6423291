package run

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// renewParallel bounds the store calls a renewer makes at once.
const renewParallel = 32

// renewBatch is how many leases one store call renews (runlog.Store.RenewAll).
const renewBatch = runlog.MaxRenewals

// renewer renews the leases of a service's journals. One goroutine ticks every third of
// the lease's time to live and queues every journal it holds whose last renewal has
// ended; at most renewParallel workers take them from the queue, first come first
// served, and end once it is empty. A worker renews up to renewBatch leases with one
// store call (and reads whether their runs were asked to cancel with it): a tick of a
// thousand open runs is a few statements, not two for each. The leases a store could not
// renew with the others (a PostgreSQL row another transaction holds, a stale lease)
// are renewed one at a time, each a worker's call of its own. An open run costs a map
// entry, not a goroutine with its ticker, nor one at each tick (goroutines waiting for
// a worker: their stacks would be most of what runs waiting for their models hold,
// kept by the process once the tick is over). A tick does not wait for the renewals it
// queued: a store call that hangs gives up after a sixth of the time to live, holding
// one worker meanwhile, and the others go on with the queue.
type renewer struct {
	ttl time.Duration

	mu      sync.Mutex
	js      map[*journal]struct{}
	running bool
	idle    chan struct{} // closed when the last journal leaves: the loop ends
	// queue are the journals due for renewal that no worker has taken yet, alone those
	// a batch left to be renewed one at a time; workers counts the workers renewing.
	queue   []*journal
	alone   []*journal
	workers int
	// calls bounds the journals' store calls (journal.callContext).
	calls callBound
}

func newRenewer(ttl time.Duration) *renewer {
	return &renewer{ttl: ttl, js: map[*journal]struct{}{}, calls: callBound{d: ttl}}
}

// callBound hands out the context that bounds a journal's store call: one shared by the
// calls of every journal of a service, replaced once less than d is left of it (the new
// one ends d+d/8 later), so that each call has between d and 1.125*d — a context and a
// timer every d/8 for all of them, instead of one of each for every call. A call that
// hangs gives up, as it did with a context of its own, about when the lease it was made
// under has run out.
type callBound struct {
	d      time.Duration
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc // never called: the calls under way keep their context
	until  time.Time
}

func (b *callBound) get() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now() // under the lock: a caller that waited for it has d from now
	if b.ctx == nil || b.until.Sub(now) < b.d {
		span := b.d + b.d/8
		if span < b.d {
			span = math.MaxInt64 // a bound of centuries: d+d/8 overflows
		}
		b.until = now.Add(span)
		b.ctx, b.cancel = context.WithDeadline(context.Background(), b.until)
	}
	return b.ctx
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
		start := r.startLocked((len(r.queue) + renewBatch - 1) / renewBatch)
		r.mu.Unlock()
		for range start {
			go r.work()
		}
	}
}

// startLocked counts up to want more workers, within renewParallel, and returns how many
// the caller starts. r.mu is held.
func (r *renewer) startLocked(want int) int {
	n := max(0, min(renewParallel-r.workers, want))
	r.workers += n
	return n
}

// work renews the queued leases, a batch at a time, and those left to be renewed alone,
// until both queues are empty.
func (r *renewer) work() {
	for {
		r.mu.Lock()
		if len(r.alone) > 0 {
			j := r.alone[0]
			r.alone[0] = nil
			r.alone = r.alone[1:]
			r.mu.Unlock()
			r.done(j, j.renewOnce())
			continue
		}
		if len(r.queue) == 0 {
			r.queue, r.alone = nil, nil // what a tick of many runs grew
			r.workers--
			r.mu.Unlock()
			return
		}
		n := min(len(r.queue), renewBatch)
		batch := make([]*journal, n)
		copy(batch, r.queue)
		clear(r.queue[:n])
		r.queue = r.queue[n:]
		r.mu.Unlock()
		if alone := r.renewAll(batch); len(alone) > 0 {
			r.mu.Lock()
			r.alone = append(r.alone, alone...)
			start := r.startLocked(len(alone) - 1) // this worker takes one
			r.mu.Unlock()
			for range start {
				go r.work()
			}
		}
	}
}

// done ends a journal's renewal: it is renewed again at the next tick, unless keep is
// false.
func (r *renewer) done(j *journal, keep bool) {
	if !keep {
		r.remove(j)
	}
	j.renewing.Store(false)
}

// renewAll renews the leases of js with one call of their store (a renewer serves one
// service, whose journals share it) and returns the journals it left to be renewed
// alone: those the store did not renew with the others, and any of another time to
// live than the first's. Each journal's renewMu is held during the call, as renewOnce
// holds it: a journal's close waits for its renewal under way.
func (r *renewer) renewAll(js []*journal) (alone []*journal) {
	store, ttl := js[0].store, js[0].ttl
	held := make([]*journal, 0, len(js))
	leases := make([]runlog.Lease, 0, len(js))
	for _, j := range js {
		if j.ttl != ttl {
			alone = append(alone, j)
			continue
		}
		j.renewMu.Lock()
		if j.renewStopped {
			j.renewMu.Unlock()
			r.done(j, false)
			continue
		}
		j.mu.Lock()
		leases = append(leases, j.lease)
		j.mu.Unlock()
		held = append(held, j)
	}
	if len(held) == 0 {
		return alone
	}
	// A sixth of the time to live, as renewOnce.
	ctx, cancel := context.WithTimeout(context.Background(), ttl/6)
	res := store.RenewAll(ctx, leases, ttl, cancelKey)
	cancel()
	if len(res) != len(held) { // not the store's contract: each is renewed alone
		res = make([]runlog.Renewal, len(held))
		for i := range res {
			res[i].Err = runlog.ErrRenewAlone
		}
	}
	for i, j := range held {
		if errors.Is(res[i].Err, runlog.ErrRenewAlone) {
			j.renewMu.Unlock()
			alone = append(alone, j) // still renewing: renewOnce ends it
			continue
		}
		keep := j.renewed(leases[i], res[i])
		j.renewMu.Unlock()
		r.done(j, keep)
	}
	return alone
}
