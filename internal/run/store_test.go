package run

import (
	"errors"
	"regexp"
	"testing"
	"time"
)

func TestStoreRetention(t *testing.T) {
	s := newStore(2, 2)
	nop := func(error) {}
	start := func(id string) *record {
		t.Helper()
		r, err := s.start(id, "", nop)
		if err != nil {
			t.Fatalf("start(%q): %v", id, err)
		}
		return r
	}
	a, b := start("a"), start("b")
	if _, err := s.start("c", "", nop); !errors.Is(err, ErrFull) {
		t.Fatalf("third live run: %v, want ErrFull", err)
	}
	if _, err := s.start("a", "", nop); !errors.Is(err, ErrExists) {
		t.Fatalf("live id again: %v, want ErrExists", err)
	}
	s.finish(a)
	s.finish(b)
	c := start("c")
	s.finish(c) // retains b and c; a is forgotten
	if s.get("a") != nil || s.get("b") != b || s.get("c") != c {
		t.Fatalf("after three runs with retention 2: a=%p b=%p c=%p", s.get("a"), s.get("b"), s.get("c"))
	}

	// Reusing the id of a retained finished run replaces it, and the old run's eviction
	// later must not forget the new one.
	b2 := start("b")
	if s.get("b") != b2 {
		t.Fatal("reusing a finished id did not replace it")
	}
	d := start("d")
	s.finish(d)
	e := start("e")
	s.finish(e) // retains d and e
	if s.get("b") != b2 {
		t.Fatal("the live run b was forgotten when older runs were evicted")
	}
	s.finish(b2)
	if s.liveCount() != 0 || s.get("b") != b2 || s.get("c") != nil {
		t.Errorf("live %d, b=%p (want %p), c=%p", s.liveCount(), s.get("b"), b2, s.get("c"))
	}

	// Retention zero: finished runs are forgotten at once.
	z := newStore(1, 0)
	r, _ := z.start("x", "", nop)
	z.finish(r)
	if z.get("x") != nil {
		t.Error("retain 0 kept a finished run")
	}
	s.close()
	if _, err := s.start("f", "", nop); !errors.Is(err, ErrClosed) {
		t.Errorf("start after close: %v, want ErrClosed", err)
	}
}

// A tenant's bound of live runs counts its runs alone, child runs aside, and frees a
// place when one ends.
func TestTenantLimit(t *testing.T) {
	nop := func(error) {}
	s := newStore(10, 10)
	a1, err := s.startLimited("a1", "acme", 2, nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.startLimited("a2", "acme", 2, nop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.startChild("a1-child", "acme", nop); err != nil {
		t.Fatal(err)
	}
	if _, err := s.startLimited("a3", "acme", 2, nop); !errors.Is(err, ErrTenantFull) {
		t.Fatalf("a third run of acme: %v, want ErrTenantFull", err)
	}
	if _, err := s.startLimited("g1", "globex", 2, nop); err != nil {
		t.Fatalf("another tenant's run: %v", err)
	}
	s.finish(a1)
	if _, err := s.startLimited("a3", "acme", 2, nop); err != nil {
		t.Fatalf("acme's run after one ended: %v", err)
	}
	r, _ := s.startLimited("x", "initech", 1, nop)
	s.discard(r)
	if _, err := s.startLimited("y", "initech", 1, nop); err != nil {
		t.Fatalf("a run after a discarded one: %v", err)
	}
}

// Finished runs kept in memory are bounded by what they hold as well as by their number:
// runs whose answers are large go first, the oldest first, once they hold more than the
// bound.
func TestStoreRetentionBytes(t *testing.T) {
	s := newStore(10, 1000, 1<<20)
	big := string(make([]byte, 200<<10))
	for i := range 20 {
		r, err := s.start(string(rune('a'+i)), "", func(error) {})
		if err != nil {
			t.Fatal(err)
		}
		r.snap.FinalText = big
		s.finish(r)
	}
	if len(s.finished) > 5 || s.finishedBytes > 1<<20 {
		t.Errorf("%d finished runs kept, holding %d bytes; the bound is 1 MiB", len(s.finished), s.finishedBytes)
	}
	if s.get("t") == nil || s.get("a") != nil {
		t.Error("the newest run is not kept, or the oldest is")
	}
}

// Run ids sort by when they were made, so that the journal's indexes, keyed by them, are
// appended to; within one millisecond they are still distinct.
func TestNewIDSortsByTime(t *testing.T) {
	lastID.Lock()
	lastID.raw = [14]byte{} // ids of runs the package's other tests made are later than at
	lastID.Unlock()
	at := time.UnixMilli(1_765_000_000_000)
	a, b := newIDAt(at), newIDAt(at.Add(time.Millisecond))
	if !regexp.MustCompile(`^run_[0-9a-f]{28}$`).MatchString(a) {
		t.Fatalf("id %q, want run_ and 28 hex digits", a)
	}
	if a >= b {
		t.Fatalf("%q made before %q does not sort before it", a, b)
	}
	if a[:16] != "run_019af232b200" {
		t.Fatalf("id %q does not start with its milliseconds, 019af232b200", a)
	}
	// Ids made in one millisecond, and one made with a clock gone back, still grow.
	prev := b
	for i := range 1000 {
		when := at.Add(time.Millisecond)
		if i == 500 {
			when = at
		}
		id := newIDAt(when)
		if id <= prev {
			t.Fatalf("id %q made after %q does not sort after it", id, prev)
		}
		prev = id
	}
}
