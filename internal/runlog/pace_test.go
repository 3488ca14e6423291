package runlog

import (
	"fmt"
	"testing"
	"time"
)

// A committer gathers writes only while many runs write at once: runs one at a time
// (however many in a window) never wait for others, 32 runs writing in a window have a
// group wait for 16, and the estimate follows the writers' count down once a window
// passes without them; a run writing after a pause never waits.
func TestPaceGathersOnlyForManyRuns(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	group := func(ids ...string) []*write {
		var g []*write
		for _, id := range ids {
			g = append(g, &write{lease: Lease{RunID: id}})
		}
		return g
	}
	if w := p.want(t0); w != 0 {
		t.Fatalf("before any write: want %d", w)
	}
	// Runs one at a time, each ending before the next starts, a few in each window.
	for i := range 40 {
		g := group(fmt.Sprint("seq", i/4))
		if i%4 == 3 {
			g[0].kind = writeFinish
		}
		p.note(g, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if w := p.want(t0.Add(40 * time.Millisecond)); w != 0 {
		t.Fatalf("one run at a time: a group waits for %d writes", w)
	}
	// 32 runs, each writing once in the next window, then the window passes.
	at := t0.Add(40 * time.Millisecond)
	p.note(group("solo"), at)
	for i := range 32 {
		p.note(group(fmt.Sprint("run", i)), at.Add(time.Duration(i)*100*time.Microsecond))
	}
	if w := p.want(at.Add(paceWindow)); w != 16 {
		t.Fatalf("33 runs open at once in the window that just ended: a group waits for %d writes, want 16", w)
	}
	p.note(group("solo"), at.Add(paceWindow))
	if w := p.want(at.Add(paceWindow + time.Millisecond)); w != 16 {
		t.Fatalf("33 runs open at once in the last window: a group waits for %d writes, want 16", w)
	}
	// Two runs in the window after, one of which ends: no gather.
	end := group("b")
	end[0].kind = writeFinish
	p.note(group("a", "b"), at.Add(paceWindow+time.Millisecond))
	p.note(end, at.Add(paceWindow+2*time.Millisecond))
	p.note(group("a"), at.Add(2*paceWindow+time.Millisecond))
	if w := p.want(at.Add(2*paceWindow + time.Millisecond)); w != 1 {
		t.Fatalf("three runs open at once in the last window: want %d, want 1", w)
	}
	// After a pause, a run writing alone does not wait, whatever the windows before held.
	var q pace
	for i := range 32 {
		q.note(group(fmt.Sprint("run", i)), t0)
	}
	if w := q.want(t0.Add(time.Minute)); w != 0 {
		t.Fatalf("a run writing a minute after 32 did: a group waits for %d writes", w)
	}
	q.note(group("late"), t0.Add(time.Minute))
	if w := q.want(t0.Add(time.Minute + time.Millisecond)); w != 0 {
		t.Fatalf("a run writing a minute after 32 did, then once more: a group waits for %d writes", w)
	}
	// The window's count is bounded, however many runs write.
	for i := range 10 * maxGroup {
		p.note(group(fmt.Sprint("many", i)), at.Add(2*paceWindow+2*time.Millisecond))
	}
	p.note(group("a"), at.Add(4*paceWindow))
	if w := p.want(at.Add(4 * paceWindow)); w != maxGroup || len(p.runs) > 2*maxGroup {
		t.Fatalf("after 2560 runs in a window: want %d (max %d), %d runs kept", w, maxGroup, len(p.runs))
	}
}
