package runlog_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

func sqliteOpener(path string) runlogtest.Opener {
	return func(t *testing.T) runlog.Store {
		t.Helper()
		s, err := runlog.OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestSQLite(t *testing.T) {
	runlogtest.Run(t, sqliteOpener(filepath.Join(t.TempDir(), "journal.db")))
}

// A file that is not a database, or a database of something else, is refused with the
// reason; nothing is written to it.
func TestSQLiteRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := runlog.OpenSQLite(ctx, garbage); err == nil || !strings.Contains(err.Error(), "cannot be read") || !strings.Contains(err.Error(), garbage) {
		t.Errorf("garbage file: %v", err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	s, err := runlog.OpenSQLite(ctx, foreign)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// Make it someone else's database: drop the journal, add a table of another program.
	db := runlogtest.RawSQLite(t, foreign)
	for _, q := range []string{`DROP TABLE toolmesh_meta`, `DROP TABLE toolmesh_records`, `DROP TABLE toolmesh_runs`, `CREATE TABLE invoices (id INTEGER)`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	if _, err := runlog.OpenSQLite(ctx, foreign); err == nil || !strings.Contains(err.Error(), "not a toolmesh journal") || !strings.Contains(err.Error(), "invoices") {
		t.Errorf("foreign database: %v", err)
	}
	// A journal of a later schema version is refused too.
	newer := filepath.Join(dir, "newer.db")
	s, err = runlog.OpenSQLite(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	db = runlogtest.RawSQLite(t, newer)
	if _, err := db.Exec(`UPDATE toolmesh_meta SET value = '99' WHERE key = 'schema_version'`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if _, err := runlog.OpenSQLite(ctx, newer); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("newer journal: %v", err)
	}
}

// Journals of schema versions 1 (before decisions), 2 (before workers) and 3 (a record
// a row) are upgraded in place, keeping their runs and records: the old records read as
// they were written, and the run goes on with rows of several records.
func TestSQLiteUpgradesOldVersions(t *testing.T) {
	v3 := []string{
		`CREATE TABLE toolmesh_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE toolmesh_runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
			lease_until BIGINT NOT NULL, next_seq BIGINT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL)`,
		`CREATE INDEX toolmesh_runs_state ON toolmesh_runs (state, lease_until)`,
		`CREATE TABLE toolmesh_records (run_id TEXT NOT NULL, seq BIGINT NOT NULL, epoch BIGINT NOT NULL, kind TEXT NOT NULL,
			time BIGINT NOT NULL, data BLOB, PRIMARY KEY (run_id, seq))`,
		`CREATE TABLE toolmesh_decisions (run_id TEXT NOT NULL, call_key TEXT NOT NULL, approve BOOLEAN NOT NULL,
			reason TEXT NOT NULL, decided_by TEXT NOT NULL, time BIGINT NOT NULL, PRIMARY KEY (run_id, call_key))`,
		`CREATE TABLE toolmesh_workers (owner TEXT NOT NULL, worker_id TEXT NOT NULL, seen BIGINT NOT NULL, PRIMARY KEY (owner, worker_id))`,
		`INSERT INTO toolmesh_runs VALUES ('old-run', 'running', 'o1', 1, 9000000000000000000, 3, 1, 1)`,
		`INSERT INTO toolmesh_records VALUES ('old-run', 1, 1, 'request', 1, '{"n":1}'), ('old-run', 2, 1, 'event', 2, '{"n":2}')`,
	}
	for _, v := range []struct {
		version string
		drop    []string
	}{{"1", []string{"toolmesh_decisions", "toolmesh_workers"}}, {"2", []string{"toolmesh_workers"}}, {"3", nil}} {
		t.Run("version "+v.version, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			db := runlogtest.RawSQLite(t, path)
			for _, st := range v3 {
				if _, err := db.Exec(st); err != nil {
					t.Fatal(err)
				}
			}
			for _, table := range v.drop {
				if _, err := db.Exec(`DROP TABLE ` + table); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(`INSERT INTO toolmesh_meta VALUES ('schema_version', ?)`, v.version); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			s, err := runlog.OpenSQLite(ctx, path)
			if err != nil {
				t.Fatalf("a version %s journal: %v", v.version, err)
			}
			defer func() { _ = s.Close() }()
			if err := s.Decide(ctx, "old-run", "k", runlog.Decision{Approve: true}); err != nil {
				t.Errorf("a decision after the upgrade: %v", err)
			}
			if err := s.SetWorkers(ctx, "o1", []string{"w1"}); err != nil {
				t.Errorf("workers after the upgrade: %v", err)
			}
			l, err := s.Acquire(ctx, "old-run", "o1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Append(ctx, l, []runlog.Record{{Seq: 3, Kind: runlog.KindModel, Data: []byte{1, 2}}, {Seq: 4, Kind: runlog.KindEvent, Data: []byte("e")}}); err != nil {
				t.Fatalf("an append after the upgrade: %v", err)
			}
			all, err := s.Read(ctx, "old-run", 0, 0)
			if err != nil || len(all) != 4 {
				t.Fatalf("the records after the upgrade: %+v, %v", all, err)
			}
			if string(all[0].Data) != `{"n":1}` || all[1].Kind != runlog.KindEvent || string(all[2].Data) != "\x01\x02" || all[3].Seq != 4 {
				t.Errorf("the records after the upgrade: %+v", all)
			}
			if evs, _ := s.Read(ctx, "old-run", 0, 0, runlog.KindEvent); len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 4 {
				t.Errorf("the events after the upgrade: %+v", evs)
			}
		})
	}
}

// A journal whose pages are damaged on disk is refused at start with the reason, where
// it used to serve and fail every write; an empty file where a journal was is refused
// too (a journal is never empty once created), but a new journal whose pages are still
// in its write-ahead log alone is not empty.
func TestSQLiteRefusesDamagedJournals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	s, err := runlog.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		l, err := s.Create(ctx, fmt.Sprintf("run-%03d", i), "o", time.Hour, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte(`"` + strings.Repeat("r", 3000) + `"`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, l, []runlog.Record{{Seq: 2, Kind: runlog.KindEvent, Data: []byte(`"` + strings.Repeat("e", 3000) + `"`)}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	db := runlogtest.RawSQLite(t, path)
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if fi.Size() < 16*4096 {
		t.Fatalf("the journal is %d bytes: too small to damage its inner pages", fi.Size())
	}
	// Pages in the middle of the file: the B-trees' inner and leaf pages, not the header.
	if _, err := f.WriteAt([]byte(strings.Repeat("\x5a", 3*4096)), (fi.Size()/4096/2)*4096); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := runlog.OpenSQLite(ctx, path); err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), path) {
		t.Errorf("a journal with damaged pages: %v, want refused as damaged", err)
	}

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runlog.OpenSQLite(ctx, empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty journal file: %v, want refused", err)
	}
	fresh := filepath.Join(dir, "fresh.db")
	if err := os.WriteFile(fresh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fresh+"-wal", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runlog.OpenSQLite(ctx, fresh); err != nil && strings.Contains(err.Error(), "empty") {
		t.Errorf("a new journal whose pages are in its write-ahead log: %v", err)
	}
}

// TestSQLiteRenewAllKeepsRenewalsWhenDecisionsFail: the leases RenewAll renewed stay
// renewed when the read of their decisions that follows fails (their decisions are
// read at the next renewal), as a Renew whose Decision read fails: the journal must
// not keep the old lease time of a lease the database has extended.
func TestSQLiteRenewAllKeepsRenewalsWhenDecisionsFail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "journal.db")
	s, err := runlog.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := s.Create(ctx, "dr-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "dr-1"); err != nil { // in the database, not only the commit log
		t.Fatal(err)
	}
	db := runlogtest.RawSQLite(t, path)
	if _, err := db.ExecContext(ctx, `ALTER TABLE toolmesh_decisions RENAME TO toolmesh_decisions_gone`); err != nil {
		t.Fatal(err)
	}
	got := s.RenewAll(ctx, []runlog.Lease{l}, time.Hour, "cancel")
	if got[0].Err != nil || got[0].Decided || time.Until(got[0].Lease.Until) < 50*time.Minute {
		t.Errorf("a renewal whose decisions could not be read: %+v, want the lease renewed for an hour", got[0])
	}
	if run, _ := s.Get(ctx, "dr-1"); time.Until(run.Until) < 50*time.Minute {
		t.Errorf("the run's lease runs until %s", run.Until)
	}
}

// Stats counts each write, the commits that carried them, and how long the writers
// waited for them and the commit log took to write them.
func TestSQLiteStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := sqliteOpener(filepath.Join(t.TempDir(), "journal.db"))(t)
	defer func() { _ = s.Close() }()
	lease, err := s.Create(ctx, "run_stats", "me", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(2); seq <= 6; seq++ {
		if err := s.Append(ctx, lease, []runlog.Record{{Seq: seq, Kind: runlog.KindEvent, Data: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.(runlog.StatsReporter).Stats()
	// One write at a time: each commit carries one, and its writer waits for all of it.
	if st.Writes != 6 || st.Commits != 6 {
		t.Errorf("%d writes in %d commits, want 6 in 6", st.Writes, st.Commits)
	}
	if st.Logging <= 0 || st.Logging > st.Committing || st.Committing > st.Waited {
		t.Errorf("logging %v, committing %v, waited %v: want 0 < logging ≤ committing ≤ waited", st.Logging, st.Committing, st.Waited)
	}
}
