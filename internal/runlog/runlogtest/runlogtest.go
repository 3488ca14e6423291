// Package runlogtest is the conformance suite every runlog.Store passes: the SQLite and
// the PostgreSQL journals run the same tests, crash tests included.
package runlogtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// Opener opens the store under test; every call opens the same journal (so that a test
// can reopen it), and the suite closes what it opens.
type Opener func(t *testing.T) runlog.Store

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func recs(from int64, kinds ...runlog.Kind) []runlog.Record {
	out := make([]runlog.Record, len(kinds))
	for i, k := range kinds {
		out[i] = runlog.Record{Seq: from + int64(i), Kind: k, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, from+int64(i)))}
	}
	return out
}

// Run runs the suite. Each test uses run ids of its own, so the journal may be shared.
func Run(t *testing.T, open Opener) {
	run(t, open, true)
}

// RunVolatile runs the suite on a store that does not outlive its process (OpenMemory):
// all but reopening.
func RunVolatile(t *testing.T, open Opener) {
	run(t, open, false)
}

func run(t *testing.T, open Opener, durable bool) {
	t.Run("create, append, read", func(t *testing.T) { testAppendRead(t, open) })
	t.Run("sequence conflicts", func(t *testing.T) { testConflicts(t, open) })
	t.Run("leases and fencing", func(t *testing.T) { testFencing(t, open) })
	t.Run("finish", func(t *testing.T) { testFinish(t, open) })
	t.Run("list and expired", func(t *testing.T) { testList(t, open) })
	t.Run("racing appenders", func(t *testing.T) { testRace(t, open) })
	t.Run("a take-over racing the owner's appends", func(t *testing.T) { testTakeOverRace(t, open) })
	t.Run("invalid input", func(t *testing.T) { testInvalid(t, open) })
	if durable {
		t.Run("survives reopening", func(t *testing.T) { testReopen(t, open) })
	}
	t.Run("prune", func(t *testing.T) { testPrune(t, open) })
	t.Run("decisions", func(t *testing.T) { testDecisions(t, open) })
	t.Run("appends of many runs at once", func(t *testing.T) { testManyRuns(t, open) })
	t.Run("created with its first records", func(t *testing.T) { testCreateWith(t, open) })
	t.Run("read by kind", func(t *testing.T) { testReadKinds(t, open) })
	t.Run("read by a kind without a bit of its own", func(t *testing.T) { testReadOtherKinds(t, open) })
	t.Run("last record of a kind", func(t *testing.T) { testLast(t, open) })
	t.Run("known workers", func(t *testing.T) { testWorkers(t, open) })
	t.Run("any bytes, read across appends", func(t *testing.T) { testBytes(t, open) })
	t.Run("finished with its last records", func(t *testing.T) { testFinishWith(t, open) })
	t.Run("held runs", func(t *testing.T) { testHold(t, open) })
	t.Run("leases renewed together", func(t *testing.T) { testRenewAll(t, open) })
}

// A record holds any bytes, and reads after any record, with any limit and kinds, see
// exactly the records after it, whichever appends wrote them.
func testBytes(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "by-1", "o1", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte{0, 0xff, '{'}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []runlog.Kind{runlog.KindModel, runlog.KindEvent, runlog.KindDispatch, runlog.KindEvent, runlog.KindOutcome, runlog.KindDelta, "custom"}
	seq := int64(2)
	var want []runlog.Record
	want = append(want, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte{0, 0xff, '{'}})
	for size := 1; size <= 5; size++ {
		var rs []runlog.Record
		for range size {
			r := runlog.Record{Seq: seq, Kind: kinds[int(seq)%len(kinds)], Data: []byte(fmt.Sprintf("\x00%d\xfe", seq))}
			if seq%4 == 0 {
				r.Data = nil // no data
			}
			rs = append(rs, r)
			seq++
		}
		if err := s.Append(c, l, rs); err != nil {
			t.Fatal(err)
		}
		want = append(want, rs...)
	}
	for after := int64(0); after <= seq; after++ {
		for _, limit := range []int{0, 1, 2, 7} {
			for _, ks := range [][]runlog.Kind{nil, {runlog.KindEvent}, {runlog.KindEvent, "custom"}, {runlog.KindEnd}} {
				got, err := s.Read(c, "by-1", after, limit, ks...)
				if err != nil {
					t.Fatalf("Read(%d, %d, %v): %v", after, limit, ks, err)
				}
				var exp []runlog.Record
				for _, r := range want {
					if r.Seq > after && (len(ks) == 0 || slices.Contains(ks, r.Kind)) && (limit == 0 || len(exp) < limit) {
						exp = append(exp, r)
					}
				}
				if len(got) != len(exp) {
					t.Fatalf("Read(%d, %d, %v): %d records, want %d", after, limit, ks, len(got), len(exp))
				}
				for i := range exp {
					if got[i].Seq != exp[i].Seq || got[i].Kind != exp[i].Kind || string(got[i].Data) != string(exp[i].Data) || got[i].RunID != "by-1" {
						t.Fatalf("Read(%d, %d, %v)[%d] = %+v, want %+v", after, limit, ks, i, got[i], exp[i])
					}
				}
			}
		}
	}
	if r, _ := s.Get(c, "by-1"); r.Records != seq-1 {
		t.Errorf("Get: %d records, want %d", r.Records, seq-1)
	}
	big := make([]runlog.Record, 3)
	for i := range big {
		big[i] = runlog.Record{Seq: seq + int64(i), Kind: runlog.KindEvent, Data: make([]byte, runlog.MaxRecordBytes)}
	}
	if err := s.Append(c, l, big); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("an append over %d bytes: %v, want ErrInvalid", runlog.MaxAppendBytes, err)
	}
}

