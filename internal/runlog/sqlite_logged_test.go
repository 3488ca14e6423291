package runlog

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A run whose row the committer cannot read fails its write, and the committer goes on
// with the others' (it stayed locked: every later commit, Acquire and Decide hung).
func TestCommitterSurvivesAnUnreadableRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "journal.db")
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	// A row another process wrote, which the store cannot read: its lease is text.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated) VALUES ('bad', 'running', 'o', 1, 'soon', 1, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	err = s.Append(ctx, Lease{RunID: "bad", Owner: "o", Epoch: 1, Until: time.Now().Add(time.Minute)}, []Record{{Seq: 1, Kind: KindEvent, Data: []byte("x")}})
	if err == nil {
		t.Fatal("a write to a run whose row cannot be read was accepted")
	}
	// The run's failure, not the journal's: readiness took the orchestrator out of
	// service for one bad row.
	if err := s.(HealthReporter).Health(ctx); err != nil {
		t.Errorf("one unreadable run's write makes the journal unhealthy: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, "good", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the next run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the committer hangs after a run it could not read")
	}

	// In one group with others, the unreadable run's write fails alone: it failed the
	// whole group, and its writer, retrying, failed every group it joined.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = s.Append(ctx, Lease{RunID: "bad", Owner: "o", Epoch: 1, Until: time.Now().Add(time.Minute)}, []Record{{Seq: 1, Kind: KindEvent, Data: []byte("x")}})
			}
		})
	}
	var failed atomic.Int32
	var good sync.WaitGroup
	for i := range 200 {
		good.Go(func() {
			if _, err := s.Create(ctx, fmt.Sprintf("good-%03d", i), "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}); err != nil {
				if failed.Add(1) == 1 {
					t.Errorf("a run created beside the unreadable run's writes: %v", err)
				}
			}
		})
	}
	good.Wait()
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 200 creations failed beside the unreadable run's writes", n)
	}
}

// The committer forgets the views of ended runs only once the database holds their
// ends: a run created and finished a moment ago, its end still only in the commit log,
// may not be created again (it was, and its record rows then broke every copy to the
// database on their primary key).
func TestSweepKeepsRunsNotYetApplied(t *testing.T) {
	defer func(n int) { sweepViews = n }(sweepViews)
	sweepViews = 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	req := Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}
	l, err := s.Create(ctx, "x", "o", time.Minute, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, l, StateSucceeded, Record{Seq: 2, Kind: KindEvent, Data: []byte("end")}); err != nil {
		t.Fatal(err)
	}
	// More runs: the committer sweeps its views.
	for _, id := range []string{"y", "z"} {
		if _, err := s.Create(ctx, id, "o", time.Minute, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, "x", "o", time.Minute, req); !errors.Is(err, ErrExists) {
		t.Fatalf("a run created again while its end is in the commit log only: %v, want ErrExists", err)
	}
	if r, err := s.Get(ctx, "x"); err != nil || r.State != StateSucceeded {
		t.Fatalf("Get(x): %+v, %v", r, err)
	}
	// The database took everything: a new write reaches it.
	if _, err := s.Create(ctx, "w", "o", time.Minute, req); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "w"); err != nil || r.State != StateRunning {
		t.Fatalf("Get(w): %+v, %v", r, err)
	}
}

// A read right after the database can be written again (a full disk that has room) is
// served: the applier, backing off after failed copies, tries again at once for a
// reader instead of answering with the last failure until its backoff ends.
func TestReadAfterTheDatabaseRecovers(t *testing.T) {
	ctx, s := openLogged(t)
	failing := failCopies(s, errors.New("disk I/O error"))
	lease, err := s.Create(ctx, "r", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "r", 0, 10); err == nil {
		t.Fatal("a read while the database cannot be written was served")
	}
	failing.Store(false)
	recs, err := s.Read(ctx, lease.RunID, 0, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("a read once the database can be written: %v, %v", recs, err)
	}
}

