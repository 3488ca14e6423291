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
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// OpenSQLite opens (creating it when missing) the journal in the SQLite file path, in WAL
// mode. A file that is not a SQLite database, or a database that holds other tables and
// no journal, is refused with the reason.
func OpenSQLite(ctx context.Context, path string) (Store, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("runlog: %w", err)
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
		unique:  sqliteUnique,
		explain: sqliteExplain,
		// Without a rowid, a record row lives in the table's one B-tree, in key order,
		// instead of in a table and an index: a commit writes half the pages.
		clustered:   " WITHOUT ROWID",
		committers:  1, // SQLite has one writer
		commitGroup: sqliteCommitGroup,
		nextSeq:     sqliteNextSeq,
	}}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("runlog: open %s: %w", path, sqliteExplain(err))
	}
	s.writer = &sqliteWriter{conn: conn, stmts: map[string]driver.Stmt{}}
	s.start()
	return s, nil
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
	case 13: // SQLITE_FULL
		return fmt.Errorf("%w (the disk is full)", err)
	case 778, 1034, 1546: // SQLITE_IOERR_WRITE, _FSYNC, _TRUNCATE
		return fmt.Errorf("%w (the journal file could not be written: the disk is full, the file is over a size limit, or the device fails)", err)
	}
	return err
}
