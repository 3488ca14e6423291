package run

import (
	"context"
	"errors"
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
// called, or at deadline; stop lets go of its timer (the run is over).
func newRunContext(parent context.Context, deadline time.Time) (c *runContext, cancel context.CancelCauseFunc, stop func()) {
	inner, cancel := context.WithCancelCause(parent)
	c = &runContext{Context: inner, deadline: deadline}
	if pd, ok := parent.Deadline(); ok && pd.Before(deadline) {
		c.deadline = pd // the parent ends first, with its own error
		return c, cancel, c.stop
	}
	if d := time.Until(deadline); d > 0 {
		c.timer = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	} else {
		cancel(context.DeadlineExceeded)
	}
	return c, cancel, c.stop
}

// stop stops the run's deadline timer.
func (c *runContext) stop() {
	if c.timer != nil {
		c.timer.Stop()
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
