package runlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // the pgx driver, "pgx"

	"github.com/toolmesh/toolmesh/internal/failpoint"
)

// OpenPostgres opens the journal in the PostgreSQL database of dsn (a URL or key=value
// string, as pgx takes it), creating its tables when missing. Several orchestrators may
// share it: appends lock the run's row, so the lease's epoch fences a stale owner.
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("runlog: open PostgreSQL: %w", err)
	}
	// A transaction of this store that locks a run's row (a take-over, a decision) lasts
	// milliseconds; one whose orchestrator stopped meanwhile (SIGSTOP, a partition) held
	// the row until its connection died, and every group of writes of other replicas
	// with a write of that run waited for it, then failed whole after a minute. The
	// server ends such a session after idleInTransaction (unless the DSN sets the
	// parameter, as itself or in its options): the groups wait that long at most.
	params := map[string]string{}
	if _, set := cfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set && !strings.Contains(cfg.RuntimeParams["options"], "idle_in_transaction_session_timeout") {
		params["idle_in_transaction_session_timeout"] = strconv.Itoa(int(idleInTransaction.Milliseconds()))
	}
	db := pgOpen(dsn, cfg, params)
	db.SetMaxOpenConns(16)
	db.SetConnMaxIdleTime(time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("runlog: PostgreSQL is not reachable: %w", err)
	}
	s := &sqlStore{db: db, now: time.Now, d: dialect{
		name:      "PostgreSQL",
		ph:        func(i int) string { return "$" + strconv.Itoa(i) },
		blob:      "BYTEA",
		forUpdate: " FOR UPDATE",
		// Each commit waits for a round trip and the server's fsync: two at once keep the
		// server busy (one is sent while the other waits), and a commit waits a moment for
		// more writes when fewer came than last time. More in flight made the server's
		// commits slower than they were many.
		committers:  2,
		nextSeq:     nextSeqOfRecords,
		gather:      500 * time.Microsecond,
		commitGroup: pgCommitGroup,
		renewRows:   pgRenewRows,
		tables:      `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`,
		index: `SELECT x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = $1 AND n.nspname = current_schema()`,
		unique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
	}}
	if err := migrateLocked(ctx, db, s); err != nil {
		_ = db.Close()
		return nil, err
	}
	// The committers' connections plan without sequential scans: their statement finds
	// runs by key, and the planner, whose statistics lag a journal that grows, chose to
	// scan the runs table for it at every commit.
	params["enable_seqscan"] = "off"
	s.pgMode = cfg.DefaultQueryExecMode
	s.commitDB = pgOpen(dsn, cfg, params)
	s.commitDB.SetMaxOpenConns(s.d.committers + 1)
	s.commitDB.SetConnMaxIdleTime(time.Minute)
	s.start()
	s.indexed = make(chan struct{})
	s.done.Go(func() {
		defer close(s.indexed)
		s.pgEnsureIndexes()
	})
	return s, nil
}

// indexLock is the advisory lock under which one replica at a time builds the indexes a
// journal lacks; the others do not wait for it.
const indexLock = migrationLock + 1

// pgEnsureIndexes builds the indexes the journal lacks (one written by an earlier
// version), in the background and without blocking the replicas' writes (CREATE INDEX
// CONCURRENTLY, which a transaction cannot hold: outside the migration lock, whose
// waiters it would wait for). One replica builds them, under indexLock; the others go on
// without them meanwhile (Prune reads more), and look again every indexRetry: once the
// builder is done they find the index, and where it stopped (a replica killed during
// the build, which leaves the index unusable, costing every ending run an update of it)
// one of them builds it again. A build that failed is tried again as well. Close stops
// a build and the looks.
func (s *sqlStore) pgEnsureIndexes() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	failures := 0
	for {
		done, err := s.pgBuildIndex(ctx, endedIndex, endedIndexOn)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			failures++
			slog.Warn("the journal's index of ended runs could not be built; runs are pruned without it (slower) meanwhile, and it is tried again", "error", err.Error(), "retry", indexWait(failures).String())
		case done && failures > 0:
			slog.Info("the journal's index of ended runs is built")
		}
		if done {
			return
		}
		if err == nil {
			failures = 0 // another replica builds it
		}
		t := time.NewTimer(indexWait(failures))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// indexRetry is how often a replica looks again at an index it lacks and another builds.