// Finish appends the last records and ends the run in one step; a Finish whose records
// do not follow, or under a stale lease, changes nothing.
func testFinishWith(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "fw-1", "o1", time.Minute, recs(1, runlog.KindRequest)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(c, l, runlog.StateSucceeded, recs(3, runlog.KindEnd)...); !errors.Is(err, runlog.ErrConflict) {
		t.Errorf("a finish whose records skip one: %v, want ErrConflict", err)
	}
	if r, _ := s.Get(c, "fw-1"); r.State != runlog.StateRunning || r.Records != 1 {
		t.Errorf("after a refused finish: %+v", r)
	}
	if err := s.Finish(c, l, runlog.StateFailed, recs(2, runlog.KindEvent, runlog.KindEnd)...); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(c, "fw-1")
	if err != nil || r.State != runlog.StateFailed || r.Records != 3 {
		t.Errorf("after the finish: %+v, %v", r, err)
	}
	if last, _ := s.Read(c, "fw-1", 2, 0); len(last) != 1 || last[0].Kind != runlog.KindEnd {
		t.Errorf("the last record: %+v", last)
	}
	if err := s.Finish(c, l, runlog.StateSucceeded, recs(4, runlog.KindEnd)...); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("a second finish: %v, want ErrFenced", err)
	}
}

