package run

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/decorators"
	"github.com/toolmesh/toolmesh/internal/process"
	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

// runContext is the context of a run: its cancel-cause context, which its store,
// journal and shutdown cancel with their reasons, with the run's deadline and the
// run's own values (its approver, which is also its tools' asker, its call info, listener,
// journal and process) on it. It stands for the cancel-cause context under a deadline
// context and five value contexts without being one: the deadline costs the run a timer,
// not a second cancelable context and the set of children the first would keep for it.
//
// Past the deadline the run's context ends as a deadline context does: Err is
// context.DeadlineExceeded and context.Cause is context.DeadlineExceeded. A context
// derived from it ends at the same moment; its Err is the cancel-cause context's
// (context.Canceled) and its cause context.DeadlineExceeded.
type runContext struct {
	context.Context
	deadline time.Time
	timer    *time.Timer
	// held is set while a resumed run replays what its journal holds: the deadline does
	// not end the run, so that a run whose deadline passed while no orchestrator drove it
	// replays every step the client saw; expired notes that it passed meanwhile. live
	// ends the hold at the run's first live step, and the hold ends by itself after
	// maxHold. Deadline shows the deadline all along: a context derived meanwhile (a
	// call's, with a timeout of its own) has it, and ends with the run. cancel is the
	// run's.
	held, expired atomic.Bool
	hold          *time.Timer
	cancel        context.CancelCauseFunc
	// asked is the cause of a cancel requested while nobody drove the resumed run
	// (cancelAtLive): like a deadline that passed meanwhile, it ends the run at its first
	// live step, once the steps the client saw are replayed.
	asked atomic.Pointer[error]
	// ap is the run's approver, once its loop starts; nil until then.
	ap *approver
	// info is the run's tool.CallInfo, once the run reached its journal; listener is
	// the decorators.Listener of its calls, once its loop starts. Both are nil until then.
	info     any
	listener decorators.Listener
	// j is the run's journal (nil without one) and proc its process, once its loop
	// starts.
	j    *journal
	proc *process.Process
}

// newRunContext returns the context of a run that ends with parent, when cancel is
// called, or at deadline; stop lets go of its timer (the run is over). A resumed run's
// context is held (see runContext.held) until live is called, or for maxHold.
func newRunContext(parent context.Context, deadline time.Time, resumed bool) (c *runContext, cancel context.CancelCauseFunc, stop func()) {
	inner, cancel := context.WithCancelCause(parent)
	c = &runContext{Context: inner, deadline: deadline, cancel: cancel}
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		c.deadline = pd // the parent ends first, with its own error
		return c, cancel, c.stop
	}
	if resumed {
		c.held.Store(true)
		c.hold = time.AfterFunc(maxHold, c.live)
	}
	if d := time.Until(deadline); d > 0 {
		c.timer = time.AfterFunc(d, c.passed)
	} else {
		c.passed()
	}
	return c, cancel, c.stop
}

// maxHold bounds the hold of a resumed run's deadline: a replay reads the journal and
// calls nothing, and takes far less.
const maxHold = 10 * time.Second

// passed ends the run at its deadline, or notes it for live while it is held.
func (c *runContext) passed() {
	if c.held.Load() {
		c.expired.Store(true)
		if c.held.Load() { // live ran meanwhile, and may not have seen expired
			return
		}
	}
	c.cancel(context.DeadlineExceeded)
}

// live ends the hold of a resumed run's deadline, at its first live step: asked to
// cancel while nobody drove it (cancelAtLive), or past its deadline, the run ends then.
func (c *runContext) live() {
	if !c.held.CompareAndSwap(true, false) {
		return
	}
	switch cause := c.asked.Load(); {
	case cause != nil:
		c.cancel(*cause)
	case c.expired.Load() || !time.Now().Before(c.deadline):
		c.cancel(context.DeadlineExceeded)
	}
}

// cancelAtLive ends a resumed run with cause at its first live step (see asked), or at
// once when it is not held.
func (c *runContext) cancelAtLive(cause error) {
	c.asked.Store(&cause)
	if !c.held.Load() {
		c.cancel(cause)
	}
}

// stop stops the run's deadline timer.
func (c *runContext) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.hold != nil {
		c.hold.Stop()
	}
}

// Deadline is the run's deadline, or its parent's when that comes first.
func (c *runContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Err is context.DeadlineExceeded once the run's deadline passed (its timer cancelled
// it), else the cancel-cause context's error.
func (c *runContext) Err() error {
	err := c.Context.Err()
	if errors.Is(err, context.Canceled) && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// Value is the run's approver (also as its asker), call info, listener, journal and
// process, each once set, for their keys (approverKey, toolinternal.AskerKey,
// toolinternal.CallInfoKey, decorators.ListenerKey, toolinternal.JournalKey,
// process.ContextKey), else the value the cancel-cause context holds for key. They stand
// for as many value contexts.
func (c *runContext) Value(key any) any {
	switch key.(type) {
	case approverKey, toolinternal.AskerKey:
		if c.ap != nil {
			return c.ap
		}
	case toolinternal.JournalKey:
		if c.j != nil {
			return c.j
		}
	case process.ContextKey:
		if c.proc != nil {
			return c.proc
		}
	case toolinternal.CallInfoKey:
		if c.info != nil {
			return c.info
		}
	case decorators.ListenerKey:
		if c.listener != nil {
			return c.listener
		}
	}
	return c.Context.Value(key)
}