var indexRetry = time.Minute

// indexWait is how long a replica waits before it looks again at an index it lacks,
// after failures builds of it that failed in a row: indexRetry, doubled at each failure
// up to an hour, since a build that fails late (a disk full) has read the whole table.
func indexWait(failures int) time.Duration {
	if failures <= 0 {
		return indexRetry
	}
	return min(indexRetry<<min(failures-1, 10), time.Hour)
}

// pgBuildIndex builds index name on on, unless it exists and is usable or another replica
// builds the journal's indexes; done says the index is there and usable.
func (s *sqlStore) pgBuildIndex(ctx context.Context, name, on string) (done bool, err error) {
	if exists, valid, err := s.indexState(ctx, s.db, name); err != nil || (exists && valid) {
		return err == nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	var mine bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(indexLock)).Scan(&mine); err != nil || !mine {
		return false, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(uctx, `RESET statement_timeout`)
		_, _ = conn.ExecContext(uctx, `SELECT pg_advisory_unlock($1)`, int64(indexLock))
	}()
	// A build takes as long as the table needs: a DSN's statement_timeout would end it
	// at every start.
	if _, err := conn.ExecContext(ctx, `SET statement_timeout = 0`); err != nil {
		return false, err
	}
	exists, valid, err := s.indexState(ctx, conn, name)
	switch {
	case err != nil:
		return false, err
	case exists && valid:
		return true, nil // built meanwhile
	case exists:
		if _, err := conn.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+name); err != nil {
			return false, fmt.Errorf("dropping the unusable index %s: %w", name, s.d.why(err))
		}
	}
	if _, err := conn.ExecContext(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+name+` ON `+on); err != nil {
		return false, fmt.Errorf("building the index %s: %w", name, s.d.why(err))
	}
	return true, nil
}

// pgOpen opens a pool of connections to the database of dsn, parsed as cfg, with the
// run-time parameters params besides the DSN's. Each connection parses dsn again, as
// database/sql's pgx driver does, so that a password file or environment that changed
// (a rotated password) is read at the next connection.
func pgOpen(dsn string, cfg *pgx.ConnConfig, params map[string]string) *sql.DB {
	params = maps.Clone(params) // the caller's map may change for its next pool
	with := func(c *pgx.ConnConfig) {
		for k, v := range params {
			c.RuntimeParams[k] = v
		}
	}
	first := cfg.Copy()
	with(first)
	return stdlib.OpenDB(*first, stdlib.OptionBeforeConnect(func(_ context.Context, c *pgx.ConnConfig) error {
		fresh, err := pgx.ParseConfig(dsn)
		if err != nil {
			return err
		}
		with(fresh)
		*c = *fresh
		return nil
	}))
}

// idleInTransaction is how long the server lets a session of the store sit idle inside
// a transaction (idle_in_transaction_session_timeout) before it ends it.
const idleInTransaction = 5 * time.Second

// migrationLock is the advisory lock replicas take to create or upgrade the tables one at
// a time: two replicas starting at once must not both create them.
const migrationLock = 0x746f6f6c6d657368 // "toolmesh"

// migrateLocked migrates under the advisory lock, held by a connection of its own.
func migrateLocked(ctx context.Context, db *sql.DB, s *sqlStore) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("runlog: PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLock)); err != nil {
		return fmt.Errorf("runlog: PostgreSQL: taking the migration lock: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLock))
	}()
	return s.migrate(ctx)
}

