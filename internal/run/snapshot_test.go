package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/runlog"
)

// readCounter counts the records a store's reads return, and the lowest sequence
// number among them after the request's.
type readCounter struct {
	runlog.Store
	records int
	lowest  int64
}

func (r *readCounter) Read(ctx context.Context, runID string, after int64, limit int, kinds ...runlog.Kind) ([]runlog.Record, error) {
	recs, err := r.Store.Read(ctx, runID, after, limit, kinds...)
	for _, rec := range recs {
		r.records++
		if rec.Seq > 1 && (r.lowest == 0 || rec.Seq < r.lowest) {
			r.lowest = rec.Seq
		}
	}
	return recs, err
}

// writeSnapshottedJournal journals forty model turns with their calls, approvals and
// outcomes in run r1, a snapshot every eight records, each record waiting for its
// commit and the snapshot it starts. It is called inside a synctest bubble, which it
// waits on for the snapshots.
func writeSnapshottedJournal(t *testing.T, store runlog.Store, lease runlog.Lease) {
	t.Helper()
	j := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, 2)
	j.snapEvery = 8
	j.stop = func(error) {}
	j.start()
	// Each record waits for its commit and for the snapshot it starts, if any: the
	// run's next record follows the snapshot (in a run they race, which changes only
	// where snapshots fall). Once every other goroutine of the bubble is blocked, a
	// snapshot still being made is one that cannot end.
	settled := func() {
		t.Helper()
		synctest.Wait()
		j.mu.Lock()
		snapping := j.snapping
		j.mu.Unlock()
		if snapping {
			t.Fatal("a snapshot did not end")
		}
	}
	add := func(kind runlog.Kind, data string) {
		t.Helper()
		if _, err := j.add(kind, []byte(data), nil, true); err != nil {
			t.Fatal(err)
		}
		settled()
	}
	for step := 1; step <= 40; step++ {
		key := fmt.Sprintf("r1/loop_a/%d/c1", step)
		add(runlog.KindModel, fmt.Sprintf(`{"key":"loop_a/%d","response":{"Text":"turn %d"}}`, step, step))
		add(runlog.KindEvent, string(eventRec(fmt.Sprintf("model/loop_a/%d#1", step), json.RawMessage(`{}`))))
		add(runlog.KindDispatch, fmt.Sprintf(`{"key":%q,"worker":"w","attempt":1}`, key))
		if step%3 == 0 {
			add(runlog.KindApproval, fmt.Sprintf(`{"key":%q,"call_id":"c1","tool":"charge"}`, key))
			add(runlog.KindDecision, fmt.Sprintf(`{"key":%q,"approve":true}`, key))
		}
		if step%5 != 0 { // some calls have no outcome: in flight at the crash
			add(runlog.KindOutcome, fmt.Sprintf(`{"key":%q,"outcome":"succeeded","data":{"content":"%d"}}`, key, step))
		}
		// A later outcome of the same call replaces the first.
		if step%7 == 0 {
			add(runlog.KindOutcome, fmt.Sprintf(`{"key":%q,"outcome":"unknown","data":{"content":"again"}}`, key))
		}
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
}

