package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, roots, min uint64
		base, want       int
	}{
		{4 * mib, 0, 64 * mib, 100, 1500},       // the target becomes 64 MiB
		{4 * mib, 2 * mib, 64 * mib, 100, 1000}, // stacks and globals count towards it
		{32 * mib, 0, 64 * mib, 100, 100},       // 100 already reaches it
		{30 * mib, 0, 64 * mib, 100, 113},       // a little more than the base
		{64 * mib, 0, 64 * mib, 100, 100},       // the live heap passed the floor
		{512 * mib, 0, 64 * mib, 50, 50},        // the environment's GOGC, untouched
		{1000, 0, 64 * mib, 100, 10000},         // bounded
		{0, 0, 64 * mib, 100, 100},              // nothing measured yet
		{4 * mib, 0, 64 * mib, 2000, 2000},      // never below the base
	} {
		if got := gcPercentFor(c.live, c.roots, c.min, c.base); got != c.want {
			t.Errorf("gcPercentFor(%d, %d, %d, %d) = %d, want %d", c.live, c.roots, c.min, c.base, got, c.want)
		}
	}
}

func grow(n int) byte {
	var b [1024]byte
	if n == 0 {
		return b[0]
	}
	return grow(n-1) + b[n%1024]
}

// The heap target Start sets is about minHeap, stacks and globals included: a worker's
// stream workers hold grown stacks, which GOGC applies to as it does to the live heap.
func TestTuneGCTargetsMinHeap(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	var wg, grown sync.WaitGroup
	release := make(chan struct{})
	for range 256 { // the stream workers of a worker of capacity 256
		grown.Add(1)
		wg.Go(func() { grow(30); grown.Done(); <-release }) // about 32 KiB of stack each, as a call grows it
	}
	grown.Wait()
	defer func() { close(release); wg.Wait() }()
	const minHeap = 64 << 20
	stop := Start(minHeap)
	defer stop()
	for range 5 {
		collect(t)
	}
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	if goal := s[0].Value.Uint64(); goal > minHeap*5/4 {
		t.Errorf("heap goal %d MiB, over the %d MiB Start keeps it at", goal>>20, minHeap>>20)
	}
}

// collect runs a collection and waits until the cleanups it queued have run, the
// tuner's among them (Start follows collections from a cleanup). The runtime runs
// cleanups on goroutines of its own, outside any synctest bubble, and tells nothing when
// they are done: this polls its counts of cleanups queued and executed, yielding the
// processor between reads, until no cleanup is left to run.
func collect(t *testing.T) {
	t.Helper()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/cleanups/queued:cleanups"}, {Name: "/gc/cleanups/executed:cleanups"}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		metrics.Read(s)
		queued, executed := s[0].Value.Uint64(), s[1].Value.Uint64()
		if executed >= queued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d cleanups still to run 10 s after a collection", queued-executed)
		}
		runtime.Gosched()
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// Start raises GOGC while the live heap is under the floor, follows each collection,
// and puts the environment's value back when stopped.
func TestStart(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	stop := Start(1 << 40) // far above any live heap here
	defer stop()
	for n := 0; gogc(t) <= 100; n++ {
		if n == 10 {
			stop()
			t.Fatalf("GOGC is still %d after %d collections, want it raised", gogc(t), n)
		}
		collect(t)
	}
	stop()
	if got := gogc(t); got != 100 {
		t.Errorf("GOGC = %d after stop, want 100 back", got)
	}
	// A stopped tuner leaves later collections alone.
	collect(t)
	collect(t)
	if got := gogc(t); got != 100 {
		t.Errorf("GOGC = %d after stop and two collections, want 100", got)
	}
}

// GOGC=off (a negative percent) is the operator's choice: Start leaves it.
func TestTuneGCLeavesGCOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	stop := Start(64 << 20)
	defer stop()
	collect(t)
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GOGC = %d, want off", got)
	}
}
