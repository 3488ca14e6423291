package toolinternal_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolmesh/toolmesh/internal/toolinternal"
)

func loop(id string) string { return id }

func TestLoopMemo(t *testing.T) {
	t.Run("first call true, repeats false", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		if !m.FirstTimeInLoop(loop("a")) {
			t.Error("first call: want true")
		}
		for range 3 {
			if m.FirstTimeInLoop(loop("a")) {
				t.Error("repeat: want false")
			}
		}
	})
	t.Run("different ids are each first", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		for _, id := range []string{"a", "b", "c"} {
			if !m.FirstTimeInLoop(loop(id)) {
				t.Errorf("%s: want true", id)
			}
		}
	})
	t.Run("interleaved ids are independent", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		for i, step := range []struct {
			id   string
			want bool
		}{{"a", true}, {"b", true}, {"a", false}, {"c", true}, {"b", false}, {"c", false}, {"a", false}} {
			if got := m.FirstTimeInLoop(loop(step.id)); got != step.want {
				t.Errorf("step %d (%s) = %v, want %v", i, step.id, got, step.want)
			}
		}
	})
	t.Run("missing id is always true", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		for range 3 {
			if !m.FirstTimeInLoop("") {
				t.Error("no loop id: want true")
			}
		}
	})
	t.Run("Empty is the same as a missing id", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		for range 3 {
			if !m.FirstTimeInLoop("") {
				t.Error("Empty: want true")
			}
		}
	})
	t.Run("missing id does not pollute later ids", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(1)
		m.FirstTimeInLoop("")
		m.FirstTimeInLoop("")
		if !m.FirstTimeInLoop(loop("a")) || m.FirstTimeInLoop(loop("a")) {
			t.Error("a real id after missing ids: want true then false")
		}
		m.FirstTimeInLoop("") // must not evict a from a memo of one
		if m.FirstTimeInLoop(loop("a")) {
			t.Error("a missing id evicted a real one")
		}
	})
	t.Run("separate instances are independent", func(t *testing.T) {
		m1, m2 := toolinternal.NewLoopMemo(0), toolinternal.NewLoopMemo(0)
		if !m1.FirstTimeInLoop(loop("a")) || !m2.FirstTimeInLoop(loop("a")) {
			t.Error("each instance should see a for the first time")
		}
		if m1.FirstTimeInLoop(loop("a")) || m2.FirstTimeInLoop(loop("a")) {
			t.Error("each instance should remember a")
		}
	})
	t.Run("context and plain id agree", func(t *testing.T) {
		m := toolinternal.NewLoopMemo(0)
		if !m.FirstTimeInLoop("a") || m.FirstTimeInLoop(loop("a")) {
			t.Error("FirstTimeInLoop and FirstTimeIn do not share the memo")
		}
	})
}

func TestLoopMemoEviction(t *testing.T) {
	m := toolinternal.NewLoopMemo(2)
	for _, id := range []string{"a", "b", "c"} {
		if !m.FirstTimeInLoop(id) {
			t.Fatalf("%s: want true", id)
		}
	}
	if !m.FirstTimeInLoop("a") {
		t.Error("a was evicted by c: want first time again")
	}
	// Now the memo holds c and a; b was evicted when a came back.
	if m.FirstTimeInLoop("c") || m.FirstTimeInLoop("a") {
		t.Error("c and a should be remembered")
	}
	if !m.FirstTimeInLoop("b") {
		t.Error("b should have been evicted")
	}
}

func TestLoopMemoEvictionIsInsertionOrder(t *testing.T) {
	m := toolinternal.NewLoopMemo(2)
	m.FirstTimeInLoop("a")
	m.FirstTimeInLoop("b")
	m.FirstTimeInLoop("a") // seeing a again does not refresh it
	m.FirstTimeInLoop("c") // evicts a, the oldest insertion
	if !m.FirstTimeInLoop("a") {
		t.Error("re-seeing a refreshed it")
	}
}

func TestLoopMemoDefault(t *testing.T) {
	if toolinternal.DefaultMaxTracked != 1024 {
		t.Fatalf("DefaultMaxTracked = %d", toolinternal.DefaultMaxTracked)
	}
	for _, n := range []int{0, -1} {
		if got := toolinternal.NewLoopMemo(n).MaxTracked(); got != 1024 {
			t.Errorf("NewLoopMemo(%d).MaxTracked() = %d, want 1024", n, got)
		}
	}
	m := toolinternal.NewLoopMemo(0)
	for i := range 1024 {
		m.FirstTimeInLoop(fmt.Sprint(i))
	}
	if m.FirstTimeInLoop("0") {
		t.Error("1024 ids should all be remembered")
	}
	m.FirstTimeInLoop("1024")
	if !m.FirstTimeInLoop("0") {
		t.Error("the 1025th id should evict the first")
	}
}

func TestLoopMemoConcurrency(t *testing.T) {
	m := toolinternal.NewLoopMemo(4)
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		var firsts atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 64 {
			wg.Go(func() {
				<-start
				if m.FirstTimeInLoop(loop(id)) {
					firsts.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := firsts.Load(); got != 1 {
			t.Errorf("loop %s: %d concurrent first-timers, want exactly 1", id, got)
		}
	}
}