// testRenewAll: RenewAll renews the leases of runs that go on, reads each one's
// decision under its key, and leaves to Renew those it cannot renew (stale, finished,
// unknown), which Renew then refuses as it would have alone.
func testRenewAll(t *testing.T, open Opener) {
	s := openT(t, open)
	c := ctx(t)
	var leases []runlog.Lease
	for i := range 5 {
		l, err := s.Create(c, fmt.Sprintf("renew-%d", i), "o1", time.Second, recs(1, runlog.KindRequest)...)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	// renew-1 finished, renew-2 taken over by another owner (its lease ran out), renew-3
	// asked to cancel and renew-4 approved under another key.
	if err := s.Finish(c, leases[1], runlog.StateSucceeded); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the leases' second
	if _, err := s.Acquire(c, "renew-2", "o2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(c, "renew-3", "cancel", runlog.Decision{Reason: "the user asked", By: "o2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(c, "renew-4", "call-1", runlog.Decision{Approve: true, By: "o2"}); err != nil {
		t.Fatal(err)
	}
	gone := runlog.Lease{RunID: "renew-none", Owner: "o1", Epoch: 1}
	got := s.RenewAll(c, append(slices.Clone(leases), gone), time.Minute, "cancel")
	if len(got) != 6 {
		t.Fatalf("RenewAll of 6 leases: %d results", len(got))
	}
	for _, i := range []int{0, 3, 4} {
		r := got[i]
		if r.Err != nil || r.Lease.RunID != leases[i].RunID || r.Lease.Epoch != leases[i].Epoch || time.Until(r.Lease.Until) < 50*time.Second {
			t.Errorf("lease %d: %+v, want it renewed for a minute", i, r)
		}
		if run, _ := s.Get(c, leases[i].RunID); time.Until(run.Until) < 50*time.Second {
			t.Errorf("lease %d: the run's lease runs until %s", i, run.Until)
		}
		if r.Decided != (i == 3) {
			t.Errorf("lease %d: decided %v", i, r.Decided)
		}
	}
	if d := got[3].Decision; got[3].Decided && (d.Approve || d.Reason != "the user asked" || d.By != "o2" || d.Time.IsZero()) {
		t.Errorf("renew-3's decision: %+v", d)
	}
	for i, want := range map[int]error{1: runlog.ErrFenced, 2: runlog.ErrFenced, 5: runlog.ErrNotFound} {
		if !errors.Is(got[i].Err, runlog.ErrRenewAlone) {
			t.Errorf("lease %d: %v, want ErrRenewAlone", i, got[i].Err)
		}
		l := append(slices.Clone(leases), gone)[i]
		if _, err := s.Renew(c, l, time.Minute); !errors.Is(err, want) {
			t.Errorf("lease %d renewed alone: %v, want %v", i, err, want)
		}
	}
	if run, _ := s.Get(c, "renew-2"); run.Owner != "o2" {
		t.Errorf("the run taken over: %+v", run)
	}
	if got := s.RenewAll(c, nil, time.Minute, "cancel"); len(got) != 0 {
		t.Errorf("RenewAll of none: %v", got)
	}
	many := make([]runlog.Lease, runlog.MaxRenewals+1)
	for i := range many {
		many[i] = leases[0]
	}
	for _, r := range s.RenewAll(c, many, time.Minute, "cancel") {
		if !errors.Is(r.Err, runlog.ErrInvalid) {
			t.Fatalf("RenewAll of %d leases: %v, want ErrInvalid", len(many), r.Err)
		}
	}
}

// A held run keeps its records and its note, is neither expired nor pruned, refuses
// writes under the lease it was held with, and is taken again by Acquire, by anyone.
func testHold(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "ho-1", "o1", time.Minute, recs(1, runlog.KindRequest)...)
	if err != nil {
		t.Fatal(err)
	}
	// Text no store keeps (PostgreSQL refuses the whole statement that carries it, other
	// runs' writes with it) is refused alone; runlog.Note makes any text a note.
	for _, bad := range []string{"cut \xe2\x82", "nul \x00 byte", "bad \xff"} {
		if err := s.Hold(c, l, bad); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Hold with the note %q: %v, want ErrInvalid", bad, err)
		}
		if _, err := s.Create(c, "ho-"+bad, "o1", time.Minute); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Create of the run %q: %v, want ErrInvalid", bad, err)
		}
		if err := s.Append(c, l, []runlog.Record{{Seq: 2, Kind: runlog.Kind(bad)}}); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Append of a record of kind %q: %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.Hold(c, l, runlog.Note("record 7 is damaged")); err != nil {
		t.Fatal(err)
	}
	r, err := s.Get(c, "ho-1")
	if err != nil || r.State != runlog.StateHeld || r.Note != "record 7 is damaged" || r.State.Terminal() {
		t.Fatalf("a held run: %+v, %v", r, err)
	}
	if err := s.Append(c, l, recs(2, runlog.KindEvent)); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("an append to a held run: %v, want ErrFenced", err)
	}
	if err := s.Hold(c, l, "again"); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("a second hold: %v, want ErrFenced", err)
	}
	if exp, _ := s.Expired(c, 0); hasRun(exp, "ho-1") {
		t.Error("a held run is listed as expired")
	}
	if held, _ := s.List(c, runlog.Filter{State: runlog.StateHeld}); !hasRun(held, "ho-1") {
		t.Error("a held run is not listed as held")
	}
	if _, err := s.Prune(c, time.Now().Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	l2, err := s.Acquire(c, "ho-1", "o2", time.Minute)
	if err != nil || l2.Epoch != l.Epoch+1 {
		t.Fatalf("acquire a held run: %+v, %v", l2, err)
	}
	if r, _ := s.Get(c, "ho-1"); r.State != runlog.StateRunning || r.Note != "" || r.Records != 1 {
		t.Errorf("a held run taken again: %+v", r)
	}
	if err := s.Append(c, l2, recs(2, runlog.KindEvent)); err != nil {
		t.Errorf("an append after taking it again: %v", err)
	}
}

