package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// fileEffects records the payments group's effects in a SQLite file that replicas on
// one host share (WAL mode), so that an idempotent credit sent again to another replica
// credits once, and so that a test can count every effect afterwards: one row of
// effects per effect.
type fileEffects struct{ db *sql.DB }

func openEffects(path string) (*fileEffects, error) {
	// Replicas that start together open the file at the same moment: the switch to WAL
	// and the first schema statements can find it locked in a way SQLite's busy handler
	// does not wait out (a reader upgrading to a writer), so the whole setup is retried.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		fe, err := tryOpenEffects(ctx, path)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || ctx.Err() != nil {
			return fe, err
		}
		time.Sleep(wait)
	}
}

func tryOpenEffects(ctx context.Context, path string) (*fileEffects, error) {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(FULL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("-payments-db: %w", err)
	}
	db.SetMaxOpenConns(1)
	fail := func(err error) (*fileEffects, error) {
		_ = db.Close()
		return nil, fmt.Errorf("-payments-db %s: %w", path, err)
	}
	// One immediate transaction: it takes the write lock up front, waiting for it.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range []string{
		`CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, tool TEXT NOT NULL, key TEXT NOT NULL, worker TEXT NOT NULL, time INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS once_keys (tool TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tool, key))`,
	} {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return &fileEffects{db: db}, nil
}

// worker names the process in the effects it records.
var effectsWorker string

func (f *fileEffects) Apply(ctx context.Context, tool, key string, once bool) (bool, error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	if once && key != "" {
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO once_keys (tool, key) VALUES (?, ?)`, tool, key)
		if err != nil {
			return false, err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return false, nil // applied before
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO effects (tool, key, worker, time) VALUES (?, ?, ?, ?)`, tool, key, effectsWorker, time.Now().UnixNano()); err != nil {
		return false, err
	}
	return true, tx.Commit()
}