// snapshottedRun is run r1 in a journal in memory: its request, then what
// writeSnapshottedJournal writes; all its records. Inside a synctest bubble.
func snapshottedRun(t *testing.T) (runlog.Store, runlog.Lease, []runlog.Record) {
	t.Helper()
	ctx := t.Context()
	store, lease := memJournal(t)
	if err := store.Append(ctx, lease, []runlog.Record{{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	writeSnapshottedJournal(t, store, lease)
	all, err := store.Read(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return store, lease, all
}

// A run's journal writes snapshots as it goes; a resume reads the last one and the
// records after what it covers, and finds what it would have found reading the whole
// journal: the same answers, outcomes (and their places), dispatches, approvals,
// decisions and event keys.
func TestSnapshotsReplayAsTheWholeJournal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		store, lease, all := snapshottedRun(t)
		whole := newReplayState()
		snapshots := 0
		for _, r := range all {
			if r.Kind == runlog.KindSnapshot {
				snapshots++
				continue
			}
			if err := whole.add(r); err != nil {
				t.Fatal(err)
			}
		}
		if snapshots < 3 {
			t.Fatalf("%d snapshots in %d records, want several", snapshots, len(all))
		}
		snap, _, err := store.Last(ctx, "r1", runlog.KindSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		var covers snapshotRecord
		if err := json.Unmarshal(snap.Data, &covers); err != nil {
			t.Fatal(err)
		}

		rc := &readCounter{Store: store}
		got, first, last, err := readReplay(ctx, rc, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if first == nil || first.Seq != 1 || first.Kind != runlog.KindRequest {
			t.Errorf("readReplay's first record: %+v, want the request", first)
		}
		if last != all[len(all)-1].Seq {
			t.Errorf("readReplay's last record %d, want %d", last, all[len(all)-1].Seq)
		}
		if rc.lowest <= covers.Upto {
			t.Errorf("the resume read record %d, which the last snapshot (record %d) covers (up to %d)", rc.lowest, snap.Seq, covers.Upto)
		}
		if want := int(last-covers.Upto) + 1; rc.records != want {
			t.Errorf("the resume read %d records, want the request and the %d after the last snapshot's", rc.records, want-1)
		}
		state := func(st *replayState) map[string]any {
			return map[string]any{"models": st.models, "outcomes": st.outcomes, "outcome seqs": st.outcomeSeqs, "loops": st.loops, "dispatched": st.dispatched,
				"approvals": st.approvals, "decisions": st.decisions, "seen": st.seen, "upto": st.upto}
		}
		if diff := cmp.Diff(state(whole), state(got)); diff != "" {
			t.Errorf("the state from the last snapshot differs from the whole journal's (-whole +snapshot):\n%s", diff)
		}
		j2 := newJournal(store, newRenewer(time.Minute), lease, time.Minute, jsonCodec{}, last+1)
		if err := j2.load(got); err != nil {
			t.Fatal(err)
		}
		if len(j2.models) != 40 || string(j2.outcomes["r1/loop_a/7/c1"]) != `{"content":"again"}` || len(j2.dispatched) != 40 || len(j2.decisions) != 13 {
			t.Errorf("loaded %d answers, outcome of call 7 %s, %d dispatches, %d decisions", len(j2.models), j2.outcomes["r1/loop_a/7/c1"], len(j2.dispatched), len(j2.decisions))
		}
	})
}

// A snapshot is written only once the records since the last one are at least half its
// size: as a run's state grows, its snapshots grow further apart, and never cost more
// than the records they sum up. Before, the last snapshot's own bytes counted among the
// records after it, and a snapshot followed every snapshot_every records whatever its size.
func TestSnapshotsCostNoMoreThanTheirRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, all := snapshottedRun(t)
		last, since, snapshots := 0, 0, 0
		for _, r := range all {
			if r.Kind != runlog.KindSnapshot {
				since += len(r.Data)
				continue
			}
			snapshots++
			if since < last/2 {
				t.Errorf("snapshot at record %d (%d bytes) after %d bytes of records since the last one, of %d bytes", r.Seq, len(r.Data), since, last)
			}
			last, since = len(r.Data), 0
		}
		if snapshots < 2 {
			t.Fatalf("%d snapshots in %d records, want several", snapshots, len(all))
		}
	})
}

// A snapshot that cannot be read back holds the run, as any damaged record does.
func TestDamagedSnapshotIsDamage(t *testing.T) {
	store, lease := memJournal(t)
	ctx := context.Background()
	if err := store.Append(ctx, lease, []runlog.Record{
		{Seq: 1, Kind: runlog.KindRequest, Data: json.RawMessage(`{}`)},
		{Seq: 2, Kind: runlog.KindSnapshot, Data: json.RawMessage(`{"upto":1,"models":[{"key":`)},
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := readReplay(ctx, store, "r1"); !errors.Is(err, ErrDamaged) {
		t.Fatalf("readReplay of a torn snapshot: %v, want ErrDamaged", err)
	}
}

// What a run waits for from a person is found by reading the journal's approvals and
// decisions only, not every record the run wrote.
func TestWaitingReadsApprovalsAndDecisionsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		store, lease, all := snapshottedRun(t)
		asked := 0
		for _, r := range all {
			if r.Kind == runlog.KindApproval || r.Kind == runlog.KindDecision {
				asked++
			}
		}
		next := all[len(all)-1].Seq + 1
		if err := store.Append(ctx, lease, []runlog.Record{{Seq: next, Kind: runlog.KindApproval, Data: json.RawMessage(`{"key":"r1/loop_a/41/c1","call_id":"c1","tool":"charge"}`)}}); err != nil {
			t.Fatal(err)
		}
		rc := &readCounter{Store: store}
		waiting, err := (&Service{journal: rc}).waitingRecords(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if len(waiting) != 1 || waiting[0].Key != "r1/loop_a/41/c1" {
			t.Errorf("waiting = %+v, want the approval of r1/loop_a/41/c1 alone", waiting)
		}
		if rc.records != asked+1 {
			t.Errorf("finding what the run waits for read %d of its %d records, want its %d approvals and decisions", rc.records, len(all)+1, asked+1)
		}
	})
}
