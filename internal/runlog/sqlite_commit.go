package runlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
)

// SQLite's committer writes on a connection of its own, through the driver's prepared
// statements directly: the database is in this process, so a statement costs no round
// trip, and what database/sql adds to each (a statement bound to the transaction, a
// goroutine watching the context) was most of a commit's cost.
//
// What a commit costs beyond that is the pages it writes to the WAL, a write (a system
// call) each: an append writes one, the leaf of the records table where the run's rows
// are (the table is clustered by run). The run's row is read (its lease, its state) but
// not written: its next sequence number is the end of its last record row, read from
// the same leaf, and next_seq is written only when the run is created or ends
// (sqliteNextSeq reads it).

// The statements of the SQLite committer.
const (
	sqliteCreate = `INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated) VALUES (?, 'running', ?, ?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO NOTHING`
	sqliteEnd       = `UPDATE toolmesh_runs SET next_seq = ?, state = ?, lease_until = 0, note = ?, updated = ? WHERE run_id = ?`
	sqliteInsertRow = `INSERT INTO toolmesh_records (run_id, seq, n, epoch, kind, kinds, time, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	sqliteReadRun   = `SELECT state, owner, epoch, lease_until, next_seq FROM toolmesh_runs WHERE run_id = ?`
	sqliteLastRow   = `SELECT seq + n FROM toolmesh_records WHERE run_id = ? ORDER BY seq DESC LIMIT 1`
)

// sqliteNextSeq is a run's next sequence number as SQLite's store reads it: the end of
// its last record row, or next_seq for a run without records.
const sqliteNextSeq = `COALESCE((SELECT r.seq + r.n FROM toolmesh_records r WHERE r.run_id = toolmesh_runs.run_id ORDER BY r.seq DESC LIMIT 1), next_seq)`

// sqliteWriter is the committer's connection and its statements.
type sqliteWriter struct {
	conn  *sql.Conn
	stmts map[string]driver.Stmt
}

// sqliteCommitGroup commits group in one transaction on the writer's connection.
func sqliteCommitGroup(s *sqlStore, group []*write) []error {
	errs := make([]error, len(group))
	err := s.writer.conn.Raw(func(dc any) error {
		return s.writer.commit(dc, group, errs, s.now())
	})
	if err != nil {
		err = fmt.Errorf("runlog: commit: %w", s.d.why(err))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
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

// query runs query with args and scans its first row into dest; false when it has none.
func (w *sqliteWriter) query(dc any, query string, dest []driver.Value, args ...any) (bool, error) {
	st, err := w.stmt(dc, query)
	if err != nil {
		return false, err
	}
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), named)
	if err != nil {
		return false, err
	}
	defer func() { _ = rows.Close() }()
	switch err := rows.Next(dest); {
	case errors.Is(err, io.EOF):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// readRun reads a run's row, its next sequence number that of its records; found false
// when there is none.
func (w *sqliteWriter) readRun(dc any, runID string) (r lockedRun, found bool, err error) {
	vals := make([]driver.Value, 5)
	if found, err = w.query(dc, sqliteReadRun, vals, runID); err != nil || !found {
		return r, found, err
	}
	state, _ := vals[0].(string)
	r.owner, _ = vals[1].(string)
	r.epoch, _ = vals[2].(int64)
	r.until, _ = vals[3].(int64)
	r.nextSeq, _ = vals[4].(int64)
	r.state = State(state)
	last := make([]driver.Value, 1)
	ok, err := w.query(dc, sqliteLastRow, last, runID)
	if err != nil {
		return r, true, err
	}
	if ok {
		r.nextSeq, _ = last[0].(int64)
	}
	return r, true, nil
}

// commit writes group in one transaction, noting each refused write's error in errs.
func (w *sqliteWriter) commit(dc any, group []*write, errs []error, now time.Time) error {
	bt, ok := dc.(driver.ConnBeginTx)
	if !ok {
		return fmt.Errorf("a connection of %T cannot begin transactions", dc)
	}
	tx, err := bt.BeginTx(context.Background(), driver.TxOptions{})
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	written := 0
	for i, wr := range group {
		l := wr.lease
		if wr.kind == writeCreate {
			n, err := w.exec(dc, sqliteCreate, l.RunID, l.Owner, l.Epoch, l.Until.UnixNano(), wr.next(1), now.UnixNano(), now.UnixNano())
			if err != nil {
				return err
			}
			if n != 1 {
				errs[i] = fmt.Errorf("%w: %s", ErrExists, l.RunID)
				continue
			}
		} else {
			r, found, err := w.readRun(dc, l.RunID)
			if err != nil {
				return err
			}
			if errs[i] = wr.check(r, found); errs[i] != nil {
				continue
			}
			if wr.kind != writeAppend {
				if _, err := w.exec(dc, sqliteEnd, wr.next(r.nextSeq), string(wr.state), wr.note, now.UnixNano(), l.RunID); err != nil {
					return err
				}
			}
		}
		if len(wr.records) > 0 {
			data, kinds := pack(wr.records, now)
			first := wr.records[0]
			t := first.Time
			if t.IsZero() {
				t = now
			}
			if _, err := w.exec(dc, sqliteInsertRow, l.RunID, first.Seq, int64(len(wr.records)), l.Epoch, string(first.Kind), kinds, t.UnixNano(), data); err != nil {
				return err
			}
		}
		written++
	}
	if written == 0 {
		return nil // the deferred rollback ends it
	}
	failpoint.Hit(failpoint.StoreBeforeCommit)
	done = true
	if err := tx.Commit(); err != nil {
		return err
	}
	failpoint.Hit(failpoint.StoreAfterCommit)
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