// Runs created and ended between two copies of the commit log reach the database as
// they ended: one created and finished, one created and held, one created and left
// running, each with its records.
func TestRunsCreatedAndEndedInOneCopy(t *testing.T) {
	ctx, s := openLogged(t)
	holding := failCopies(s, errors.New("held back by the test"))
	rec := func(seq int64, kind Kind) Record { return Record{Seq: seq, Kind: kind, Data: []byte(kind)} }
	for _, id := range []string{"done", "held", "open"} {
		lease, err := s.Create(ctx, id, "o", time.Minute, rec(1, KindRequest))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, lease, []Record{rec(2, KindModel)}); err != nil {
			t.Fatal(err)
		}
		switch id {
		case "done":
			err = s.Finish(ctx, lease, StateSucceeded, rec(3, KindEnd))
		case "held":
			err = s.Hold(ctx, lease, "a record cannot be read")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	holding.Store(false)
	want := map[string]struct {
		state   State
		records int64
		note    string
	}{"done": {StateSucceeded, 3, ""}, "held": {StateHeld, 2, "a record cannot be read"}, "open": {StateRunning, 2, ""}}
	for id, w := range want {
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != w.state || r.Records != w.records || r.Note != w.note || (r.State != StateRunning && r.Until.UnixNano() != 0) {
			t.Errorf("%s: %+v, want state %s, %d records, note %q, and no lease once it stopped", id, r, w.state, w.records, w.note)
		}
		recs, err := s.Read(ctx, id, 0, 10)
		if err != nil || int64(len(recs)) != w.records {
			t.Errorf("%s: read %d records (%v), want %d", id, len(recs), err, w.records)
		}
	}
}

// failCopies has every copy of s's commit log to its database fail with err until the
// flag it returns is cleared.
func failCopies(s *sqlStore, err error) *atomic.Bool {
	var failing atomic.Bool
	failing.Store(true)
	s.logged.amu.Lock()
	s.logged.applyFault = func() error {
		if failing.Load() {
			return err
		}
		return nil
	}
	s.logged.amu.Unlock()
	return &failing
}

// openLogged opens a SQLite store in a temporary directory for the test, and a context
// that bounds it.
func openLogged(t *testing.T) (context.Context, *sqlStore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	st, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return ctx, st.(*sqlStore)
}

// A run of a generated id greater than every id of its tenant is created without a look
// in the database, whichever tenants' ids sort above it, and whatever other ids clients
// chose; any other id the committer does not know is looked up.
func TestCreateLooksUpOnlyIDsNotGreaterThanTheirTenants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "journal.db")
	req := Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}
	type create struct {
		id         string
		exists     bool
		lookedUpTo int
	}
	creates := func(st Store, cs ...create) {
		t.Helper()
		l := st.(*sqlStore).logged
		for _, c := range cs {
			_, err := st.Create(ctx, c.id, "o", time.Minute, req)
			if got := errors.Is(err, ErrExists); got != c.exists || (err != nil && !got) {
				t.Fatalf("Create(%q) = %v, want exists %v", c.id, err, c.exists)
			}
			l.mu.Lock()
			n := l.lookups
			l.mu.Unlock()
			if n != c.lookedUpTo {
				t.Errorf("after Create(%q): %d look-ups, want %d", c.id, n, c.lookedUpTo)
			}
		}
	}
	st, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	creates(st,
		create{"zeta/run_0001", false, 0},
		create{"acme/run_0002", false, 0}, // below zeta's: its own tenant's greatest counts
		create{"zz", false, 1},            // a client's own id: looked up
		create{"run_0003", false, 1},      // above every untenanted generated id, though below zz
		create{"acme/run_0004", false, 1},
		create{"acme/run_0003", false, 2}, // below its tenant's greatest: looked up, not there
		create{"acme/run_0002", true, 2},  // known to the committer
	)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	creates(st,
		create{"acme/run_0005", false, 0}, // above the greatest acme/ id the database holds
		create{"acme/run_0002", true, 1},
		create{"acme/run_0004", true, 2},
		create{"zz", true, 3},
		create{"run_0003", true, 4},
		create{"run_0006", false, 4},
	)
}

