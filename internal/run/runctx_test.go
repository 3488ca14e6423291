package run

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRunContextDeadline checks that a run's context ends at its deadline as a deadline
// context does, and that a cause given before then wins.
func TestRunContextDeadline(t *testing.T) {
	deadline := time.Now().Add(20 * time.Millisecond)
	ctx, cancel, stop := newRunContext(context.Background(), deadline)
	defer stop()
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(deadline) {
		t.Errorf("Deadline() = %v, %v; want %v", dl, ok, deadline)
	}
	child, childCancel := context.WithCancel(ctx)
	defer childCancel()
	<-child.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		t.Errorf("past the deadline: Err %v, Cause %v", ctx.Err(), context.Cause(ctx))
	}
	if !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Errorf("a derived context's cause = %v", context.Cause(child))
	}
	cancel(ErrShutdown) // too late: the deadline ended it
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err after a late cancel = %v", ctx.Err())
	}

	ctx, cancel, stop = newRunContext(context.Background(), time.Now().Add(time.Hour))
	defer stop()
	cancel(ErrShutdown)
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Errorf("cancelled: Err %v, Cause %v", ctx.Err(), context.Cause(ctx))
	}

	ctx, _, stop = newRunContext(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("a deadline already past: Err %v", ctx.Err())
	}
}

// TestRunContextParentDeadline checks that a parent that ends first sets the deadline
// and the error.
func TestRunContextParentDeadline(t *testing.T) {
	parent, cancelParent := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelParent()
	pd, _ := parent.Deadline()
	ctx, _, stop := newRunContext(parent, time.Now().Add(time.Hour))
	defer stop()
	if dl, _ := ctx.Deadline(); !dl.Equal(pd) {
		t.Errorf("Deadline() = %v, want the parent's %v", dl, pd)
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v", ctx.Err())
	}
}

// TestRunContextValues checks that a run's context answers its own keys once they are
// set and passes the others on.
func TestRunContextValues(t *testing.T) {
	type other struct{}
	ctx, _, stop := newRunContext(context.WithValue(context.Background(), other{}, 1), time.Now().Add(time.Hour))
	defer stop()
	if ctx.Value(approverKey{}) != nil {
		t.Error("an approver before one is set")
	}
	ap := &approver{auto: true}
	ctx.ap = ap
	if ctx.Value(approverKey{}) != ap || ctx.Value(other{}) != 1 {
		t.Error("the run's context does not answer its keys")
	}
}
