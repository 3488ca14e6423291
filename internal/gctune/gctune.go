// Package gctune keeps the garbage collector's heap target from shrinking to nothing in
// a process whose live heap is tiny, as a worker's is: cmd/toolworker uses it.
package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Start keeps the garbage collector's heap target at minHeap bytes or more, for the
// life of the process or until stop is called.
//
// A worker keeps nothing between calls, so its live heap is a few MiB, and Go's
// collector, which lets the heap grow by GOGC percent of what it counts as live (and to
// at least 4 MiB), then runs every few hundred calls: measured at 32 calls in flight,
// collection took a quarter of a worker's CPU, most of it the fixed cost of each cycle
// (scanning every goroutine's stack). After each collection Start sets GOGC to what puts
// the next target at minHeap while the live heap is smaller; once the live heap passes
// minHeap, GOGC is back at the value it had when Start was called and the collector
// behaves as usual. The cost is memory: the heap grows to about minHeap between
// collections.
//
// GOGC=off (in the environment or set before) and minHeap of zero leave the collector
// alone. The GOGC in force when Start is called is the floor of what it sets, and stop
// sets it again. With a memory limit (GOMEMLIMIT or debug.SetMemoryLimit), minHeap is
// capped at half of it. cmd/toolworker calls it with 64 MiB unless -gc-min-heap-mib says
// otherwise.
func Start(minHeap uint64) (stop func()) {
	base := currentGOGC()
	if base < 0 || minHeap == 0 {
		return func() {}
	}
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < math.MaxInt64 {
		minHeap = min(minHeap, uint64(limit)/2)
	}
	t := &gcTuner{min: minHeap, base: base, current: base, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}, {Name: "/gc/heap/goal:bytes"}}}
	t.adjust()
	t.arm()
	return t.stop
}

// currentGOGC is the GOGC in force (GOGC in the environment, or debug.SetGCPercent's),
// read without setting it: -1 for off.
func currentGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	if v := s[0].Value.Uint64(); v <= math.MaxInt32 {
		return int(v)
	}
	return -1 // off: the runtime's -1 read as unsigned
}

// gcTuner sets GOGC after every collection; a cleanup of an object allocated for the
// purpose, which the next collection finds unreachable, runs it and allocates the next.
// While it runs it owns GOGC: a debug.SetGCPercent of someone else's is overwritten at
// the next collection.
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
	var v [4]uint64 // live heap, stacks, globals, the heap goal
	for i, s := range t.sample {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	live := v[0]
	pct := gcPercentFor(live, v[1]+v[2], t.min, t.base)
	t.set(pct)
	if pct > t.base {
		// The collector adds to the live heap GOGC percent of what it counts as the heap's
		// work (more than the stack and globals the metrics show): read the goal this
		// percent gave and scale it to the floor.
		metrics.Read(t.sample[3:])
		if s := t.sample[3]; s.Value.Kind() == metrics.KindUint64 && s.Value.Uint64() > live {
			work := (s.Value.Uint64() - live) * 100 / uint64(pct)
			t.set(gcPercentFor(live, work-min(work, live), t.min, t.base))
		}
	}
	return true
}

func (t *gcTuner) set(pct int) {
	if pct != t.current {
		debug.SetGCPercent(pct)
		t.current = pct
	}
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
// live bytes, never below base. The collector's target is live + (live + roots) × GOGC /
// 100, the roots being the goroutine stacks and the globals it scans.
func gcPercentFor(live, roots, minHeap uint64, base int) int {
	if live == 0 || live >= minHeap {
		return base
	}
	pct := (minHeap - live) * 100 / (live + roots)
	return int(max(uint64(base), min(pct, maxGCPercent)))
}