// Prune deletes finished runs older than the cut with their records, never a running
// one.
func testPrune(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	done, err := s.Create(c, "pr-done", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, done, recs(1, runlog.KindRequest)); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(c, done, runlog.StateSucceeded); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(c, "pr-running", "o1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(c, time.Now().Add(-time.Hour), 0); err != nil || n != 0 {
		t.Errorf("prune before both: %d, %v", n, err)
	}
	n, err := s.Prune(c, time.Now().Add(time.Second), 0)
	if err != nil || n < 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
	if _, err := s.Get(c, "pr-done"); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("the finished run is still there: %v", err)
	}
	if _, err := s.Read(c, "pr-done", 0, 0); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("its records are still there: %v", err)
	}
	if r, err := s.Get(c, "pr-running"); err != nil || r.State != runlog.StateRunning {
		t.Errorf("the running run: %+v, %v", r, err)
	}
	// A pruned run's id is free again: a client may start a run of that id.
	again, err := s.Create(c, "pr-done", "o2", time.Minute, recs(1, runlog.KindRequest)...)
	if err != nil {
		t.Fatalf("creating a run of a pruned run's id: %v", err)
	}
	if err := s.Append(c, again, recs(2, runlog.KindModel)); err != nil {
		t.Fatalf("appending to it: %v", err)
	}
	if got, err := s.Read(c, "pr-done", 0, 0); err != nil || len(got) != 2 || got[1].Kind != runlog.KindModel {
		t.Errorf("the new run's records: %+v, %v; want its own two", got, err)
	}

	// Many runs, finished and running among them, in one prune (a store may delete them
	// a batch at a time): every finished one goes, with its records, and no running one.
	var finished, running []string
	for i := range 100 {
		id := fmt.Sprintf("pr-many-%03d", i)
		l, err := s.Create(c, id, "o1", time.Minute, recs(1, runlog.KindRequest)...)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 3 {
			running = append(running, id)
			continue
		}
		if err := s.Finish(c, l, runlog.StateSucceeded); err != nil {
			t.Fatal(err)
		}
		finished = append(finished, id)
	}
	if n, err := s.Prune(c, time.Now().Add(time.Second), 0); err != nil || n < len(finished) {
		t.Fatalf("prune of %d finished runs: %d, %v", len(finished), n, err)
	}
	for _, id := range finished {
		if _, err := s.Read(c, id, 0, 0); !errors.Is(err, runlog.ErrNotFound) {
			t.Errorf("finished run %s is still there: %v", id, err)
		}
	}
	for _, id := range running {
		if got, err := s.Read(c, id, 0, 0); err != nil || len(got) != 1 {
			t.Errorf("running run %s: %d records, %v", id, len(got), err)
		}
	}
}

func openT(t *testing.T, open Opener) runlog.Store {
	s := open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testAppendRead(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "ar-1", "o1", time.Minute)
	if err != nil || l.Epoch != 1 || l.Owner != "o1" {
		t.Fatalf("Create: %+v, %v", l, err)
	}
	if _, err := s.Create(c, "ar-1", "o2", time.Minute); !errors.Is(err, runlog.ErrExists) {
		t.Errorf("Create twice: %v", err)
	}
	if err := s.Append(c, l, recs(1, runlog.KindRequest, runlog.KindModel, runlog.KindDispatch)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(4, runlog.KindOutcome)); err != nil {
		t.Fatal(err)
	}
	all, err := s.Read(c, "ar-1", 0, 0)
	if err != nil || len(all) != 4 {
		t.Fatalf("Read: %d records, %v", len(all), err)
	}
	for i, r := range all {
		if r.Seq != int64(i+1) || r.Epoch != 1 || r.RunID != "ar-1" || string(r.Data) != fmt.Sprintf(`{"n":%d}`, i+1) || r.Time.IsZero() {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if all[3].Kind != runlog.KindOutcome {
		t.Errorf("kind %q", all[3].Kind)
	}
	if some, _ := s.Read(c, "ar-1", 2, 1); len(some) != 1 || some[0].Seq != 3 {
		t.Errorf("Read after 2, limit 1: %+v", some)
	}
	if none, err := s.Read(c, "ar-1", 4, 0); err != nil || len(none) != 0 {
		t.Errorf("Read after the last: %+v, %v", none, err)
	}
	if _, err := s.Read(c, "nobody", 0, 0); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("Read of an unknown run: %v", err)
	}
	r, err := s.Get(c, "ar-1")
	if err != nil || r.Records != 4 || r.State != runlog.StateRunning || r.Owner != "o1" {
		t.Errorf("Get: %+v, %v", r, err)
	}
}

func testConflicts(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "cf-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(1, runlog.KindRequest)); err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{1, 3, 0} {
		if err := s.Append(c, l, recs(from, runlog.KindEvent, runlog.KindEvent)); !errors.Is(err, runlog.ErrConflict) {
			t.Errorf("append from %d: %v, want ErrConflict", from, err)
		}
	}
	if all, _ := s.Read(c, "cf-1", 0, 0); len(all) != 1 {
		t.Errorf("%d records after refused appends, want 1", len(all))
	}
}

