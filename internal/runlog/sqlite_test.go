package runlog_test

import (
	"context"
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

// Journals of schema versions 1 (before decisions) and 2 (before workers) are upgraded
// in place, keeping their runs.
func TestSQLiteUpgradesOldVersions(t *testing.T) {
	for _, v := range []struct {
		version string
		drop    []string
	}{{"1", []string{"toolmesh_decisions", "toolmesh_workers"}}, {"2", []string{"toolmesh_workers"}}} {
		t.Run("version "+v.version, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "old.db")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := runlog.OpenSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Create(ctx, "old-run", "o1", time.Minute); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			db := runlogtest.RawSQLite(t, path)
			for _, table := range v.drop {
				if _, err := db.Exec(`DROP TABLE ` + table); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(`UPDATE toolmesh_meta SET value = ? WHERE key = 'schema_version'`, v.version); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			s, err = runlog.OpenSQLite(ctx, path)
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
			if r, err := s.Get(ctx, "old-run"); err != nil || r.State != runlog.StateRunning {
				t.Errorf("the old run after the upgrade: %+v, %v", r, err)
			}
		})
	}
}
