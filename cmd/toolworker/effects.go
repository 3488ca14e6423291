package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// fileEffects records the payments group's effects in a SQLite file that replicas on
// one host share (WAL mode), so that an idempotent credit sent again to another replica
// credits once, and so that a test can count every effect afterwards: one row of
// effects per effect.
type fileEffects struct{ db *sql.DB }

func openEffects(path string) (*fileEffects, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "synchronous(FULL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("-payments-db: %w", err)
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range []string{
		`CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, tool TEXT NOT NULL, key TEXT NOT NULL, worker TEXT NOT NULL, time INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS once_keys (tool TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tool, key))`,
	} {
		if _, err := db.ExecContext(ctx, st); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("-payments-db %s: %w", path, err)
		}
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