// pgCommit is the statement that commits a group of writes on PostgreSQL, in one round
// trip: the writes travel as arrays, a row of v each (op 1 creates a run, 2 ends or holds
// it, 0 appends to it). New runs are inserted (one that exists already is not). An
// append's run is checked — its lease, its state, its next sequence number, read from
// its last row of records — and locked until the commit (FOR SHARE: a take-over's
// UPDATE waits for it, then finds the epoch it must change), but not written: a run's
// row is written when it starts and when it ends, not at every step (each write of it
// was a new version of the row, its index entries, and a dead version to vacuum). An
// end moves the run's row on where its lease and sequence numbers hold (the row lock of
// the UPDATE orders racing writers, and a writer that lost the race finds the row
// changed). The records of every write that passed are inserted, one row per write. It
// returns the ids of the runs written. The state a run must be in comes from v (was),
// not from a constant: with a constant the planner found the rows through the index on
// state, walking every running run and every dead version of one, which grew with the
// journal; through v, it finds them by their key.
const pgCommit = `WITH v AS (
	SELECT *, 'running'::text AS was FROM unnest($1::text[], $2::int[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::text[])
		AS v(run_id, op, owner, epoch, until_, first_, next_, state, note)
), created AS (
	INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated, note)
	SELECT run_id, 'running', owner, epoch, until_, next_, $10, $10, '' FROM v WHERE op = 1
	ON CONFLICT (run_id) DO NOTHING
	RETURNING run_id
), held AS (
	SELECT r.run_id FROM toolmesh_runs r JOIN v ON r.run_id = v.run_id
	WHERE v.op = 0 AND r.owner = v.owner AND r.epoch = v.epoch AND r.state = v.was
		AND (v.first_ IS NULL OR ` + pgNext + ` = v.first_)
	FOR SHARE OF r
), moved AS (
	UPDATE toolmesh_runs r SET next_seq = CASE WHEN v.next_ > 0 THEN v.next_ ELSE ` + pgNext + ` END, state = v.state,
		lease_until = CASE WHEN v.state = 'running' THEN r.lease_until ELSE 0 END, note = v.note, updated = $10
	FROM v WHERE v.op = 2 AND r.run_id = v.run_id AND r.owner = v.owner AND r.epoch = v.epoch AND r.state = v.was
		AND (v.first_ IS NULL OR ` + pgNext + ` = v.first_)
	RETURNING r.run_id
), ok AS (
	SELECT run_id FROM created UNION ALL SELECT run_id FROM held UNION ALL SELECT run_id FROM moved
), ins AS (
	INSERT INTO toolmesh_records (run_id, seq, n, epoch, kind, kinds, time, data)
	SELECT d.run_id, d.seq, d.n, d.epoch, d.kind, d.kinds, d.time, d.data
	FROM unnest($11::text[], $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::bigint[], $17::bigint[], $18::bytea[])
		AS d(run_id, seq, n, epoch, kind, kinds, time, data)
	WHERE d.run_id IN (SELECT run_id FROM ok)
)
SELECT run_id FROM ok`

// pgNext is run r's next sequence number in pgCommit, as nextSeqOfRecords reads it.
const pgNext = `COALESCE((SELECT d.seq + d.n FROM toolmesh_records d WHERE d.run_id = r.run_id ORDER BY d.seq DESC LIMIT 1), r.next_seq)`

