package runlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// The SQLite applier (sqliteLogged) writes on a connection of its own, through the
// driver's prepared statements directly: the database is in this process, so a
// statement costs no round trip, and what database/sql adds to each (a statement bound
// to the transaction, a goroutine watching the context) was most of its cost. A run's
// row is written when the run starts and when it ends; while it goes on, its next
// sequence number is the end of its last record row (nextSeqOfRecords), which the records
// table, clustered by run, keeps beside them.

// The statements of the SQLite applier.
const (
	sqliteCreate = `INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO NOTHING`
	// sqliteCreateEnded writes a run created and ended in one copy of the commit log; a
	// copy made again after a crash finds the run's row and ends it.
	sqliteCreateEnded = `INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, note, created, updated) VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, lease_until = 0, next_seq = excluded.next_seq, note = excluded.note, updated = excluded.updated`
	sqliteEnd       = `UPDATE toolmesh_runs SET next_seq = ?, state = ?, lease_until = 0, note = ?, updated = ? WHERE run_id = ?`
	sqliteInsertRow = `INSERT INTO toolmesh_records (run_id, seq, n, epoch, kind, kinds, time, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// sqliteWriter is the applier's connection and its statements.
type sqliteWriter struct {
	conn  *sql.Conn
	stmts map[string]driver.Stmt
}

func (w *sqliteWriter) stmt(dc any, query string) (driver.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	p, ok := dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, fmt.Errorf("a connection of %T cannot prepare statements", dc)
	}
	st, err := p.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}

// exec runs query with args and returns the rows it changed.
func (w *sqliteWriter) exec(dc any, query string, args ...any) (int64, error) {
	st, err := w.stmt(dc, query)
	if err != nil {
		return 0, err
	}
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	// A context that never ends: the driver then watches nothing.
	res, err := st.(driver.StmtExecContext).ExecContext(context.Background(), named)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// queryRow runs query and scans its one row into dest (int64s).
func (w *sqliteWriter) queryRow(dc any, query string, dest ...*int64) error {
	st, err := w.stmt(dc, query)
	if err != nil {
		return err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), nil)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	vals := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(vals); err != nil {
		return fmt.Errorf("%s: no row: %w", query, err)
	}
	for i, d := range dest {
		if i >= len(vals) {
			return fmt.Errorf("%s: %d columns, want %d", query, len(vals), len(dest))
		}
		v, ok := vals[i].(int64)
		if !ok {
			return fmt.Errorf("%s: column %d is %T, want an integer", query, i, vals[i])
		}
		*d = v
	}
	return nil
}

// close closes the writer's statements and gives its connection back.
func (w *sqliteWriter) close() {
	_ = w.conn.Raw(func(any) error {
		for _, st := range w.stmts {
			_ = st.Close()
		}
		return nil
	})
	_ = w.conn.Close()
}