func testFencing(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	old, err := s.Create(c, "fe-1", "o1", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(c, "fe-1", "o2", time.Minute); !errors.Is(err, runlog.ErrLeased) {
		t.Errorf("Acquire of a live lease: %v", err)
	}
	if err := s.Append(c, old, recs(1, runlog.KindRequest)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	exp, err := s.Expired(c, 0)
	if err != nil || !hasRun(exp, "fe-1") {
		t.Errorf("Expired: %v, %v", exp, err)
	}
	l2, err := s.Acquire(c, "fe-1", "o2", time.Minute)
	if err != nil || l2.Epoch != 2 || l2.Owner != "o2" {
		t.Fatalf("Acquire after expiry: %+v, %v", l2, err)
	}
	if err := s.Append(c, old, recs(2, runlog.KindEvent)); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("append by the stale owner: %v, want ErrFenced", err)
	}
	if _, err := s.Renew(c, old, time.Minute); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("renew by the stale owner: %v, want ErrFenced", err)
	}
	if err := s.Finish(c, old, runlog.StateSucceeded); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("finish by the stale owner: %v, want ErrFenced", err)
	}
	if err := s.Append(c, l2, recs(2, runlog.KindEvent)); err != nil {
		t.Fatal(err)
	}
	if l3, err := s.Renew(c, l2, time.Minute); err != nil || l3.Epoch != 2 {
		t.Errorf("Renew: %+v, %v", l3, err)
	}
	// The owner that holds the lease may take it again (after its own restart).
	l4, err := s.Acquire(c, "fe-1", "o2", time.Minute)
	if err != nil || l4.Epoch != 3 {
		t.Errorf("Acquire by the holder: %+v, %v", l4, err)
	}
	all, _ := s.Read(c, "fe-1", 0, 0)
	if len(all) != 2 || all[0].Epoch != 1 || all[1].Epoch != 2 {
		t.Errorf("records %+v", all)
	}
}

// Appends of many runs at once (which a store may commit together) each succeed or fail
// on their own: a stale lease fails its appends only.
func testManyRuns(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	stale, err := s.Create(c, "mr-stale", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(c, "mr-stale", "o1", time.Minute); err != nil { // a newer epoch
		t.Fatal(err)
	}
	const runs, batches = 8, 10
	errs := make(chan error, runs*batches+batches)
	var wg sync.WaitGroup
	for r := range runs {
		l, err := s.Create(c, fmt.Sprintf("mr-%d", r), "o1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for b := range batches {
				errs <- s.Append(c, l, recs(int64(b*3+1), runlog.KindEvent, runlog.KindModel, runlog.KindOutcome))
			}
		})
	}
	wg.Go(func() {
		for range batches {
			if err := s.Append(c, stale, recs(1, runlog.KindEvent)); !errors.Is(err, runlog.ErrFenced) {
				errs <- fmt.Errorf("a stale append: %v, want ErrFenced", err)
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for r := range runs {
		got, err := s.Read(c, fmt.Sprintf("mr-%d", r), 0, 0)
		if err != nil || len(got) != 3*batches {
			t.Errorf("run %d: %d records, %v; want %d", r, len(got), err, 3*batches)
		}
		for i, rec := range got {
			if rec.Seq != int64(i+1) {
				t.Errorf("run %d: record %d has sequence %d", r, i, rec.Seq)
				break
			}
		}
	}
	if got, _ := s.Read(c, "mr-stale", 0, 0); len(got) != 0 {
		t.Errorf("the stale lease added %d records", len(got))
	}
}

// A run created with its first records has them from the start, numbered from 1; its
// next append follows them.
func testCreateWith(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "cw-1", "o1", time.Minute, recs(1, runlog.KindRequest)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(2, runlog.KindEvent)); err != nil {
		t.Fatalf("the append after the first records: %v", err)
	}
	got, err := s.Read(c, "cw-1", 0, 0)
	if err != nil || len(got) != 2 || got[0].Kind != runlog.KindRequest || got[1].Seq != 2 {
		t.Errorf("records %+v, %v", got, err)
	}
	if _, err := s.Create(c, "cw-2", "o1", time.Minute, recs(3, runlog.KindRequest)...); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("first records from 3: %v, want ErrInvalid", err)
	}
	if _, err := s.Get(c, "cw-2"); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("a refused Create left the run: %v", err)
	}
}

// Read with kinds returns only records of those kinds, in order, after the given one.
func testReadKinds(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "rk-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(1, runlog.KindRequest, runlog.KindEvent, runlog.KindModel, runlog.KindDelta, runlog.KindEvent, runlog.KindOutcome)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(c, "rk-1", 2, 10, runlog.KindEvent, runlog.KindDelta)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, r := range got {
		seqs = append(seqs, r.Seq)
	}
	if fmt.Sprint(seqs) != "[4 5]" {
		t.Errorf("events and deltas after 2: %v, want [4 5]", seqs)
	}
	if got, _ := s.Read(c, "rk-1", 0, 1, runlog.KindOutcome); len(got) != 1 || got[0].Seq != 6 {
		t.Errorf("the first outcome: %+v", got)
	}
}

