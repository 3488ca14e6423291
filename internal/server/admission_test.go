package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/toolmesh/toolmesh/internal/builtin"
	"github.com/toolmesh/toolmesh/pkg/client"
	"github.com/toolmesh/toolmesh/pkg/toolpb"
)

// TestAdmissionBoundsConcurrentReads: the budget admits as many reads at once as it has
// room for; the next waits, and is refused as overloaded after admissionWait; a read that
// ends gives its room back, and one that takes longer than admissionHold stops counting.
func TestAdmissionBoundsConcurrentReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const per = 4 << 20
		a := &admission{sem: semaphore.NewWeighted(2 * per), perMessage: per, messages: 2}
		release := make(chan struct{})
		results := make(chan error, 4)
		for range 2 {
			go func() { results <- a.recv(t.Context(), func() error { <-release; return nil }) }()
		}
		synctest.Wait()
		start := time.Now()
		err := a.recv(t.Context(), func() error { return nil })
		if reasonOf(err) != toolpb.ErrorReason_ERROR_REASON_OVERLOADED || time.Since(start) != admissionWait {
			t.Fatalf("third read = %v after %s, want OVERLOADED after %s", err, time.Since(start), admissionWait)
		}
		// The two reads still run; past admissionHold they no longer count.
		time.Sleep(admissionHold)
		if err := a.recv(t.Context(), func() error { return nil }); err != nil {
			t.Errorf("a read after the others' hold ran out = %v", err)
		}
		close(release)
		for range 2 {
			if err := <-results; err != nil {
				t.Error(err)
			}
		}
		// A caller that goes away while waiting gets its context's error.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := a.recv(ctx, func() error { return errors.New("read after cancel") }); err == nil || reasonOf(err) == toolpb.ErrorReason_ERROR_REASON_OVERLOADED {
			t.Errorf("a cancelled caller's read = %v", err)
		}
	})
}

// TestIdleRegistrationStreamsDoNotHoldTheBudget: only the first message of a stream is
// counted, so that open registration streams waiting for their next heartbeat, however
// many, never keep runs out.
func TestIdleRegistrationStreamsDoNotHoldTheBudget(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := testContext(t)
	slots := e.cfg.Server.MaxInflightReceiveBytes / e.cfg.Server.MaxReceiveBytes
	for i := range 2 * slots {
		e.registerRaw(ctx, registration(fmt.Sprintf("w-%d", i), builtin.TextGroup()))
	}
	if _, err := e.cl.RunAndWait(ctx, &toolpb.RunRequest{Prompt: "hi"}, nil); err != nil {
		t.Fatalf("a run with %d registration streams open: %v", 2*slots, err)
	}
	if _, err := e.cl.ListTools(ctx); errors.Is(err, client.ErrOverloaded) {
		t.Fatal(err)
	}
}
