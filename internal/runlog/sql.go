package runlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// SchemaVersion is the version of the journal's tables this code writes.
const SchemaVersion = 3

// dialect is what differs between the SQL stores.
type dialect struct {
	name string
	// ph is the placeholder of the i-th argument, from 1.
	ph func(i int) string
	// blob is the type of the records' data.
	blob string
	// forUpdate locks a selected row until the transaction ends ("" where the
	// transaction itself is exclusive).
	forUpdate string
	// tables lists the tables of the database, to tell a foreign one.
	tables string
	// unique reports whether err is a unique-constraint violation.
	unique func(err error) bool
	// explain, when set, adds what an error of the database means for the operator.
	explain func(err error) error
}

// why is err with the dialect's explanation.
func (d dialect) why(err error) error {
	if d.explain == nil || err == nil {
		return err
	}
	return d.explain(err)
}

// sqlStore is the journal on a SQL database.
type sqlStore struct {
	db  *sql.DB
	d   dialect
	now func() time.Time

	// stmts are the hot path's prepared statements, by query (parsing them again for
	// every append cost as much as running them).
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt
	// appends feeds the committer (commit); closed stops it, committed says it stopped.
	appends   chan *appendReq
	closed    chan struct{}
	committed chan struct{}
	closeOnce sync.Once
}

// exec runs a statement in tx: prepared once for the store when prepare made it, else
// as it is.
func (s *sqlStore) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st := s.stmt(query); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

func (s *sqlStore) stmt(query string) *sql.Stmt {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	return s.stmts[query]
}

// prepare prepares a hot-path statement for the store. It must not run inside a
// transaction: SQLite has one connection, which the transaction holds.
func (s *sqlStore) prepare(ctx context.Context, query string) {
	if s.stmt(query) != nil {
		return
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return // exec runs it unprepared
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	if _, ok := s.stmts[query]; ok {
		_ = st.Close()
		return
	}
	s.stmts[query] = st
}

// lockRunQuery, updateQuery and insertQuery are the append's statements.
func (s *sqlStore) lockRunQuery() string {
	return s.q(`SELECT state, owner, epoch, lease_until, next_seq, created, updated FROM toolmesh_runs WHERE run_id = ?` + s.d.forUpdate)
}

func (s *sqlStore) updateQuery() string {
	return s.q(`UPDATE toolmesh_runs SET next_seq = ?, updated = ? WHERE run_id = ?`)
}

func (s *sqlStore) insertQuery(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO toolmesh_records (run_id, seq, epoch, kind, time, data) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?)")
	}
	return s.q(b.String())
}

// start starts the committer.
func (s *sqlStore) start() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s.prepare(ctx, s.lockRunQuery())
	s.prepare(ctx, s.updateQuery())
	cancel()
	s.appends, s.closed, s.committed = make(chan *appendReq), make(chan struct{}), make(chan struct{})
	go s.commit()
}

