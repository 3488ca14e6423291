package run

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestRunContextDeadline checks that a run's context ends at its deadline as a deadline
// context does, and that a cause given before then wins.
func TestRunContextDeadline(t *testing.T) {
	deadline := time.Now().Add(20 * time.Millisecond)
	ctx, cancel, stop := newRunContext(context.Background(), deadline, false)
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

	ctx, cancel, stop = newRunContext(context.Background(), time.Now().Add(time.Hour), false)
	defer stop()
	cancel(ErrShutdown)
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), ErrShutdown) {
		t.Errorf("cancelled: Err %v, Cause %v", ctx.Err(), context.Cause(ctx))
	}

	ctx, _, stop = newRunContext(context.Background(), time.Now().Add(-time.Second), false)
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
	ctx, _, stop := newRunContext(parent, time.Now().Add(time.Hour), false)
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
	ctx, _, stop := newRunContext(context.WithValue(context.Background(), other{}, 1), time.Now().Add(time.Hour), false)
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

// TestResumedRunContextHoldsItsDeadline: a resumed run's deadline does not end it while
// it replays (nor a context derived meanwhile with a timeout of its own), though it shows;
// its first live step ends it when the deadline passed before or during the replay, and
// not otherwise.
func TestResumedRunContextHoldsItsDeadline(t *testing.T) {
	past := time.Now().Add(-time.Second)
	ctx, _, stop := newRunContext(context.Background(), past, true)
	defer stop()
	derived, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	if ctx.Err() != nil || derived.Err() != nil {
		t.Fatalf("held past its deadline: Err %v, a derived context's %v", ctx.Err(), derived.Err())
	}
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(past) || func() bool { d, _ := derived.Deadline(); return !d.Equal(past) }() {
		t.Errorf("held: Deadline() = %v, %v; want %v, for a derived context too", dl, ok, past)
	}
	ctx.live()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || derived.Err() == nil {
		t.Fatalf("live past its deadline: Err %v, a derived context's %v", ctx.Err(), derived.Err())
	}
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(past) {
		t.Errorf("live: Deadline() = %v, %v; want %v", dl, ok, past)
	}

	// The deadline passes during the replay.
	ctx, _, stop = newRunContext(context.Background(), time.Now().Add(20*time.Millisecond), true)
	defer stop()
	time.Sleep(40 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("held while its deadline passed: Err %v", ctx.Err())
	}
	ctx.live()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("live after its deadline passed in the replay: Err %v", ctx.Err())
	}

	// Live before the deadline: the deadline ends the run when it comes, as for any run.
	ctx, _, stop = newRunContext(context.Background(), time.Now().Add(30*time.Millisecond), true)
	defer stop()
	ctx.live()
	if ctx.Err() != nil {
		t.Fatalf("live before its deadline: Err %v", ctx.Err())
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("at its deadline: Err %v", ctx.Err())
	}
}

// A cancel asked while nobody drove a resumed run ends it at its first live step, with
// its cause; one asked of a run that is not held (not resumed, or live already) at once.
func TestRunContextCancelAtLive(t *testing.T) {
	asked := fmt.Errorf("%w: stop it", ErrCancelled)
	ctx, _, stop := newRunContext(context.Background(), time.Now().Add(time.Hour), true)
	defer stop()
	ctx.cancelAtLive(asked)
	if ctx.Err() != nil {
		t.Fatalf("held: Err %v; want none until its first live step", ctx.Err())
	}
	ctx.live()
	if ctx.Err() == nil || !errors.Is(context.Cause(ctx), ErrCancelled) {
		t.Fatalf("live: Err %v, cause %v; want the cancel", ctx.Err(), context.Cause(ctx))
	}

	// Its deadline passed too: the cancel, asked of the run, is why it ends.
	ctx, _, stop = newRunContext(context.Background(), time.Now().Add(-time.Second), true)
	defer stop()
	ctx.cancelAtLive(asked)
	ctx.live()
	if !errors.Is(context.Cause(ctx), ErrCancelled) {
		t.Errorf("live past its deadline: cause %v; want the cancel", context.Cause(ctx))
	}

	for _, resumed := range []bool{false, true} {
		ctx, _, stop = newRunContext(context.Background(), time.Now().Add(time.Hour), resumed)
		ctx.live() // a resumed run's first live step came before
		ctx.cancelAtLive(asked)
		if !errors.Is(context.Cause(ctx), ErrCancelled) {
			t.Errorf("resumed %v, not held: cause %v; want the cancel at once", resumed, context.Cause(ctx))
		}
		stop()
	}
}
