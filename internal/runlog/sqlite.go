package runlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// OpenSQLite opens (creating it when missing) the journal in the SQLite file path, in WAL
// mode. A file that is not a SQLite database, a database that holds other tables and no
// journal, a damaged one (its pages fail SQLite's quick check) and an empty file where a
// journal was (one is never empty once created) are refused with the reason.
func OpenSQLite(ctx context.Context, path string) (Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("runlog: %w", err)
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		// A new journal's first pages may still be in its write-ahead log alone.
		if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
			return nil, fmt.Errorf("runlog: the journal file %s is empty: a journal is never empty once created, so it was truncated or replaced; "+
				"restore it from a backup, or remove it to start with an empty journal", path)
		}
	}
	return openSQLite(ctx, "file:"+(&url.URL{Path: path}).EscapedPath(), path, "journal_mode(WAL)", "synchronous(FULL)")
}

func openSQLite(ctx context.Context, dsn, path string, pragmas ...string) (Store, error) {
	q := url.Values{}
	for _, p := range append([]string{"busy_timeout(10000)"}, pragmas...) {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", dsn+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("runlog: open %s: %w", path, err)
	}
	// Connections are never closed for idling: opening one again costs its pragmas.
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	// The committer writes runs' records on a connection of its own; the others read
	// (WAL mode lets them, beside a writer) and make the rare other writes (leases,
	// decisions), which wait their turn for SQLite's one writer (busy_timeout).
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	s := &sqlStore{db: db, now: time.Now, d: dialect{
		name:    "SQLite",
		ph:      func(int) string { return "?" },
		blob:    "BLOB",
		tables:  `SELECT name FROM sqlite_master WHERE type = 'table'`,
		index:   `SELECT true FROM sqlite_master WHERE type = 'index' AND name = ?`,
		unique:  sqliteUnique,
		explain: sqliteExplain,
		// Without a rowid, a record row lives in the table's one B-tree, in key order,
		// instead of in a table and an index: a commit writes half the pages.
		clustered:   " WITHOUT ROWID",
		committers:  1,
		gather:      300 * time.Microsecond,
		commitGroup: func(s *sqlStore, group []*write) []error { return s.logged.commitGroup(group) },
		nextSeq:     nextSeqOfRecords,
	}}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	if err := s.ensureIndex(ctx, endedIndex, endedIndexOn); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	if err := quickCheck(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("runlog: the journal file %s is damaged: %w; restore it from a backup (the runs it holds cannot be resumed from it as it is)", path, err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("runlog: open %s: %w", path, sqliteExplain(err))
	}
	s.writer = &sqliteWriter{conn: conn, stmts: map[string]driver.Stmt{}}
	// The applier's transactions need no fsync: the commit log holds what a crash
	// might take from them (sqliteLogged).
	if err := conn.Raw(func(dc any) error { _, err := s.writer.exec(dc, `PRAGMA synchronous = NORMAL`); return err }); err != nil {
		s.writer.close()
		_ = db.Close()
		return nil, fmt.Errorf("runlog: open %s: %w", path, sqliteExplain(err))
	}
	if s.logged, err = startLogged(ctx, s, s.writer, path); err != nil {
		s.writer.close()
		_ = db.Close()
		return nil, err
	}
	s.start()
	return s, nil
}

// maxCheckLines bounds what quickCheck reports of SQLite's findings.
const maxCheckLines = 5

// quickCheck runs SQLite's quick check of the database's pages (every B-tree page well
// formed, every record within its page): a file whose pages were damaged is refused at
// start, instead of serving and failing every write that reaches them.
func quickCheck(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, `PRAGMA quick_check(`+fmt.Sprint(maxCheckLines)+`)`)
	if err != nil {
		return sqliteExplain(err)
	}
	defer func() { _ = rows.Close() }()
	var found []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return err
		}
		if line != "ok" {
			found = append(found, line)
		}
	}
	if err := rows.Err(); err != nil {
		return sqliteExplain(err)
	}
	if len(found) > 0 {
		return fmt.Errorf("SQLite's check found: %s", strings.Join(found, "; "))
	}
	return nil
}

// sqliteUnique reports a constraint violation (SQLITE_CONSTRAINT and its extended codes).
func sqliteUnique(err error) bool {
	var c interface{ Code() int }
	return errors.As(err, &c) && c.Code()&0xff == 19
}

// sqliteExplain says what SQLite's write errors mean for the operator: the file could
// not grow or be written (a full disk, a file size limit, a failing device).
func sqliteExplain(err error) error {
	var c interface{ Code() int }
	if !errors.As(err, &c) {
		return err
	}
	switch c.Code() {
	case 11, 267: // SQLITE_CORRUPT, SQLITE_CORRUPT_VTAB
		return fmt.Errorf("%w (the journal file is damaged)", err)
	case 26: // SQLITE_NOTADB
		return fmt.Errorf("%w (the file is not a SQLite database, or its header is damaged)", err)
	case 13: // SQLITE_FULL
		return fmt.Errorf("%w (the disk is full)", err)
	case 778, 1034, 1546: // SQLITE_IOERR_WRITE, _FSYNC, _TRUNCATE
		return fmt.Errorf("%w (the journal file could not be written: the disk is full, the file is over a size limit, or the device fails)", err)
	}
	return err
}