func (s *sqlStore) q(query string) string {
	// Placeholders are written ?; the dialect numbers them.
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString(s.d.ph(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// migrate creates the tables, or checks that the database holds a journal of a version
// this code reads. A database with other tables and no journal is refused.
func (s *sqlStore) migrate(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, s.d.tables)
	if err != nil {
		return fmt.Errorf("runlog: the %s database cannot be read: %w", s.d.name, s.d.why(err))
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			_ = rows.Close()
			return fmt.Errorf("runlog: the %s database cannot be read: %w", s.d.name, s.d.why(err))
		}
		tables = append(tables, t)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("runlog: the %s database cannot be read: %w", s.d.name, s.d.why(err))
	}
	hasMeta := false
	var foreign []string
	for _, t := range tables {
		switch t {
		case "toolmesh_meta":
			hasMeta = true
		case "toolmesh_runs", "toolmesh_records", "toolmesh_decisions", "toolmesh_workers":
		default:
			foreign = append(foreign, t)
		}
	}
	if !hasMeta && len(foreign) > 0 {
		return fmt.Errorf("runlog: the %s database is not a toolmesh journal: it holds other tables (%s)", s.d.name, strings.Join(foreign, ", "))
	}
	if hasMeta {
		var v string
		err := s.db.QueryRowContext(ctx, s.q(`SELECT value FROM toolmesh_meta WHERE key = ?`), "schema_version").Scan(&v)
		if err != nil {
			return fmt.Errorf("runlog: the journal has no schema version: %w", s.d.why(err))
		}
		switch v {
		case fmt.Sprint(SchemaVersion):
			return nil
		case "1", "2":
			return s.upgrade(ctx, v)
		}
		return fmt.Errorf("runlog: the journal's schema is version %s; this orchestrator reads versions 1 to %d", v, SchemaVersion)
	}
	stmts := []string{
		`CREATE TABLE toolmesh_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE toolmesh_runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
			lease_until BIGINT NOT NULL, next_seq BIGINT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL)`,
		`CREATE INDEX toolmesh_runs_state ON toolmesh_runs (state, lease_until)`,
		`CREATE TABLE toolmesh_records (run_id TEXT NOT NULL, seq BIGINT NOT NULL, epoch BIGINT NOT NULL, kind TEXT NOT NULL,
			time BIGINT NOT NULL, data ` + s.d.blob + `, PRIMARY KEY (run_id, seq))`,
		decisionsTable,
		workersTable,
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: creating the journal: %w", s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("runlog: creating the journal: %w", s.d.why(err))
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO toolmesh_meta (key, value) VALUES (?, ?)`), "schema_version", fmt.Sprint(SchemaVersion)); err != nil {
		return fmt.Errorf("runlog: creating the journal: %w", s.d.why(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runlog: creating the journal: %w", s.d.why(err))
	}
	return nil
}

// decisionsTable holds the decisions on approvals (schema version 2).
const decisionsTable = `CREATE TABLE IF NOT EXISTS toolmesh_decisions (run_id TEXT NOT NULL, call_key TEXT NOT NULL, approve BOOLEAN NOT NULL,
	reason TEXT NOT NULL, decided_by TEXT NOT NULL, time BIGINT NOT NULL, PRIMARY KEY (run_id, call_key))`

// workersTable holds, for each orchestrator, the workers registered with it when it
// last said (schema version 3): after a restart, it is ready once they are back.
const workersTable = `CREATE TABLE IF NOT EXISTS toolmesh_workers (owner TEXT NOT NULL, worker_id TEXT NOT NULL, seen BIGINT NOT NULL,
	PRIMARY KEY (owner, worker_id))`

// upgrade migrates a version 1 or 2 journal to this version: version 2 added the
// decisions table, version 3 the workers table. Replicas that start at once may both
// try; the second finds it done.
func (s *sqlStore) upgrade(ctx context.Context, from string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: upgrading the journal: %w", s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	for _, st := range []string{decisionsTable, workersTable} {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("runlog: upgrading the journal: %w", s.d.why(err))
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE toolmesh_meta SET value = ? WHERE key = ? AND value = ?`), fmt.Sprint(SchemaVersion), "schema_version", from); err != nil {
		return fmt.Errorf("runlog: upgrading the journal: %w", s.d.why(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runlog: upgrading the journal: %w", s.d.why(err))
	}
	return nil
}

func (s *sqlStore) SetWorkers(ctx context.Context, owner string, workers []string) error {
	if err := checkWorkers(owner, workers); err != nil {
		return err
	}
	workers = slices.Compact(slices.Sorted(slices.Values(workers)))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: noting the workers of %s: %w", owner, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_workers WHERE owner = ?`), owner); err != nil {
		return fmt.Errorf("runlog: noting the workers of %s: %w", owner, s.d.why(err))
	}
	now := s.now().UnixNano()
	for len(workers) > 0 {
		n := min(len(workers), 100)
		args := make([]any, 0, 3*n)
		for _, w := range workers[:n] {
			args = append(args, owner, w, now)
		}
		q := `INSERT INTO toolmesh_workers (owner, worker_id, seen) VALUES (?, ?, ?)` + strings.Repeat(`, (?, ?, ?)`, n-1)
		if _, err := tx.ExecContext(ctx, s.q(q), args...); err != nil {
			return fmt.Errorf("runlog: noting the workers of %s: %w", owner, s.d.why(err))
		}
		workers = workers[n:]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runlog: noting the workers of %s: %w", owner, s.d.why(err))
	}
	return nil
}

func (s *sqlStore) Workers(ctx context.Context, since time.Time) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT DISTINCT worker_id FROM toolmesh_workers WHERE seen >= ? ORDER BY worker_id LIMIT ?`), since.UnixNano(), MaxWorkers)
	if err != nil {
		return nil, fmt.Errorf("runlog: reading the known workers: %w", s.d.why(err))
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, fmt.Errorf("runlog: reading the known workers: %w", s.d.why(err))
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runlog: reading the known workers: %w", s.d.why(err))
	}
	return out, nil
}

func (s *sqlStore) Decide(ctx context.Context, runID, key string, d Decision) error {
	if err := checkDecision(runID, key, d); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: decide on %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	r, _, err := s.lockRun(ctx, tx, runID)
	if err != nil {
		return err
	}
	if r.State.Terminal() {
		return fmt.Errorf("%w: run %s is %s", ErrFinished, runID, r.State)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO toolmesh_decisions (run_id, call_key, approve, reason, decided_by, time) VALUES (?, ?, ?, ?, ?, ?)`),
		runID, key, d.Approve, d.Reason, d.By, s.now().UnixNano()); err != nil {
		if s.d.unique(err) {
			return fmt.Errorf("%w: the call %s of run %s is decided already", ErrExists, key, runID)
		}
		return fmt.Errorf("runlog: decide on %s: %w", runID, s.d.why(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("runlog: decide on %s: %w", runID, s.d.why(err))
	}
	return nil
}

func (s *sqlStore) Decision(ctx context.Context, runID, key string) (Decision, bool, error) {
	var d Decision
	var t int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT approve, reason, decided_by, time FROM toolmesh_decisions WHERE run_id = ? AND call_key = ?`), runID, key).
		Scan(&d.Approve, &d.Reason, &d.By, &t)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Decision{}, false, nil
	case err != nil:
		return Decision{}, false, fmt.Errorf("runlog: read a decision of %s: %w", runID, s.d.why(err))
	}
	d.Time = time.Unix(0, t)
	return d, true, nil
}

func (s *sqlStore) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...Record) (Lease, error) {
	if err := checkID("run id", runID); err != nil {
		return Lease{}, err
	}
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	now := s.now()
	until := now.Add(ttl)
	lease := Lease{RunID: runID, Owner: owner, Epoch: 1, Until: until}
	if len(first) > 0 {
		if err := checkAppend(lease, first); err != nil {
			return Lease{}, err
		}
		if first[0].Seq != 1 {
			return Lease{}, fmt.Errorf("%w: a run's first record has sequence number 1, not %d", ErrInvalid, first[0].Seq)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Lease{}, fmt.Errorf("runlog: create %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated)
		VALUES (?, ?, ?, 1, ?, ?, ?, ?)`), runID, string(StateRunning), owner, until.UnixNano(), int64(len(first))+1, now.UnixNano(), now.UnixNano()); err != nil {
		if s.d.unique(err) {
			return Lease{}, fmt.Errorf("%w: %s", ErrExists, runID)
		}
		return Lease{}, fmt.Errorf("runlog: create %s: %w", runID, s.d.why(err))
	}
	if len(first) > 0 {
		if err := s.insertRecords(ctx, tx, lease, first, now); err != nil {
			return Lease{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return Lease{}, fmt.Errorf("runlog: create %s: %w", runID, s.d.why(err))
	}
	return lease, nil
}

// lockRun reads a run's row inside tx, locking it where the dialect can.
func (s *sqlStore) lockRun(ctx context.Context, tx *sql.Tx, runID string) (Run, int64, error) {
	var r Run
	var next, until, created, updated int64
	var state string
	var row *sql.Row
	if st := s.stmt(s.lockRunQuery()); st != nil {
		row = tx.StmtContext(ctx, st).QueryRowContext(ctx, runID)
	} else {
		row = tx.QueryRowContext(ctx, s.lockRunQuery(), runID)
	}
	err := row.Scan(&state, &r.Owner, &r.Epoch, &until, &next, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, 0, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return Run{}, 0, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	r.ID, r.State, r.Records = runID, State(state), next-1
	r.Until, r.Created, r.Updated = time.Unix(0, until), time.Unix(0, created), time.Unix(0, updated)
	return r, next, nil
}

// fenced reports whether lease no longer drives r.
func fenced(r Run, lease Lease) bool {
	return r.State.Terminal() || r.Epoch != lease.Epoch || r.Owner != lease.Owner
}

// Append queues the records for the committer, which commits the appends of every run
// that queued meanwhile in one transaction (group commit): with many runs in flight, one
// commit (one fsync) carries them all. Each append is still checked on its own (its
// lease, its sequence numbers); one that fails fails alone.
func (s *sqlStore) Append(ctx context.Context, lease Lease, records []Record) error {
	if err := checkAppend(lease, records); err != nil {
		return err
	}
	req := &appendReq{lease: lease, records: records, done: make(chan error, 1)}
	select {
	case s.appends <- req:
	case <-s.closed:
		return fmt.Errorf("runlog: append to %s: the store is closed", lease.RunID)
	case <-ctx.Done():
		return fmt.Errorf("runlog: append to %s: %w", lease.RunID, ctx.Err())
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The append may still commit: the caller must treat it as unknown, as with any
		// commit whose answer it did not get.
		return fmt.Errorf("runlog: append to %s: %w", lease.RunID, ctx.Err())
	}
}

// appendReq is one run's append, waiting for the committer.
type appendReq struct {
	lease   Lease
	records []Record
	done    chan error
}

// maxGroup bounds the appends one transaction commits.
const maxGroup = 256

// commit takes queued appends, a group at a time, and commits each group in one
// transaction, until the store closes.
func (s *sqlStore) commit() {
	defer close(s.committed)
	for {
		var first *appendReq
		select {
		case first = <-s.appends:
		case <-s.closed:
			return
		}
		group := []*appendReq{first}
	more:
		for len(group) < maxGroup {
			select {
			case r := <-s.appends:
				group = append(group, r)
			default:
				break more
			}
		}
		errs := s.appendGroup(group)
		for i, r := range group {
			r.done <- errs[i]
		}
	}
}

// appendGroup appends each request's records in one transaction and reports each one's
// outcome. A request that fails its checks adds nothing and fails alone; a failure of the
// transaction itself fails them all.
//
// A group of distinct runs takes a fixed number of statements whatever its size (one to
// lock the runs, one per 100 records, one to move the runs on): on PostgreSQL a
// statement is a round trip, and one per run made a commit of 32 runs wait for a hundred.
// A group that names a run twice, or whose records clash with stored ones, goes run by
// run instead, which tells each append's fate apart.
func (s *sqlStore) appendGroup(group []*appendReq) []error {
	if errs, ok := s.appendBatch(group); ok {
		return errs
	}
	return s.appendEach(group)
}

// batchSize is n rounded up to a power of two: the group statements are prepared for
// these sizes only, padded with a repeat of their last run.
func batchSize(n int) int {
	size := 1
	for size < n {
		size *= 2
	}
	return size
}

// lockRunsQuery locks n runs' rows in run-id order.
func (s *sqlStore) lockRunsQuery(n int) string {
	return s.q(`SELECT run_id, state, owner, epoch, lease_until, next_seq, created, updated FROM toolmesh_runs WHERE run_id IN (?` +
		strings.Repeat(", ?", n-1) + `) ORDER BY run_id` + s.d.forUpdate)
}

// advanceQuery sets n runs' next sequence numbers.
func (s *sqlStore) advanceQuery(n int) string {
	return s.q(`UPDATE toolmesh_runs SET next_seq = CASE run_id` + strings.Repeat(` WHEN ? THEN CAST(? AS BIGINT)`, n) +
		` END, updated = ? WHERE run_id IN (?` + strings.Repeat(", ?", n-1) + `)`)
}

// appendBatch is appendGroup for a group of distinct runs; false (and nothing written)
// where the group must go run by run.
func (s *sqlStore) appendBatch(group []*appendReq) ([]error, bool) {
	order := make([]int, len(group))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(group[a].lease.RunID, group[b].lease.RunID) })
	for k := 1; k < len(order); k++ {
		if group[order[k]].lease.RunID == group[order[k-1]].lease.RunID {
			return nil, false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	size := batchSize(len(group))
	lockQ, advanceQ := s.lockRunsQuery(size), s.advanceQuery(size)
	s.prepare(ctx, lockQ)
	s.prepare(ctx, advanceQ)
	total := 0
	for _, req := range group {
		total += len(req.records)
	}
	for n := total; n > 0; n -= min(n, 100) {
		s.prepare(ctx, s.insertQuery(min(n, 100)))
	}
	errs := make([]error, len(group))
	fail := func(err error) ([]error, bool) {
		for i := range errs {
			errs[i] = err
		}
		return errs, true
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	defer func() { _ = tx.Rollback() }()
	now := s.now()

	ids := make([]any, size)
	for k := range size {
		ids[k] = group[order[min(k, len(order)-1)]].lease.RunID
	}
	var rows *sql.Rows
	if st := s.stmt(lockQ); st != nil {
		rows, err = tx.StmtContext(ctx, st).QueryContext(ctx, ids...)
	} else {
		rows, err = tx.QueryContext(ctx, lockQ, ids...)
	}
	if err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	found := make(map[string]Run, len(group))
	nexts := make(map[string]int64, len(group))
	for rows.Next() {
		var r Run
		var next, until, created, updated int64
		var state string
		if err := rows.Scan(&r.ID, &state, &r.Owner, &r.Epoch, &until, &next, &created, &updated); err != nil {
			_ = rows.Close()
			return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
		}
		r.State = State(state)
		found[r.ID], nexts[r.ID] = r, next
	}
	if err := rows.Err(); err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	_ = rows.Close()

	var passed []int
	for _, i := range order {
		lease, records := group[i].lease, group[i].records
		r, ok := found[lease.RunID]
		switch {
		case !ok:
			errs[i] = fmt.Errorf("%w: %s", ErrNotFound, lease.RunID)
		case fenced(r, lease):
			errs[i] = fmt.Errorf("%w: run %s is at epoch %d (owner %s, %s), the append was made under epoch %d", ErrFenced, lease.RunID, r.Epoch, r.Owner, r.State, lease.Epoch)
		case records[0].Seq != nexts[lease.RunID]:
			errs[i] = fmt.Errorf("%w: run %s's next record is %d, not %d", ErrConflict, lease.RunID, nexts[lease.RunID], records[0].Seq)
		default:
			passed = append(passed, i)
		}
	}
	if len(passed) == 0 {
		return errs, true
	}
	if err := s.insertGroup(ctx, tx, group, passed, now); err != nil {
		if s.d.unique(err) {
			return nil, false
		}
		return fail(err)
	}
	args := make([]any, 0, 3*size+1)
	for k := range size {
		req := group[passed[min(k, len(passed)-1)]]
		args = append(args, req.lease.RunID, req.records[len(req.records)-1].Seq+1)
	}
	args = append(args, now.UnixNano())
	for k := range size {
		args = append(args, group[passed[min(k, len(passed)-1)]].lease.RunID)
	}
	if _, err := s.exec(ctx, tx, advanceQ, args...); err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	return errs, true
}

// insertGroup inserts the records of group[passed...] with as few statements as the
// placeholders allow; a unique-constraint violation comes back as it is.
func (s *sqlStore) insertGroup(ctx context.Context, tx *sql.Tx, group []*appendReq, passed []int, now time.Time) error {
	const perStatement = 100
	args := make([]any, 0, 6*perStatement)
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := s.exec(ctx, tx, s.insertQuery(n), args...)
		args, n = args[:0], 0
		if err != nil && !s.d.unique(err) {
			return fmt.Errorf("runlog: append: %w", s.d.why(err))
		}
		return err
	}
	for _, i := range passed {
		req := group[i]
		for _, rec := range req.records {
			t := rec.Time
			if t.IsZero() {
				t = now
			}
			args = append(args, req.lease.RunID, rec.Seq, req.lease.Epoch, string(rec.Kind), t.UnixNano(), []byte(rec.Data))
			if n++; n == perStatement {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// appendEach is appendGroup run by run: a statement or three per run.
func (s *sqlStore) appendEach(group []*appendReq) []error {
	errs := make([]error, len(group))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, req := range group {
		for n := len(req.records); n > 0; n -= min(n, 100) {
			s.prepare(ctx, s.insertQuery(min(n, 100)))
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	defer func() { _ = tx.Rollback() }()
	now := s.now()
	// Rows are locked in run-id order, so that the groups of two orchestrators (one of
	// them stale, its appends about to be fenced) cannot deadlock on each other.
	order := make([]int, len(group))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(group[a].lease.RunID, group[b].lease.RunID) })
	for _, i := range order {
		req := group[i]
		lease, records := req.lease, req.records
		r, next, err := s.lockRun(ctx, tx, lease.RunID)
		switch {
		case errors.Is(err, ErrNotFound):
			errs[i] = err
			continue
		case err != nil:
			return fail(err)
		case fenced(r, lease):
			errs[i] = fmt.Errorf("%w: run %s is at epoch %d (owner %s, %s), the append was made under epoch %d", ErrFenced, lease.RunID, r.Epoch, r.Owner, r.State, lease.Epoch)
			continue
		case records[0].Seq != next:
			errs[i] = fmt.Errorf("%w: run %s's next record is %d, not %d", ErrConflict, lease.RunID, next, records[0].Seq)
			continue
		}
		if err := s.insertRecords(ctx, tx, lease, records, now); err != nil {
			return fail(err)
		}
		last := records[len(records)-1].Seq
		if _, err := s.exec(ctx, tx, s.updateQuery(), last+1, now.UnixNano(), lease.RunID); err != nil {
			return fail(fmt.Errorf("runlog: append to %s: %w", lease.RunID, s.d.why(err)))
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("runlog: append: %w", s.d.why(err)))
	}
	return errs
}

// insertRecords inserts records with as few statements as the placeholders allow.
func (s *sqlStore) insertRecords(ctx context.Context, tx *sql.Tx, lease Lease, records []Record, now time.Time) error {
	const perStatement = 100 // 600 placeholders, well under both databases' limits
	for len(records) > 0 {
		n := min(len(records), perStatement)
		args := make([]any, 0, 6*n)
		for _, rec := range records[:n] {
			t := rec.Time
			if t.IsZero() {
				t = now
			}
			args = append(args, lease.RunID, rec.Seq, lease.Epoch, string(rec.Kind), t.UnixNano(), []byte(rec.Data))
		}
		if _, err := s.exec(ctx, tx, s.insertQuery(n), args...); err != nil {
			if s.d.unique(err) {
				return fmt.Errorf("%w: run %s already has one of records %d to %d", ErrConflict, lease.RunID, records[0].Seq, records[n-1].Seq)
			}
			return fmt.Errorf("runlog: append to %s: %w", lease.RunID, s.d.why(err))
		}
		records = records[n:]
	}
	return nil
}

func (s *sqlStore) Read(ctx context.Context, runID string, after int64, limit int, kinds ...Kind) ([]Record, error) {
	query := `SELECT seq, epoch, kind, time, data FROM toolmesh_records WHERE run_id = ? AND seq > ?`
	args := []any{runID, after}
	if len(kinds) > 0 {
		query += ` AND kind IN (?` + strings.Repeat(", ?", len(kinds)-1) + `)`
		for _, k := range kinds {
			args = append(args, string(k))
		}
	}
	query += ` ORDER BY seq`
	if limit > 0 {
		query += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = rows.Close() }()
	var out []Record
	for rows.Next() {
		var r Record
		var kind string
		var t int64
		var data []byte
		if err := rows.Scan(&r.Seq, &r.Epoch, &kind, &t, &data); err != nil {
			return nil, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
		}
		r.RunID, r.Kind, r.Time = runID, Kind(kind), time.Unix(0, t)
		if len(data) > 0 {
			r.Data = data
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	if len(out) == 0 {
		if _, err := s.Get(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *sqlStore) Acquire(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error) {
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Lease{}, fmt.Errorf("runlog: acquire %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	r, _, err := s.lockRun(ctx, tx, runID)
	if err != nil {
		return Lease{}, err
	}
	now := s.now()
	switch {
	case r.State.Terminal():
		return Lease{}, fmt.Errorf("%w: %s is %s", ErrFinished, runID, r.State)
	case r.Owner != owner && r.Until.After(now):
		return Lease{}, fmt.Errorf("%w: %s holds %s until %s", ErrLeased, r.Owner, runID, r.Until.Format(time.RFC3339Nano))
	}
	l := Lease{RunID: runID, Owner: owner, Epoch: r.Epoch + 1, Until: now.Add(ttl)}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE toolmesh_runs SET owner = ?, epoch = ?, lease_until = ?, updated = ? WHERE run_id = ?`),
		owner, l.Epoch, l.Until.UnixNano(), now.UnixNano(), runID); err != nil {
		return Lease{}, fmt.Errorf("runlog: acquire %s: %w", runID, s.d.why(err))
	}
	if err := tx.Commit(); err != nil {
		return Lease{}, fmt.Errorf("runlog: acquire %s: %w", runID, s.d.why(err))
	}
	return l, nil
}

func (s *sqlStore) Renew(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error) {
	now := s.now()
	until := now.Add(ttl)
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE toolmesh_runs SET lease_until = ?, updated = ? WHERE run_id = ? AND owner = ? AND epoch = ? AND state = ?`),
		until.UnixNano(), now.UnixNano(), lease.RunID, lease.Owner, lease.Epoch, string(StateRunning))
	if err != nil {
		return Lease{}, fmt.Errorf("runlog: renew %s: %w", lease.RunID, s.d.why(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if _, gerr := s.Get(ctx, lease.RunID); gerr != nil {
			return Lease{}, gerr
		}
		return Lease{}, fmt.Errorf("%w: run %s, epoch %d", ErrFenced, lease.RunID, lease.Epoch)
	}
	lease.Until = until
	return lease, nil
}

func (s *sqlStore) Finish(ctx context.Context, lease Lease, state State) error {
	if !state.Terminal() {
		return fmt.Errorf("%w: %q is not a finished run's state", ErrInvalid, state)
	}
	now := s.now()
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE toolmesh_runs SET state = ?, lease_until = 0, updated = ? WHERE run_id = ? AND owner = ? AND epoch = ? AND state = ?`),
		string(state), now.UnixNano(), lease.RunID, lease.Owner, lease.Epoch, string(StateRunning))
	if err != nil {
		return fmt.Errorf("runlog: finish %s: %w", lease.RunID, s.d.why(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if _, gerr := s.Get(ctx, lease.RunID); gerr != nil {
			return gerr
		}
		return fmt.Errorf("%w: run %s, epoch %d", ErrFenced, lease.RunID, lease.Epoch)
	}
	return nil
}

const runColumns = `run_id, state, owner, epoch, lease_until, next_seq, created, updated`

func scanRun(sc interface{ Scan(...any) error }) (Run, error) {
	var r Run
	var state string
	var until, next, created, updated int64
	if err := sc.Scan(&r.ID, &state, &r.Owner, &r.Epoch, &until, &next, &created, &updated); err != nil {
		return Run{}, err
	}
	r.State, r.Records = State(state), next-1
	r.Until, r.Created, r.Updated = time.Unix(0, until), time.Unix(0, created), time.Unix(0, updated)
	return r, nil
}

func (s *sqlStore) Get(ctx context.Context, runID string) (Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+runColumns+` FROM toolmesh_runs WHERE run_id = ?`), runID))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("runlog: get %s: %w", runID, s.d.why(err))
	}
	return r, nil
}

func (s *sqlStore) list(ctx context.Context, query string, args ...any) ([]Run, error) {
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("runlog: list: %w", s.d.why(err))
	}
	defer func() { _ = rows.Close() }()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("runlog: list: %w", s.d.why(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runlog: list: %w", s.d.why(err))
	}
	return out, nil
}

func (s *sqlStore) List(ctx context.Context, f Filter) ([]Run, error) {
	query := `SELECT ` + runColumns + ` FROM toolmesh_runs WHERE run_id > ?`
	args := []any{f.After}
	if f.State != "" {
		query += ` AND state = ?`
		args = append(args, string(f.State))
	}
	query += ` ORDER BY run_id LIMIT ?`
	return s.list(ctx, query, append(args, listLimit(f.Limit))...)
}

func (s *sqlStore) Expired(ctx context.Context, limit int) ([]Run, error) {
	return s.list(ctx, `SELECT `+runColumns+` FROM toolmesh_runs WHERE state = ? AND lease_until < ? ORDER BY lease_until LIMIT ?`,
		string(StateRunning), s.now().UnixNano(), listLimit(limit))
}

func (s *sqlStore) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id FROM toolmesh_runs WHERE state <> ? AND updated < ? ORDER BY updated LIMIT ?`),
		string(StateRunning), before.UnixNano(), listLimit(limit))
	if err != nil {
		return 0, fmt.Errorf("runlog: prune: %w", s.d.why(err))
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("runlog: prune: %w", s.d.why(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("runlog: prune: %w", s.d.why(err))
	}
	n := 0
	for _, id := range ids {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return n, fmt.Errorf("runlog: prune %s: %w", id, s.d.why(err))
		}
		// The state is checked again inside the transaction: a run is never deleted
		// while it runs.
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_runs WHERE run_id = ? AND state <> ?`), id, string(StateRunning))
		if err == nil {
			if k, _ := res.RowsAffected(); k == 1 {
				_, err = tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_records WHERE run_id = ?`), id)
				if err == nil {
					_, err = tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_decisions WHERE run_id = ?`), id)
				}
				n++
			}
		}
		if err != nil {
			_ = tx.Rollback()
			return n, fmt.Errorf("runlog: prune %s: %w", id, s.d.why(err))
		}
		if err := tx.Commit(); err != nil {
			return n, fmt.Errorf("runlog: prune %s: %w", id, s.d.why(err))
		}
	}
	return n, nil
}

func (s *sqlStore) Close() error {

	s.closeOnce.Do(func() {
		close(s.closed)
		<-s.committed
		s.stmtMu.Lock()
		for _, st := range s.stmts {
			_ = st.Close()
		}
		s.stmtMu.Unlock()
	})
	return s.db.Close()
}
