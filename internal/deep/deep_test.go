package deep

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A panic in a deep piece of work is raised again in its caller, whose recovery (the
// server's interceptor) sees the value and where it happened.
func TestRunPanics(t *testing.T) {
	defer func() {
		v := recover()
		p, ok := v.(*Panic)
		if !ok {
			t.Fatalf("recovered %#v, want a *Panic", v)
		}
		if p.Value != "boom" || !strings.Contains(p.Error(), "TestRunPanics") {
			t.Errorf("panic = %q, want boom with the stack of the function that panicked", p.Error())
		}
	}()
	Run(func() { panic("boom") })
	t.Fatal("Run returned after a panic")
}

// Run waits for its work, and what the work sets is there when it returns. The work
// sleeps on the fake clock of a synctest bubble first: a Run that did not wait would
// return while the work sleeps.
func TestRunWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var err error
		Run(func() {
			time.Sleep(10 * time.Millisecond)
			err = errors.New("set")
		})
		if err == nil {
			t.Fatal("Run returned before its work was done")
		}
	})
}

// runtime.Goexit in a deep piece of work (t.FailNow in a test's provider, say) ends the
// caller's goroutine too, rather than returning as if the work had been done.
func TestRunGoexit(t *testing.T) {
	done, after := make(chan struct{}), false
	go func() {
		defer close(done)
		Run(func() { runtime.Goexit() })
		after = true
	}()
	<-done
	if after {
		t.Error("Run returned after its work called runtime.Goexit")
	}
}