// pgCommitGroup commits group with pgCommit on a connection of the pool, then tells
// why each write that was not written was refused. A deadlock with another replica's
// group (their UPDATEs met the same rows in other orders) is tried again.
func pgCommitGroup(s *sqlStore, group []*write) []error {
	errs := make([]error, len(group))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := s.now()
	cols := pgColumnsOf(group)
	failpoint.Hit(failpoint.StoreBeforeCommit)
	written, err := s.pgCommit(ctx, cols, now)
	if err != nil {
		err = fmt.Errorf("runlog: commit: %w", s.d.why(err))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	failpoint.Hit(failpoint.StoreAfterCommit)
	if len(written) == len(group) {
		return errs
	}
	s.pgRefusals(ctx, group, written, errs)
	return errs
}

// pgColumns are a group of writes as the commit statement takes them: one array per
// column, of the runs and of their records.
type pgColumns struct {
	ids, owners, states, notes []string
	ops                        []int32
	epochs, untils, nexts      []int64
	firsts                     []*int64 // nil: a write without records, whose sequence numbers are not checked
	rIDs, rKinds               []string
	rSeqs, rNs, rEpochs        []int64
	rKindBits, rTimes          []int64
	rData                      [][]byte
}

func pgColumnsOf(group []*write) *pgColumns {
	n := len(group)
	c := &pgColumns{ids: make([]string, n), owners: make([]string, n), states: make([]string, n), notes: make([]string, n),
		ops: make([]int32, n), epochs: make([]int64, n), untils: make([]int64, n), nexts: make([]int64, n), firsts: make([]*int64, n)}
	for i, w := range group {
		c.ids[i], c.owners[i], c.epochs[i], c.untils[i] = w.lease.RunID, w.lease.Owner, w.lease.Epoch, w.lease.Until.UnixNano()
		c.states[i], c.notes[i] = string(StateRunning), w.note
		switch w.kind {
		case writeCreate:
			c.ops[i] = 1
		case writeFinish, writeHold:
			c.ops[i] = 2
			c.states[i] = string(w.state)
		}
		if len(w.records) == 0 {
			c.nexts[i] = 1
			if w.kind != writeCreate {
				c.nexts[i] = 0
			}
			continue
		}
		row := w.row // packed by the writer (submit)
		c.firsts[i], c.nexts[i] = &row.first, w.next(0)
		c.rIDs, c.rKinds = append(c.rIDs, w.lease.RunID), append(c.rKinds, row.kind)
		c.rSeqs, c.rNs, c.rEpochs = append(c.rSeqs, row.first), append(c.rNs, row.n), append(c.rEpochs, w.lease.Epoch)
		c.rKindBits, c.rTimes, c.rData = append(c.rKindBits, row.kinds), append(c.rTimes, row.time), append(c.rData, row.data)
	}
	return c
}

// pgCommit runs the commit statement, again (up to three tries) after a deadlock or a
// serialization failure, and returns the runs it wrote.
func (s *sqlStore) pgCommit(ctx context.Context, c *pgColumns, now time.Time) (map[string]bool, error) {
	written := map[string]bool{}
	var err error
	for try := 0; ; try++ {
		clear(written)
		err = s.onConn(ctx, func(conn *pgx.Conn) error { return pgExecCommit(ctx, conn, s.pgMode, c, now.UnixNano(), written) })
		if err == nil || try == 2 || !retriedConflict(err) {
			return written, err
		}
	}
}

// pgRefusals says, in errs, why the writes of group the commit did not write were
// refused: their rows as they are now. A creation is refused only when its run exists
// (ErrExists whatever its row says now). When the rows cannot be read, the others fail
// with that error, which says the write was not written: their writers try again, where
// a reason made up from no row (the run not found) would have stopped them.
func (s *sqlStore) pgRefusals(ctx context.Context, group []*write, written map[string]bool, errs []error) {
	var refused []any
	for _, w := range group {
		if !written[w.lease.RunID] && w.kind != writeCreate {
			refused = append(refused, w.lease.RunID)
		}
	}
	var found map[string]lockedRun
	var err error
	if len(refused) > 0 {
		found, err = s.pgRunRows(ctx, refused)
	}
	for i, w := range group {
		switch {
		case written[w.lease.RunID]:
			continue
		case w.kind == writeCreate:
			errs[i] = fmt.Errorf("%w: %s", ErrExists, w.lease.RunID)
			continue
		case err != nil:
			errs[i] = fmt.Errorf("runlog: commit: run %s's write was not written, and its run cannot be read to say why: %w", w.lease.RunID, s.d.why(err))
			continue
		}
		r, ok := found[w.lease.RunID]
		if errs[i] = w.check(r, ok); errs[i] == nil {
			// Refused, but the row says it need not have been: it changed since.
			errs[i] = fmt.Errorf("%w: run %s changed while the write was committed", ErrConflict, w.lease.RunID)
		}
	}
}

// pgRunRows reads the rows of runs ids as the committer checks a write against them.
func (s *sqlStore) pgRunRows(ctx context.Context, ids []any) (map[string]lockedRun, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, state, owner, epoch, lease_until, `+nextSeqOfRecords+` FROM toolmesh_runs WHERE run_id IN (?`+
		strings.Repeat(", ?", len(ids)-1)+`)`), ids...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	found := map[string]lockedRun{}
	for rows.Next() {
		var id, state string
		var r lockedRun
		if err := rows.Scan(&id, &state, &r.owner, &r.epoch, &r.until, &r.nextSeq); err != nil {
			return nil, err
		}
		r.state = State(state)
		found[id] = r
	}
	return found, rows.Err()
}

// onConn runs fn on a connection of the pool, as pgx's own.
func (s *sqlStore) onConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := s.commitDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("runlog: a connection of %T, not pgx's", dc)
		}
		return fn(c.Conn())
	})
}

// pgRenewAll renews leases and reads their runs' decisions under a key in one
// statement. It skips the rows another transaction holds (a commit of the run under way,
// or one stuck with its connection) rather than wait for them with every other lease
// of the batch: pgRenewRows tries those again, and RenewAll leaves those still busy to
// Renew.
const pgRenewAll = `WITH l(run_id, owner, epoch) AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])),
	k AS (SELECT r.run_id FROM toolmesh_runs r JOIN l ON r.run_id = l.run_id AND r.owner = l.owner AND r.epoch = l.epoch
		WHERE r.state = $4 FOR UPDATE OF r SKIP LOCKED),
	u AS (UPDATE toolmesh_runs r SET lease_until = $5, updated = $6 FROM k WHERE r.run_id = k.run_id RETURNING r.run_id, r.owner, r.epoch)
	SELECT u.run_id, u.owner, u.epoch, d.approve, d.reason, d.decided_by, d.time
	FROM u LEFT JOIN toolmesh_decisions d ON d.run_id = u.run_id AND d.call_key = $7`

func pgRenewRows(s *sqlStore, ctx context.Context, leases []Lease, until, now time.Time, key string) (map[Lease]decided, error) {
	renewed := make(map[Lease]decided, len(leases))
	left := leases
	for try := 0; ; try++ {
		if err := pgRenewOnce(s, ctx, left, until, now, key, renewed); err != nil {
			return nil, err
		}
		left = slices.DeleteFunc(slices.Clone(left), func(l Lease) bool {
			_, ok := renewed[Lease{RunID: l.RunID, Owner: l.Owner, Epoch: l.Epoch}]
			return ok
		})
		if s.renewTried != nil {
			s.renewTried(try, left)
		}
		// The rows skipped were, most likely, locked by a commit of their runs, which
		// holds them about a millisecond: they are tried again a moment later, and
		// those still busy then (or stale) are left to Renew.
		if len(left) == 0 || try == pgRenewTries-1 {
			return renewed, nil
		}
		select {
		case <-time.After(pgRenewPause):
		case <-ctx.Done():
			return renewed, nil
		}
	}
}

// pgRenewTries bounds the statements of a RenewAll on PostgreSQL; pgRenewPause is the
// wait before the leases of busy rows are tried again.
const (
	pgRenewTries = 3
	pgRenewPause = 2 * time.Millisecond
)

// pgRenewOnce runs pgRenewAll for leases, adding those it renewed to renewed.
func pgRenewOnce(s *sqlStore, ctx context.Context, leases []Lease, until, now time.Time, key string, renewed map[Lease]decided) error {
	ids, owners, epochs := make([]string, len(leases)), make([]string, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		ids[i], owners[i], epochs[i] = l.RunID, l.Owner, l.Epoch
	}
	rows, err := s.db.QueryContext(ctx, pgRenewAll, ids, owners, epochs, string(StateRunning), until.UnixNano(), now.UnixNano(), key)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var l Lease
		var approve sql.NullBool
		var reason, by sql.NullString
		var t sql.NullInt64
		if err := rows.Scan(&l.RunID, &l.Owner, &l.Epoch, &approve, &reason, &by, &t); err != nil {
			return err
		}
		var d decided
		if approve.Valid {
			d = decided{d: Decision{Approve: approve.Bool, Reason: reason.String, By: by.String, Time: time.Unix(0, t.Int64)}, ok: true}
		}
		renewed[l] = d
	}
	return rows.Err()
}