// Read and Last by a kind the stores know no bit for (a call policy's decision, or any
// kind a newer orchestrator writes) return records of that kind only, not those of
// another such kind.
func testReadOtherKinds(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	const custom runlog.Kind = "x-custom"
	l, err := s.Create(c, "rok-1", "o1", time.Minute, recs(1, runlog.KindRequest, runlog.KindPolicy, custom)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(4, custom, runlog.KindEvent)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(6, custom)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(c, "rok-1", 0, 0, runlog.KindPolicy)
	if err != nil || len(got) != 1 || got[0].Seq != 2 || got[0].Kind != runlog.KindPolicy {
		t.Errorf("Read of policy records = %+v, %v; want record 2 alone", got, err)
	}
	if got, err := s.Read(c, "rok-1", 0, 2, custom); err != nil || len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 {
		t.Errorf("Read of two %s records = %+v, %v; want records 3 and 4", custom, got, err)
	}
	rec, found, err := s.Last(c, "rok-1", runlog.KindPolicy)
	if err != nil || !found || rec.Seq != 2 || rec.Kind != runlog.KindPolicy {
		t.Errorf("Last policy record = %+v, %v, %v; want record 2", rec, found, err)
	}
	// A read with a limit finds a record of the kind past records of another such kind:
	// a store that reads as many rows of them as the limit asks for records misses it.
	if _, err := s.Get(c, "rok-1"); err != nil { // the appends so far, apart from the next
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(7, runlog.KindPolicy)); err != nil {
		t.Fatal(err)
	}
	for limit, want := range map[int][]int64{1: {2}, 2: {2, 7}, 3: {2, 7}} {
		got, err := s.Read(c, "rok-1", 0, limit, runlog.KindPolicy)
		var seqs []int64
		for _, r := range got {
			seqs = append(seqs, r.Seq)
		}
		if err != nil || !slices.Equal(seqs, want) {
			t.Errorf("Read of policy records, limit %d = %v, %v; want %v", limit, seqs, err, want)
		}
	}
}

// Last finds a run's last record of a kind, across appends and in the middle of one,
// and says when there is none.
func testLast(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	if _, _, err := s.Last(c, "last-none", runlog.KindSnapshot); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("Last of an unknown run: %v, want ErrNotFound", err)
	}
	l, err := s.Create(c, "last-1", "o1", time.Minute, recs(1, runlog.KindRequest)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.Last(c, "last-1", runlog.KindSnapshot); err != nil || found {
		t.Errorf("Last of a run without snapshots: found %v, %v", found, err)
	}
	if err := s.Append(c, l, recs(2, runlog.KindModel, runlog.KindSnapshot, runlog.KindEvent)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(5, runlog.KindOutcome, runlog.KindSnapshot, runlog.KindSnapshot, runlog.KindEvent)); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(9, runlog.KindEvent, runlog.KindDelta)); err != nil {
		t.Fatal(err)
	}
	rec, found, err := s.Last(c, "last-1", runlog.KindSnapshot)
	if err != nil || !found || rec.Seq != 7 || rec.Kind != runlog.KindSnapshot || string(rec.Data) != `{"n":7}` || rec.RunID != "last-1" {
		t.Errorf("the last snapshot: %+v, found %v, %v; want record 7", rec, found, err)
	}
	if rec, found, err := s.Last(c, "last-1", runlog.KindRequest); err != nil || !found || rec.Seq != 1 {
		t.Errorf("the last request: %+v, found %v, %v; want record 1", rec, found, err)
	}
}

// A decision is recorded once, on a running run, by anyone; Prune takes it with its run.
func testDecisions(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "de-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Decision(c, "de-1", "loop/1/c1"); ok || err != nil {
		t.Fatalf("a decision before any: %v, %v", ok, err)
	}
	// A reason or an author PostgreSQL would not keep as text is refused in every store.
	for _, d := range []runlog.Decision{{Reason: "stop\x00it", By: "o2"}, {Reason: "bad \xff", By: "o2"}, {Reason: "fine", By: "o\x002"}} {
		if err := s.Decide(c, "de-1", "loop/1/c1", d); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("Decide(%+v): %v, want ErrInvalid", d, err)
		}
	}
	if err := s.Decide(c, "de-1", "loop/1/c1", runlog.Decision{Approve: true, Reason: "fine", By: "o2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(c, "de-1", "loop/1/c1", runlog.Decision{Approve: false}); !errors.Is(err, runlog.ErrExists) {
		t.Errorf("a second decision: %v, want ErrExists", err)
	}
	d, ok, err := s.Decision(c, "de-1", "loop/1/c1")
	if err != nil || !ok || !d.Approve || d.Reason != "fine" || d.By != "o2" || d.Time.IsZero() {
		t.Errorf("Decision = %+v, %v, %v", d, ok, err)
	}
	if err := s.Decide(c, "nope", "k", runlog.Decision{}); !errors.Is(err, runlog.ErrNotFound) {
		t.Errorf("a decision on no run: %v, want ErrNotFound", err)
	}
	if err := s.Decide(c, "de-1", "k", runlog.Decision{Reason: strings.Repeat("x", runlog.MaxReasonBytes+1)}); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("a reason over the bound: %v, want ErrInvalid", err)
	}
	if err := s.Finish(c, l, runlog.StateSucceeded); err != nil {
		t.Fatal(err)
	}
	if err := s.Decide(c, "de-1", "loop/1/c2", runlog.Decision{Approve: true}); !errors.Is(err, runlog.ErrFinished) {
		t.Errorf("a decision on a finished run: %v, want ErrFinished", err)
	}
	if n, err := s.Prune(c, time.Now().Add(time.Hour), 0); err != nil || n < 1 {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	if _, ok, _ := s.Decision(c, "de-1", "loop/1/c1"); ok {
		t.Error("Prune left a pruned run's decision")
	}
}

