package worker

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, min  uint64
		base, want int
	}{
		{4 * mib, 64 * mib, 100, 1500},  // the target becomes 64 MiB
		{32 * mib, 64 * mib, 100, 100},  // 100 already reaches it
		{30 * mib, 64 * mib, 100, 113},  // a little more than the base
		{64 * mib, 64 * mib, 100, 100},  // the live heap passed the floor
		{512 * mib, 64 * mib, 50, 50},   // the environment's GOGC, untouched
		{1000, 64 * mib, 100, 10000},    // bounded
		{0, 64 * mib, 100, 100},         // nothing measured yet
		{4 * mib, 64 * mib, 2000, 2000}, // never below the base
	} {
		if got := gcPercentFor(c.live, c.min, c.base); got != c.want {
			t.Errorf("gcPercentFor(%d, %d, %d) = %d, want %d", c.live, c.min, c.base, got, c.want)
		}
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TuneGC raises GOGC while the live heap is under the floor, follows each collection,
// and puts the environment's value back when stopped.
func TestTuneGC(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	stop := TuneGC(1 << 40) // far above any live heap here
	deadline := time.Now().Add(10 * time.Second)
	for gogc(t) <= 100 {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("GOGC is still %d after collections, want it raised", gogc(t))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if got := gogc(t); got != 100 {
		t.Errorf("GOGC = %d after stop, want 100 back", got)
	}
	// A stopped tuner leaves later collections alone.
	runtime.GC()
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if got := gogc(t); got != 100 {
		t.Errorf("GOGC = %d after stop and two collections, want 100", got)
	}
}

// GOGC=off (a negative percent) is the operator's choice: TuneGC leaves it.
func TestTuneGCLeavesGCOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	stop := TuneGC(64 << 20)
	defer stop()
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GOGC = %d, want off", got)
	}
}