// A run pruned and created again while Prune deletes other runs is created once: Prune
// forgot the committer's views of the runs it deleted only at its end, and so forgot the
// view of the run created again meanwhile, whose creation only the commit log held; a
// second creation of it passed, and the applier then failed on the duplicate records
// for good (the journal could not even be opened again).
func TestPruneKeepsARunCreatedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "journal.db")
	st, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*sqlStore)
	req := Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}
	for i := range 300 { // x first, then enough runs for Prune to take a while after x
		id := "x"
		if i > 0 {
			id = fmt.Sprintf("old-%d", i)
		}
		l, err := s.Create(ctx, id, "o", time.Minute, req)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, l, StateSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	// The committer has no view of x (as after a sweep): Decide on a finished run
	// forgets it.
	if err := s.Decide(ctx, "x", "k", Decision{Approve: true}); !errors.Is(err, ErrFinished) {
		t.Fatal(err)
	}
	pruned := make(chan error, 1)
	go func() { _, err := s.Prune(ctx, time.Now().Add(time.Hour), 0); pruned <- err }()
	for { // x deleted, Prune still deleting the others
		if _, err := s.Get(ctx, "x"); errors.Is(err, ErrNotFound) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, "x", "o2", time.Minute, req); err != nil {
		t.Fatal(err)
	}
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "x", "o3", time.Minute, req); !errors.Is(err, ErrExists) {
		t.Errorf("run x created again after its second creation: %v; want ErrExists", err)
	}
	if r, err := s.Get(ctx, "x"); err != nil || r.Owner != "o2" {
		t.Errorf("Get(x): %+v, %v; want the run o2 created", r, err)
	}
	_ = s.Close()
	st, err = OpenSQLite(ctx, path)
	if err != nil {
		t.Fatalf("reopening the journal: %v", err)
	}
	_ = st.Close()
}

// A prune holds no append back: the runs' writes commit while a chunk's deletion
// waits for its transaction, and a creation of a run being deleted waits until the
// deletion is done, then is taken, once. The deletion ran under the committer's lock,
// so every append waited for it: for the applier's copy, then its sync (tens of
// milliseconds under load, the p99 of appends).
func TestPruneHoldsNoAppendBack(t *testing.T) {
	ctx, s := openLogged(t)
	req := []Record{{Seq: 1, Kind: KindRequest, Data: []byte("r")}}
	live := liveAndOld(ctx, t, s)
	unhold, pruned := heldPrune(ctx, t, s)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Append(actx, live, []Record{{Seq: 2, Kind: KindEvent, Data: []byte("e")}}); err != nil {
		t.Errorf("an append while a prune deletes: %v; want it committed", err)
	}
	created := make(chan error, 1)
	// A commit that failed as a whole is the store's health (Health) until a commit
	// says otherwise; the creation that waits for the prune says nothing either way.
	boom := errors.New("a commit that failed")
	s.healthMu.Lock()
	s.failing, s.failedAt = boom, time.Now()
	s.healthMu.Unlock()
	before := s.written.Load()
	go func() { _, err := s.Create(ctx, "old", "o2", time.Minute, req...); created <- err }()
	for s.written.Load() == before { // the committer answered it: wait for the deletion
		select {
		case err := <-created:
			t.Fatalf("creating a run while it is pruned: %v; want it to wait for the deletion", err)
		case <-actx.Done():
			t.Fatal("the creation of a run being pruned was not answered by the committer")
		case <-time.After(time.Millisecond):
		}
	}
	s.healthMu.Lock()
	failing := s.failing
	s.healthMu.Unlock()
	if failing != boom {
		t.Errorf("the store's health after a creation waiting for a prune: %v; want it untouched (%v)", failing, boom)
	}
	unhold()
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Errorf("creating a run while it was pruned: %v; want it created once the deletion was done", err)
	}
	if _, err := s.Create(ctx, "old", "o3", time.Minute, req...); !errors.Is(err, ErrExists) {
		t.Errorf("a second creation of it: %v; want ErrExists", err)
	}
	if r, err := s.Get(ctx, "old"); err != nil || r.Owner != "o2" || r.State != StateRunning {
		t.Errorf("Get(old): %+v, %v; want the run o2 created", r, err)
	}
	if recs, err := s.Read(ctx, "live", 0, 0); err != nil || len(recs) != 2 {
		t.Errorf("the live run's records: %d, %v; want 2", len(recs), err)
	}
}

