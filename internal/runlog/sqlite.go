package runlog

import (
	"context"
	"database/sql"
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
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(FULL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("runlog: open %s: %w", path, err)
	}
	// One connection: SQLite allows one writer at a time, and transactions then never
	// wait on one another inside the process.
	db.SetMaxOpenConns(1)
	s := &sqlStore{db: db, now: time.Now, d: dialect{
		name:   "SQLite",
		ph:     func(int) string { return "?" },
		blob:   "BLOB",
		tables: `SELECT name FROM sqlite_master WHERE type = 'table'`,
		unique: sqliteUnique,
	}}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return s, nil
}

// sqliteUnique reports a constraint violation (SQLITE_CONSTRAINT and its extended codes).
func sqliteUnique(err error) bool {
	var c interface{ Code() int }
	return errors.As(err, &c) && c.Code()&0xff == 19
}