func testFinish(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "fi-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(c, l, runlog.StateRunning); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("finish as running: %v", err)
	}
	if err := s.Finish(c, l, runlog.StateSucceeded); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(1, runlog.KindEvent)); !errors.Is(err, runlog.ErrFenced) {
		t.Errorf("append after finishing: %v", err)
	}
	if _, err := s.Acquire(c, "fi-1", "o2", time.Minute); !errors.Is(err, runlog.ErrFinished) {
		t.Errorf("acquire a finished run: %v", err)
	}
	if r, _ := s.Get(c, "fi-1"); r.State != runlog.StateSucceeded {
		t.Errorf("state %q", r.State)
	}
	if exp, _ := s.Expired(c, 0); hasRun(exp, "fi-1") {
		t.Error("a finished run is listed as expired")
	}
}

func hasRun(rs []runlog.Run, id string) bool {
	for _, r := range rs {
		if r.ID == id {
			return true
		}
	}
	return false
}

func testList(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	for i := range 5 {
		l, err := s.Create(c, fmt.Sprintf("li-%d", i), "o1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Finish(c, l, runlog.StateFailed); err != nil {
				t.Fatal(err)
			}
		}
	}
	var ids []string
	after := "li-"
	for {
		page, err := s.List(c, runlog.Filter{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			if strings.HasPrefix(r.ID, "li-") {
				ids = append(ids, r.ID)
			}
		}
		if len(page) < 2 || !strings.HasPrefix(page[len(page)-1].ID, "li-") {
			break
		}
		after = page[len(page)-1].ID
	}
	if strings.Join(ids, ",") != "li-0,li-1,li-2,li-3,li-4" {
		t.Errorf("pages %v", ids)
	}
	failed, err := s.List(c, runlog.Filter{State: runlog.StateFailed, After: "li-"})
	if err != nil {
		t.Fatal(err)
	}
	var f []string
	for _, r := range failed {
		if strings.HasPrefix(r.ID, "li-") {
			f = append(f, r.ID)
		}
	}
	if strings.Join(f, ",") != "li-0,li-2,li-4" {
		t.Errorf("failed %v", f)
	}
}