// A prune that finds a run it listed as ended running again (another prune deleted it
// since, and its id was taken again) leaves the committer's view of it alone: the run's
// writes during the deletion may be in the commit log only. The prune forgot the views
// of every run it had listed, and the committer, reading the run from the database
// without those writes, took them again (the next sequence number refused, a duplicate
// accepted), and the applier then failed on the duplicate for good: the journal could
// not be opened again.
func TestPruneKeepsTheViewOfARunItDidNotDelete(t *testing.T) {
	ctx, s := openLogged(t)
	req := []Record{{Seq: 1, Kind: KindRequest, Data: []byte("r")}}
	old, err := s.Create(ctx, "x", "o", time.Minute, req...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, old, StateSucceeded); err != nil {
		t.Fatal(err)
	}
	if n, err := s.deleteEnded(ctx, []string{"x"}); err != nil || n != 1 {
		t.Fatalf("the first prune: %d, %v", n, err)
	}
	again, err := s.Create(ctx, "x", "o2", time.Minute, req...)
	if err != nil {
		t.Fatal(err)
	}
	// A second prune, which listed x before the first deleted it: while its deletion is
	// under way, x's next record is committed, to the log only.
	var held atomic.Bool
	s.logged.amu.Lock()
	s.logged.applyFault = func() error {
		if held.Load() {
			return errors.New("the copy is held back by the test")
		}
		return nil
	}
	s.logged.amu.Unlock()
	s.pruneFault = func() {
		held.Store(true)
		if err := s.Append(ctx, again, []Record{{Seq: 2, Kind: KindEvent, Data: []byte("e2")}}); err != nil {
			t.Errorf("an append during the deletion: %v", err)
		}
	}
	if n, err := s.deleteEnded(ctx, []string{"x"}); err != nil || n != 0 {
		t.Fatalf("the second prune: %d, %v; want nothing deleted", n, err)
	}
	s.pruneFault = nil
	if err := s.Append(ctx, again, []Record{{Seq: 2, Kind: KindEvent, Data: []byte("dup")}}); !errors.Is(err, ErrConflict) {
		t.Errorf("a second record 2: %v; want ErrConflict", err)
	}
	if err := s.Append(ctx, again, []Record{{Seq: 3, Kind: KindEvent, Data: []byte("e3")}}); err != nil {
		t.Errorf("record 3: %v", err)
	}
	held.Store(false)
	if recs, err := s.Read(ctx, "x", 0, 0); err != nil || len(recs) != 3 || string(recs[1].Data) != "e2" {
		t.Errorf("x's records: %v, %v; want r, e2, e3", recs, err)
	}
	path := s.logged.log.path
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := OpenSQLite(ctx, strings.TrimSuffix(path, "-commits"))
	if err != nil {
		t.Fatalf("reopening the journal: %v", err)
	}
	_ = st.Close()
}

// Acquire and Decide wait for a prune's deletion, which holds SQLite's writer, without
// holding the committer's lock: the runs' appends go on. Decide waited for SQLite with
// the lock held, every append behind it, and failed once the deletion outlasted
// SQLite's busy timeout.
func TestDecideDuringAPruneHoldsNoAppendBack(t *testing.T) {
	ctx, s := openLogged(t)
	asked, err := s.Create(ctx, "asked", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	live := liveAndOld(ctx, t, s)
	unhold, pruned := heldPrune(ctx, t, s)
	decided := make(chan error, 1)
	go func() { decided <- s.Decide(ctx, asked.RunID, "k", Decision{Approve: true}) }()
	appendsCommit(ctx, t, s, live, "while Decide waits for a prune") // Decide is soon waiting
	select {
	case err := <-decided:
		t.Fatalf("Decide returned during the prune's deletion: %v", err)
	default:
	}
	unhold()
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	if err := <-decided; err != nil {
		t.Errorf("Decide after the prune: %v", err)
	}
}

// The applier's emptying of the commit log, whose checkpoint needs SQLite's writer,
// does not wait for a prune's deletion with the committer's lock held: it waited, and
// every append with it.
func TestLogResetWaitsForNoPrune(t *testing.T) {
	ctx, s := openLogged(t)
	defer func(b int64) { resetBytes.Store(b) }(resetBytes.Load())
	live := liveAndOld(ctx, t, s)
	if _, err := s.Read(ctx, "live", 0, 0); err != nil { // everything logged is in the database
		t.Fatal(err)
	}
	unhold, pruned := heldPrune(ctx, t, s)
	resetBytes.Store(1) // the log is past it, and the database holds all of it: a reset is due
	reset := make(chan struct{})
	go func() { defer close(reset); s.logged.tryReset() }()
	select { // the reset returns, or is stuck in its checkpoint (nothing else writes now)
	case <-reset:
	case <-time.After(100 * time.Millisecond):
	}
	appendsCommit(ctx, t, s, live, "while the log's reset was due during a prune")
	unhold()
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	<-reset
}

// liveAndOld creates a run "live", going on (its request its one record), and a run
// "old", ended, and returns live's lease.
func liveAndOld(ctx context.Context, t *testing.T, s *sqlStore) Lease {
	t.Helper()
	req := Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}
	live, err := s.Create(ctx, "live", "o", time.Minute, req)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Create(ctx, "old", "o", time.Minute, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, old, StateSucceeded); err != nil {
		t.Fatal(err)
	}
	return live
}

