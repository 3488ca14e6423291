package worker

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// TuneGC keeps the garbage collector's heap target at minHeap bytes or more, for the
// life of the process or until stop is called.
//
// A worker keeps nothing between calls, so its live heap is a few MiB, and Go's
// collector, which lets the heap grow by GOGC percent of what is live (and to at least
// 4 MiB), then runs every few hundred calls: measured at 32 calls in flight, collection
// took a quarter of a worker's CPU, most of it the fixed cost of each cycle (scanning
// every goroutine's stack). TuneGC raises GOGC, after each collection, to what makes the
// next target minHeap while the live heap is smaller; once the live heap passes minHeap,
// GOGC is back at its value from the environment and the collector behaves as usual. The
// cost is memory: the heap grows to about minHeap between collections.
//
// GOGC=off in the environment and minHeap of zero leave the collector alone. With a
// memory limit (GOMEMLIMIT or debug.SetMemoryLimit), minHeap is capped at half of it.
// cmd/toolworker calls it with 64 MiB unless -gc-min-heap says otherwise; a worker of
// your own can call it from its main.
func TuneGC(minHeap uint64) (stop func()) {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base < 0 || minHeap == 0 {
		return func() {}
	}
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < math.MaxInt64 {
		minHeap = min(minHeap, uint64(limit)/2)
	}
	t := &gcTuner{min: minHeap, base: base, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.adjust()
	t.arm()
	return t.stop
}

// gcTuner sets GOGC after every collection; a cleanup of an object allocated for the
// purpose, which the next collection finds unreachable, runs it and allocates the next.
type gcTuner struct {
	mu      sync.Mutex
	min     uint64
	base    int
	current int
	stopped bool
	sample  []metrics.Sample
}

// sentinel is what the tuner hangs its cleanup on: it has a pointer, so the tiny
// allocator (whose objects may share a block and never be freed) does not serve it.
type sentinel struct{ _ *byte }

func (t *gcTuner) arm() {
	runtime.AddCleanup(&sentinel{}, func(t *gcTuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets GOGC for the live heap the last collection left; it reports whether the
// tuner goes on.
func (t *gcTuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	pct := t.base
	if s := t.sample[0]; s.Value.Kind() == metrics.KindUint64 {
		pct = gcPercentFor(s.Value.Uint64(), t.min, t.base)
	}
	if pct != t.current {
		debug.SetGCPercent(pct)
		t.current = pct
	}
	return true
}

func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}

// maxGCPercent bounds the GOGC the tuner sets: with an almost empty heap, the target is
// then 100 × the live heap rather than minHeap.
const maxGCPercent = 10000

// gcPercentFor is the GOGC that puts the next heap target at minHeap for a live heap of
// live bytes, never below base.
func gcPercentFor(live, minHeap uint64, base int) int {
	if live == 0 || live >= minHeap {
		return base
	}
	pct := (minHeap - live) * 100 / live
	return int(max(uint64(base), min(pct, maxGCPercent)))
}