// Writers racing on one run: each sequence number is taken exactly once.
func testRace(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "ra-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	won := map[int64]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= 20; seq++ {
				err := s.Append(c, l, []runlog.Record{{Seq: seq, Kind: runlog.KindEvent, Data: json.RawMessage(fmt.Sprintf(`{"w":%d}`, w))}})
				switch {
				case err == nil:
					mu.Lock()
					won[seq]++
					mu.Unlock()
				case !errors.Is(err, runlog.ErrConflict):
					t.Errorf("append: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	all, _ := s.Read(c, "ra-1", 0, 0)
	if len(all) != 20 {
		t.Errorf("%d records, want 20", len(all))
	}
	for seq := int64(1); seq <= 20; seq++ {
		if won[seq] != 1 {
			t.Errorf("sequence %d taken %d times", seq, won[seq])
		}
	}
}

// A take-over racing the appends of the run's owner, its lease just expired: every
// append the owner was told succeeded is in the journal and none it was told failed is,
// the owner's appends fail once the run is taken over, and the new owner's first
// append, numbered from the records it finds, follows them. The take-over lands at a
// different moment of the owner's appends each time.
func testTakeOverRace(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	for i := range 24 {
		id := fmt.Sprintf("to-%d", i)
		old, err := s.Create(c, id, "o1", time.Millisecond, recs(1, runlog.KindRequest)...)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the lease has expired; the owner goes on
		acked := int64(1)
		done := make(chan error, 1)
		go func() {
			for seq := int64(2); seq < 100_000; seq++ {
				if err := s.Append(c, old, recs(seq, runlog.KindEvent)); err != nil {
					done <- err
					return
				}
				acked = seq
			}
			done <- errors.New("never fenced")
		}()
		time.Sleep(time.Duration(i%6) * 500 * time.Microsecond)
		// The new owner reads the run and appends to it at once, as a resumed run does,
		// while the old owner's last append may still be under way.
		taken, err := s.Acquire(c, id, "o2", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.Read(c, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		next := int64(len(all)) + 1
		if err := s.Append(c, taken, recs(next, runlog.KindEvent)); err != nil {
			t.Fatalf("%s: the new owner's first append, record %d after the %d it found: %v", id, next, len(all), err)
		}
		if err := <-done; !errors.Is(err, runlog.ErrFenced) {
			t.Fatalf("%s: the owner's append after the take-over: %v, want ErrFenced", id, err)
		}
		if next != acked+1 {
			t.Fatalf("%s: the new owner found %d records; the old owner was told %d were written", id, next-1, acked)
		}
		all, _ = s.Read(c, id, 0, 0)
		for k, r := range all {
			want := int64(1)
			if k == len(all)-1 {
				want = taken.Epoch
			}
			if r.Seq != int64(k+1) || r.Epoch != want {
				t.Fatalf("%s: record %d is seq %d of epoch %d, want seq %d of epoch %d", id, k, r.Seq, r.Epoch, k+1, want)
			}
		}
	}
}

func testInvalid(t *testing.T, open Opener) {
	s, c := openT(t, open), ctx(t)
	l, err := s.Create(c, "in-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, rs := range map[string][]runlog.Record{
		"no records":  nil,
		"no kind":     {{Seq: 1, Data: json.RawMessage(`{}`)}},
		"a gap":       {{Seq: 1, Kind: runlog.KindEvent}, {Seq: 3, Kind: runlog.KindEvent}},
		"too big":     {{Seq: 1, Kind: runlog.KindEvent, Data: json.RawMessage(`"` + strings.Repeat("x", runlog.MaxRecordBytes) + `"`)}},
		"a long kind": {{Seq: 1, Kind: runlog.Kind(strings.Repeat("k", 65))}},
		"another run": {{RunID: "in-2", Seq: 1, Kind: runlog.KindEvent}},
	} {
		if err := s.Append(c, l, rs); !errors.Is(err, runlog.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.Create(c, "", "o1", time.Minute); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("empty run id: %v", err)
	}
	if _, err := s.Create(c, strings.Repeat("r", runlog.MaxIDBytes+1), "o1", time.Minute); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("long run id: %v", err)
	}
	if all, _ := s.Read(c, "in-1", 0, 0); len(all) != 0 {
		t.Errorf("%d records after refused appends", len(all))
	}
}

func testReopen(t *testing.T, open Opener) {
	c := ctx(t)
	s := open(t)
	l, err := s.Create(c, "re-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(c, l, recs(1, runlog.KindRequest, runlog.KindModel)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, open)
	all, err := s.Read(c, "re-1", 0, 0)
	if err != nil || len(all) != 2 {
		t.Fatalf("after reopening: %d records, %v", len(all), err)
	}
	if err := s.Append(c, l, recs(3, runlog.KindEvent)); err != nil {
		t.Errorf("the lease still drives the run after reopening: %v", err)
	}
}

// RawSQLite opens a SQLite file with the driver alone, to damage or inspect it.
func RawSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// testWorkers: each orchestrator's recorded workers replace its earlier ones; Workers
// lists every orchestrator's recent ones once; bad input is refused.
func testWorkers(t *testing.T, open Opener) {
	s, ctx := openT(t, open), ctx(t)
	if got, err := s.Workers(ctx, time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("an empty journal's workers: %v, %v", got, err)
	}
	before := time.Now()
	for _, set := range []struct {
		owner   string
		workers []string
	}{{"o1", []string{"w2", "w1", "w1"}}, {"o2", []string{"w3", "w2"}}, {"o1", []string{"w1", "w4"}}} {
		if err := s.SetWorkers(ctx, set.owner, set.workers); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Workers(ctx, before.Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"w1", "w2", "w3", "w4"}; !slices.Equal(got, want) {
		t.Errorf("workers = %v, want %v (o1's second set replaced its first)", got, want)
	}
	if got, err := s.Workers(ctx, time.Now().Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("workers seen after an hour from now: %v, %v", got, err)
	}
	if err := s.SetWorkers(ctx, "o2", nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Workers(ctx, time.Time{}); !slices.Equal(got, []string{"w1", "w4"}) {
		t.Errorf("after o2 recorded none: %v", got)
	}
	if err := s.SetWorkers(ctx, "", []string{"w"}); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("no owner: %v, want ErrInvalid", err)
	}
	if err := s.SetWorkers(ctx, "o1", []string{strings.Repeat("w", runlog.MaxIDBytes+1)}); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("a long worker id: %v, want ErrInvalid", err)
	}
	if err := s.SetWorkers(ctx, "o1", make([]string, runlog.MaxWorkers+1)); !errors.Is(err, runlog.ErrInvalid) {
		t.Errorf("too many workers: %v, want ErrInvalid", err)
	}
}