// heldPrune starts a Prune of every ended run and holds it in its first deletion's
// transaction (SQLite's writer held) until unhold is called, at the latest when the test
// ends; pruned gets its outcome.
func heldPrune(ctx context.Context, t *testing.T, s *sqlStore) (unhold func(), pruned <-chan error) {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unhold = func() { once.Do(func() { close(release) }) }
	t.Cleanup(unhold) // a failure lets the prune end, and the store close
	s.pruneFault = func() { close(held); <-release }
	out := make(chan error, 1)
	go func() { _, err := s.Prune(ctx, time.Now().Add(time.Hour), 0); out <- err }()
	<-held
	return unhold, out
}

// appendsCommit appends events to the run of lease (its records so far its request) for
// 200 ms, each of which must commit within 5 s.
func appendsCommit(ctx context.Context, t *testing.T, s *sqlStore, lease Lease, while string) {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for seq, until := int64(2), time.Now().Add(200*time.Millisecond); time.Now().Before(until); seq++ {
		if err := s.Append(actx, lease, []Record{{Seq: seq, Kind: KindEvent, Data: []byte("e")}}); err != nil {
			t.Fatalf("append %d %s: %v", seq, while, err)
		}
	}
}

// A read with a limit of a kind without a bit of its own (its rows share otherKind with
// other such kinds) finds the kind's records past rows that hold only the others: it
// read limit+1 rows, as if each held one.
func TestReadLimitOfAKindWithoutItsBit(t *testing.T) {
	ctx, s := openLogged(t)
	const custom Kind = "x-custom"
	rec := func(seq int64, k Kind) []Record { return []Record{{Seq: seq, Kind: k, Data: []byte(k)}} }
	l, err := s.Create(ctx, "r", "o", time.Minute, rec(1, KindRequest)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		seq int64
		k   Kind
	}{{2, custom}, {3, custom}, {4, KindPolicy}, {5, custom}, {6, KindPolicy}} {
		if err := s.Append(ctx, l, rec(a.seq, a.k)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "r"); err != nil { // each append its own row
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		limit int
		want  []int64
	}{{0, []int64{4, 6}}, {1, []int64{4}}, {2, []int64{4, 6}}} {
		got, err := s.Read(ctx, "r", 0, c.limit, KindPolicy)
		var seqs []int64
		for _, r := range got {
			seqs = append(seqs, r.Seq)
		}
		if err != nil || !slices.Equal(seqs, c.want) {
			t.Errorf("Read(policy, limit %d) = %v, %v; want %v", c.limit, seqs, err, c.want)
		}
	}
}

// A journal whose commit failed as a whole (a file size limit) is healthy again once it
// has room, without a write: Health reported the failure until a commit succeeded, and
// readiness, which keeps runs away while Health fails, left none to commit.
func TestHealthRecoversWithoutAWrite(t *testing.T) {
	ctx, s := openLogged(t)
	if _, err := s.Create(ctx, "a", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Health(ctx); err != nil {
		t.Fatalf("health before: %v", err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 8 << 20, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), MaxRecordBytes)
	_, err := s.Create(ctx, "b", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: big})
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err == nil {
		t.Fatal("a creation over the file size limit passed")
	}
	if err := s.Health(ctx); err == nil {
		t.Fatal("healthy right after a commit failed whole")
	}
	deadline := time.Now().Add(failingFor + 5*time.Second) // room again; nothing writes
	for {
		err := s.Health(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Health still fails %v after the journal has room again: %v", failingFor+5*time.Second, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.Create(ctx, "c", "o", time.Minute, Record{Seq: 1, Kind: KindRequest, Data: []byte("r")}); err != nil {
		t.Errorf("a creation once healthy again: %v", err)
	}
}
