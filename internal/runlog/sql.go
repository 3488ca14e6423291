package runlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the journal's tables this code writes.
const SchemaVersion = 4

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
	// index reads whether index $1 exists and is usable (one row, true or false; none
	// when it does not exist).
	index string
	// unique reports whether err is a unique-constraint violation.
	unique func(err error) bool
	// explain, when set, adds what an error of the database means for the operator.
	explain func(err error) error
	// clustered ends the records table's definition so that its rows are stored in the
	// order of their key (a run's rows together), where the database needs telling.
	clustered string
	// nextSeq, when set, is how a run's next sequence number is read (in place of the
	// next_seq column, which the dialect's committer does not keep up to date while the
	// run goes on).
	nextSeq string
	// gather, when set, is how long a committer waits for more writes while many runs
	// write (see pace): a commit costs a sync whatever its size.
	gather time.Duration
	// committers is how many groups of writes may commit at once: one where the
	// database has one writer (SQLite), a few where commits wait on a server (each has
	// a connection of its own, and the server flushes their commits together).
	committers int
	// commitGroup commits a group of writes, in one transaction: PostgreSQL's in one
	// statement (one round trip), SQLite's with short statements on a connection of the
	// committer's own.
	commitGroup func(s *sqlStore, group []*write) []error
	// renewRows renews the leases of RenewAll in one statement (renewValues where nil)
	// and returns those it renewed, with the decision under key of each.
	renewRows func(s *sqlStore, ctx context.Context, leases []Lease, until, now time.Time, key string) (map[Lease]decided, error)
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

	// commitDB is PostgreSQL's committers' pool; pgMode how its DSN has pgx run
	// statements (default_query_exec_mode).
	commitDB *sql.DB
	pgMode   pgx.QueryExecMode
	// writer is the connection SQLite's applier writes the database on; logged its
	// committer, commit log and applier.
	writer *sqliteWriter
	logged *sqliteLogged
	// renewTried, set by tests, hears each try of PostgreSQL's RenewAll with the leases
	// it left.
	renewTried func(try int, left []Lease)
	// runRow is readRunRow's statement, prepared at its first use.
	runRowMu sync.Mutex
	runRow   *sql.Stmt
	// writes feeds the committers (commit); closed stops them, done counts them.
	writes    chan *write
	closed    chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
	// indexed, on PostgreSQL, is closed once the indexes the journal lacked at open are
	// built, by this replica or another, or the store is closed (pgEnsureIndexes).
	indexed chan struct{}
	// commits, written and committing count the groups committed, their writes and the
	// time they took; waited the writers' waits for them, logging the time spent writing
	// the commit log (Stats).
	commits, written, committing, waited, logging atomic.Int64
	// failing is the error of the last commit when it failed as a whole, at failedAt
	// (Health).
	healthMu sync.Mutex
	failing  error
	failedAt time.Time
	// busy holds, where several committers commit at once, the runs with a write in a
	// group under way: a run's next write waits for that group to commit. PostgreSQL
	// checks a write against the run's records as they were when its statement began, so
	// two writes of one run committed at once could both pass, and the second then fail
	// its whole group on the records' key. freed wakes a committer whose writes all
	// waited so.
	busyMu sync.Mutex
	busy   map[string]bool
	freed  chan struct{}
	// pruneFault, set by tests, is called before Prune commits the deletion of a chunk
	// of runs.
	pruneFault func()
}

// start starts the committers.
func (s *sqlStore) start() {
	s.writes, s.closed = make(chan *write), make(chan struct{})
	if s.d.committers > 1 {
		s.busy, s.freed = map[string]bool{}, make(chan struct{}, 1)
	}
	for range max(s.d.committers, 1) {
		s.done.Add(1)
		go s.commit()
	}
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

// writeKind is what a write does to its run.
type writeKind int

const (
	writeAppend writeKind = iota
	writeCreate
	writeFinish
	writeHold
)

// write is one run's write waiting for a committer: an append, a creation with its
// first records, a finish with its last ones, or a hold.
type write struct {
	kind    writeKind
	lease   Lease
	records []Record
	// state is the state a finish or a hold leaves the run in; note, a hold's reason.
	state State
	note  string
	done  chan error
	// row is the records packed as a row: packed by the writer before it hands the
	// write over, so that the committers, which take the writes of every run one group
	// at a time, do not.
	row *loggedRow
}

// submit hands w to the committers and waits for its outcome. A caller whose context
// ends first gets its error; the write may still commit, as any commit whose answer
// the caller did not get.
func (s *sqlStore) submit(ctx context.Context, w *write, what string) error {
	if len(w.records) > 0 {
		if s.logged != nil {
			// The applier gives the row's array back once it has copied it.
			w.row = packPooledRow(w.records, w.lease.Epoch, s.now())
		} else {
			w.row = packRow(w.records, w.lease.Epoch, s.now())
		}
	}
	for {
		err := s.submitOnce(ctx, w, what)
		if !errors.Is(err, errPruningRun) {
			return err
		}
		select {
		case <-s.logged.whenPruned(w.lease.RunID):
		case <-s.closed:
			return fmt.Errorf("runlog: %s: the store is closed", what)
		case <-ctx.Done():
			return fmt.Errorf("runlog: %s: %w", what, ctx.Err())
		}
	}
}

// submitOnce hands w, packed, to the committers and waits for its outcome.
func (s *sqlStore) submitOnce(ctx context.Context, w *write, what string) error {
	w.done = make(chan error, 1)
	start := time.Now()
	select {
	case s.writes <- w:
	case <-s.closed:
		return fmt.Errorf("runlog: %s: the store is closed", what)
	case <-ctx.Done():
		return fmt.Errorf("runlog: %s: %w", what, ctx.Err())
	}
	// From here the write is the committers' (and counted in Stats.Writes once
	// committed): the wait counts, whether its outcome comes or the caller gives up.
	defer func() { s.waited.Add(int64(time.Since(start))) }()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("runlog: %s: %w", what, ctx.Err())
	}
}

// noteCommit keeps the error of a commit that failed as a whole (every write failed
// with it), for Health, and forgets it once a commit succeeds.
func (s *sqlStore) noteCommit(errs []error) {
	// A creation that waits for a prune says nothing of the store either way.
	var told []error
	for _, err := range errs {
		if !errors.Is(err, errPruningRun) {
			told = append(told, err)
		}
	}
	if len(told) == 0 {
		return
	}
	failed := true
	for _, err := range told {
		if err == nil || errors.Is(err, ErrFenced) || errors.Is(err, ErrConflict) || errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) || errors.Is(err, errUnreadableRun) {
			failed = false
			break
		}
	}
	s.healthMu.Lock()
	if failed {
		s.failing, s.failedAt = told[0], time.Now()
	} else {
		s.failing = nil
	}
	s.healthMu.Unlock()
}

// failingFor is how long Health reports a commit that failed as a whole, unless a
// commit succeeds first: then it answers as if none had, so that an orchestrator whose
// journal recovered without a write (its disk has room again, and readiness kept runs
// away meanwhile) is ready again, and the next commit says whether it did.
const failingFor = 5 * time.Second

// Health implements HealthReporter.
func (s *sqlStore) Health(ctx context.Context) error {
	s.healthMu.Lock()
	failing, at := s.failing, s.failedAt
	s.healthMu.Unlock()
	if failing != nil && time.Since(at) < failingFor {
		return failing
	}
	if s.logged != nil {
		// A commit log that failed to write or sync takes no more entries: that lasts.
		if broken := s.logged.brokenNow.Load(); broken != nil {
			return *broken
		}
		s.logged.amu.Lock()
		err := s.logged.applyErr
		s.logged.amu.Unlock()
		if err != nil {
			return err
		}
	}
	var one int
	if err := s.db.QueryRowContext(ctx, `SELECT 1 FROM toolmesh_meta LIMIT 1`).Scan(&one); err != nil {
		return fmt.Errorf("runlog: the %s journal does not answer: %w", s.d.name, s.d.why(err))
	}
	return nil
}

// Stats implements StatsReporter.
func (s *sqlStore) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Writes: s.written.Load(), Committing: time.Duration(s.committing.Load()),
		Waited: time.Duration(s.waited.Load()), Logging: time.Duration(s.logging.Load())}
}

// maxGroup bounds the writes one transaction commits, maxGroupBytes their rows' bytes:
// a write may hold MaxAppendBytes, and a group of maxGroup such writes would pass what one
// message to PostgreSQL may carry (1 GiB), failing the whole group. A write larger than
// maxGroupBytes alone still commits, in a group of its own.
const maxGroup = 256

var maxGroupBytes = 64 << 20 // a variable for tests

// size is the bytes of w's row.
func (w *write) size() int {
	if w.row == nil {
		return 0
	}
	return len(w.row.data)
}

// commit takes queued writes a group at a time and commits each group in one
// transaction (group commit: one fsync, one round trip, for every run that waits), until
// the store closes. A group holds one write of a run at most: a second waits for the
// next group, so that each write's checks see the one before.
func (s *sqlStore) commit() {
	defer s.done.Done()
	var carry []*write
	var p pace
	for {
		group := carry
		carry = nil
		if len(group) == 0 {
			select {
			case w := <-s.writes:
				group = append(group, w)
			case <-s.closed:
				return
			}
		}
		runs := make(map[string]bool, len(group))
		bytes, full := 0, false
		// take adds w to the group, or, when the group (or another committer's) has a
		// write of its run, or the group would grow past maxGroupBytes, to the next group.
		take := func(w *write) {
			if full || (len(group) > 0 && bytes+w.size() > maxGroupBytes) {
				// Once one write waits for the next group, every later one does: a
				// later write of its run must not commit before it.
				carry, full = append(carry, w), true
				return
			}
			if runs[w.lease.RunID] || !s.claim(w.lease.RunID) {
				carry = append(carry, w)
				return
			}
			runs[w.lease.RunID] = true
			bytes += w.size()
			group = append(group, w)
		}
		queued := group
		group = nil
		for _, w := range queued {
			take(w)
		}
	more:
		for len(group) < maxGroup && !full {
			select {
			case w := <-s.writes:
				take(w)
			default:
				break more
			}
		}
		if want := p.want(time.Now()); s.d.gather > 0 && len(group) < want && !full {
			// Many runs write: let more of them join, briefly, rather than pay a commit
			// (an fsync, a round trip) for a few.
			t := time.NewTimer(s.d.gather)
		gather:
			for len(group) < want && !full {
				select {
				case w := <-s.writes:
					take(w)
				case <-t.C:
					break gather
				}
			}
			t.Stop()
		}
		if len(group) == 0 {
			// Every write waits for a write of its run that another committer commits.
			select {
			case <-s.freed:
			case w := <-s.writes:
				carry = append(carry, w)
			case <-s.closed:
				for _, w := range carry {
					w.done <- errors.New("runlog: the store is closed")
				}
				return
			}
			continue
		}
		start := time.Now()
		p.note(group, start)
		errs := s.commitGroup(group)
		s.release(group)
		s.noteCommit(errs)
		s.commits.Add(1)
		s.written.Add(int64(len(group)))
		s.committing.Add(int64(time.Since(start)))
		for i, w := range group {
			w.done <- errs[i]
		}
	}
}

// pace estimates how many runs write at about the same time: the most runs a committer
// saw open at once in its last window of paceWindow — written to, and not ended in the
// window since. Runs that follow one another (one at a time, each ending before the next
// starts) count as one.
type pace struct {
	since        time.Time
	runs         map[string]struct{}
	peak, active int
}

// paceWindow is long enough for every run of a busy orchestrator to write in it (a loop
// step, a few milliseconds), and short enough to follow a burst's end.
const paceWindow = 20 * time.Millisecond

// note counts group's runs into the window, starting the next one when it is over.
func (p *pace) note(group []*write, now time.Time) {
	if since := now.Sub(p.since); since >= paceWindow {
		p.active, p.peak = p.peak, 0
		if since >= 2*paceWindow {
			p.active = 0 // the window ended long ago: nobody wrote since
		}
		clear(p.runs)
		p.since = now
	}
	if p.runs == nil {
		p.runs = make(map[string]struct{}, len(group))
	}
	for _, w := range group {
		switch {
		case w.kind == writeFinish || w.kind == writeHold:
			delete(p.runs, w.lease.RunID)
		case len(p.runs) < 2*maxGroup:
			p.runs[w.lease.RunID] = struct{}{}
		}
	}
	p.peak = max(p.peak, len(p.runs))
}

// want is how many writes a group waits for (for at most the dialect's gather) at now:
// half the runs open at once in the last window that ended. A run writing alone, or one
// of two, never waits: the gather is for many runs at once, where it turns many commits
// into one (a commit costs the same CPU, in this process and the kernel's, whatever it
// holds), which is worth a fraction of a millisecond of each one's step. Nor does a run
// writing after a pause (the last window ended long ago).
func (p *pace) want(now time.Time) int {
	active := p.active
	switch since := now.Sub(p.since); {
	case since >= 2*paceWindow:
		return 0
	case since >= paceWindow:
		active = p.peak // the window under way has ended: note starts the next
	}
	return min(active/2, maxGroup)
}

// claim marks run id as having a write in a group under way, or reports that it has one
// already; always true with one committer.
func (s *sqlStore) claim(id string) bool {
	if s.busy == nil {
		return true
	}
	s.busyMu.Lock()
	defer s.busyMu.Unlock()
	if s.busy[id] {
		return false
	}
	s.busy[id] = true
	return true
}

// release ends the claims of group's runs, once it committed, and wakes a committer
// whose writes waited for one.
func (s *sqlStore) release(group []*write) {
	if s.busy == nil {
		return
	}
	s.busyMu.Lock()
	for _, w := range group {
		delete(s.busy, w.lease.RunID)
	}
	s.busyMu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// commitGroup commits group, a write per run, and reports each write's outcome: the
// dialect's way. A write that fails its checks writes nothing and fails alone; a
// failure of the transaction itself fails them all.
func (s *sqlStore) commitGroup(group []*write) []error {
	return s.d.commitGroup(s, group)
}

// lockedRun is a run's row as a committer read it.
type lockedRun struct {
	state                 State
	owner                 string
	epoch, until, nextSeq int64
}

// check reports why w cannot be written to run r (found says whether it exists), or
// nil.
func (w *write) check(r lockedRun, found bool) error {
	id := w.lease.RunID
	if w.kind == writeCreate {
		if found {
			return fmt.Errorf("%w: %s", ErrExists, id)
		}
		return nil
	}
	switch {
	case !found:
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case r.state.Terminal() || r.state == StateHeld || r.epoch != w.lease.Epoch || r.owner != w.lease.Owner:
		return fmt.Errorf("%w: run %s is at epoch %d (owner %s, %s), the write was made under epoch %d", ErrFenced, id, r.epoch, r.owner, r.state, w.lease.Epoch)
	case len(w.records) > 0 && w.records[0].Seq != r.nextSeq:
		return fmt.Errorf("%w: run %s's next record is %d, not %d", ErrConflict, id, r.nextSeq, w.records[0].Seq)
	}
	return nil
}

// next is the run's next sequence number once w is written, after prev.
func (w *write) next(prev int64) int64 {
	if len(w.records) == 0 {
		return prev
	}
	return w.records[len(w.records)-1].Seq + 1
}

// checkWrite refuses what no store accepts in a write's records: those of an append,
// and the first of Create's and the last of Finish's, when there are any.
func checkWrite(lease Lease, records []Record) error {
	if len(records) == 0 {
		return nil
	}
	if err := checkAppend(lease, records); err != nil {
		return err
	}
	total := 0
	for _, r := range records {
		total += len(r.Data)
	}
	if total > MaxAppendBytes {
		return fmt.Errorf("%w: the records of one write are %d bytes; the limit is %d", ErrInvalid, total, MaxAppendBytes)
	}
	return nil
}

func (s *sqlStore) Create(ctx context.Context, runID, owner string, ttl time.Duration, first ...Record) (Lease, error) {
	if err := checkID("run id", runID); err != nil {
		return Lease{}, err
	}
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	lease := Lease{RunID: runID, Owner: owner, Epoch: 1, Until: time.Unix(0, s.now().Add(ttl).UnixNano())}
	if err := checkWrite(lease, first); err != nil {
		return Lease{}, err
	}
	if len(first) > 0 && first[0].Seq != 1 {
		return Lease{}, fmt.Errorf("%w: a run's first record has sequence number 1, not %d", ErrInvalid, first[0].Seq)
	}
	if err := s.submit(ctx, &write{kind: writeCreate, lease: lease, records: first}, "create "+runID); err != nil {
		return Lease{}, err
	}
	return lease, nil
}

// Append queues the records for a committer, which commits the writes of every run
// that queued meanwhile in one transaction (group commit): with many runs in flight, one
// commit (one fsync) carries them all. Each write is still checked on its own (its
// lease, its sequence numbers); one that fails fails alone.
func (s *sqlStore) Append(ctx context.Context, lease Lease, records []Record) error {
	if len(records) == 0 {
		return fmt.Errorf("%w: no records", ErrInvalid)
	}
	if err := checkWrite(lease, records); err != nil {
		return err
	}
	return s.submit(ctx, &write{kind: writeAppend, lease: lease, records: records}, "append to "+lease.RunID)
}

func (s *sqlStore) Finish(ctx context.Context, lease Lease, state State, last ...Record) error {
	if !state.Terminal() {
		return fmt.Errorf("%w: %q is not a finished run's state", ErrInvalid, state)
	}
	if err := checkWrite(lease, last); err != nil {
		return err
	}
	return s.submit(ctx, &write{kind: writeFinish, lease: lease, records: last, state: state}, "finish "+lease.RunID)
}

func (s *sqlStore) Hold(ctx context.Context, lease Lease, reason string) error {
	if err := checkNote(reason); err != nil {
		return err
	}
	return s.submit(ctx, &write{kind: writeHold, lease: lease, state: StateHeld, note: reason}, "hold "+lease.RunID)
}

// endedIndex holds the runs that ended, in the order in which Prune takes them (the
// oldest first): a page of them is read without reading the runs that go on or the
// others that ended. Its predicate names the states literally, as Prune's query does, so
// that the planner can tell the index serves the query. A run enters it when it ends;
// its creation and the renewals of its lease do not touch it.
const (
	endedIndex   = "toolmesh_runs_ended"
	endedIndexOn = `toolmesh_runs (updated, run_id) WHERE state NOT IN ('running', 'held')`
)

// querier is a database or one of its connections.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// indexState reads whether index name exists and whether it is usable (a concurrent
// build that failed leaves one that is not).
func (s *sqlStore) indexState(ctx context.Context, q querier, name string) (exists, valid bool, err error) {
	err = q.QueryRowContext(ctx, s.d.index, name).Scan(&valid)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("runlog: reading the journal's indexes: %w", s.d.why(err))
	}
	return true, valid, nil
}

// ensureIndex creates index name on on unless it exists: a SQLite journal written by an
// earlier version gets it at its first open by this one, before the orchestrator serves
// (seconds for millions of runs).
func (s *sqlStore) ensureIndex(ctx context.Context, name, on string) error {
	if exists, _, err := s.indexState(ctx, s.db, name); err != nil || exists {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS `+name+` ON `+on); err != nil {
		return fmt.Errorf("runlog: creating the index %s: %w", name, s.d.why(err))
	}
	return nil
}

// migrate creates the tables, or checks that the database holds a journal of a version
// this code reads. A database with other tables and no journal is refused. A new journal
// gets every index; one written before an index was added gets it apart (ensureIndex,
// pgEnsureIndexes).
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
		case "1", "2", "3":
			return s.upgrade(ctx, v)
		}
		return fmt.Errorf("runlog: the journal's schema is version %s; this orchestrator reads versions 1 to %d", v, SchemaVersion)
	}
	stmts := []string{
		`CREATE TABLE toolmesh_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`CREATE TABLE toolmesh_runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
			lease_until BIGINT NOT NULL, next_seq BIGINT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL, note TEXT NOT NULL DEFAULT '')`,
		`CREATE INDEX toolmesh_runs_state ON toolmesh_runs (state, lease_until)`,
		`CREATE INDEX ` + endedIndex + ` ON ` + endedIndexOn,
		`CREATE TABLE toolmesh_records (run_id TEXT NOT NULL, seq BIGINT NOT NULL, epoch BIGINT NOT NULL, kind TEXT NOT NULL,
			time BIGINT NOT NULL, data ` + s.d.blob + `, n BIGINT NOT NULL DEFAULT 1, kinds BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (run_id, seq))` + s.d.clustered,
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

// upgrade migrates a journal of an earlier version to this one: version 2 added the
// decisions table, version 3 the workers table, version 4 rows of several records (n,
// kinds) and a run's note. Rows written before hold one record each (n 1, kinds 0), and
// are read as they are. Replicas that start at once may both try; the second finds it
// done (PostgreSQL replicas migrate one at a time under a lock).
func (s *sqlStore) upgrade(ctx context.Context, from string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: upgrading the journal: %w", s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	stmts := []string{decisionsTable, workersTable,
		`ALTER TABLE toolmesh_records ADD COLUMN n BIGINT NOT NULL DEFAULT 1`,
		`ALTER TABLE toolmesh_records ADD COLUMN kinds BIGINT NOT NULL DEFAULT 0`,
		`ALTER TABLE toolmesh_runs ADD COLUMN note TEXT NOT NULL DEFAULT ''`}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("runlog: upgrading the journal from version %s: %w", from, s.d.why(err))
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
	return s.exclusive([]string{runID}, func() error { return s.decide(ctx, runID, key, d) })
}

func (s *sqlStore) decide(ctx context.Context, runID, key string, d Decision) error {
	if err := checkDecision(runID, key, d); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("runlog: decide on %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	r, err := s.lockRun(ctx, tx, runID)
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
	if err := s.settleRun(runID); err != nil {
		return Decision{}, false, err
	}
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

// settle waits until the database holds every write committed so far: SQLite's store
// commits to its commit log first (sqliteLogged). Reads and the writes that bypass the
// committer call it.
func (s *sqlStore) settle() error {
	if s.logged == nil {
		return nil
	}
	return s.logged.settled()
}

// settleRun is settle for the reads of one run: it waits for that run's writes only.
func (s *sqlStore) settleRun(runID string) error {
	if s.logged == nil {
		return nil
	}
	return s.logged.settledRun(runID)
}

// readRunRow reads a run's row as a committer checks writes against it.
// Its statement is prepared once: a committer reads the row of every run it has not
// seen, each new one among them, and parsing the query again each time cost a
// committer as much as the read.
func (s *sqlStore) readRunRow(ctx context.Context, runID string) (lockedRun, error) {
	s.runRowMu.Lock()
	if s.runRow == nil {
		st, err := s.db.PrepareContext(ctx, s.q(`SELECT `+s.runColumns()+` FROM toolmesh_runs WHERE run_id = ?`))
		if err != nil {
			s.runRowMu.Unlock()
			return lockedRun{}, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
		}
		s.runRow = st
	}
	st := s.runRow
	s.runRowMu.Unlock()
	r, err := scanRun(st.QueryRowContext(ctx, runID))
	if errors.Is(err, sql.ErrNoRows) {
		return lockedRun{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return lockedRun{}, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	return lockedRun{state: r.State, owner: r.Owner, epoch: r.Epoch, until: r.Until.UnixNano(), nextSeq: r.Records + 1}, nil
}

// exclusive runs fn with the committer held back and every committed write of the runs
// in the database: a write that bypasses the committer (Acquire, Decide, Prune) sees and
// changes what the committer checks against. It forgets the committer's views of runIDs.
func (s *sqlStore) exclusive(runIDs []string, fn func() error) error {
	if s.logged == nil {
		return fn()
	}
	// A prune's deletion holds SQLite's writer: fn waits for it here, not holding the
	// committer's lock (and every append) meanwhile.
	s.logged.pruneMu.Lock()
	defer s.logged.pruneMu.Unlock()
	s.logged.mu.Lock()
	defer s.logged.mu.Unlock()
	// No write is logged while the lock is held: once the database holds the runs'
	// writes, it holds the runs as the committer knows them.
	for _, id := range runIDs {
		if err := s.logged.settledRun(id); err != nil {
			return err
		}
	}
	defer func() {
		for _, id := range runIDs {
			s.logged.forget(id)
		}
	}()
	return fn()
}

// lockRun reads a run's row inside tx, locking it where the dialect can.
func (s *sqlStore) lockRun(ctx context.Context, tx *sql.Tx, runID string) (Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, s.q(`SELECT `+s.runColumns()+` FROM toolmesh_runs WHERE run_id = ?`+s.d.forUpdate), runID))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	return r, nil
}

// Read reads the rows that hold the records after after (a row holds at most MaxBatch
// records, so those that start MaxBatch before it), and unpacks them.
func (s *sqlStore) Read(ctx context.Context, runID string, after int64, limit int, kinds ...Kind) ([]Record, error) {
	if err := s.settleRun(runID); err != nil {
		return nil, err
	}
	after = max(after, 0)
	filter := filterKinds(kinds...)
	query := `SELECT seq, n, epoch, kind, kinds, time, data FROM toolmesh_records WHERE run_id = ? AND seq > ? AND seq + n > ?`
	args := []any{runID, after - MaxBatch, after + 1}
	if len(kinds) > 0 {
		query += ` AND ((kinds <> 0 AND (kinds & ?) <> 0) OR (kinds = 0 AND kind IN (?` + strings.Repeat(", ?", len(kinds)-1) + `)))`
		args = append(args, filter.mask)
		for _, k := range kinds {
			args = append(args, string(k))
		}
	}
	query += ` ORDER BY seq`
	if limit > 0 && !slices.ContainsFunc(kinds, func(k Kind) bool { return kindBit(k) == otherKind }) {
		// Rows do not overlap and each holds a record of the kinds: every row but the
		// one after falls in (whose records up to after are not read) holds a record to
		// read. Not so for a kind without a bit of its own, which shares otherKind with
		// others: its rows are read until the limit is reached.
		query += ` LIMIT ?`
		args = append(args, limit+1)
	}
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = rows.Close() }()
	var out []Record
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.n, &r.epoch, &r.kind, &r.kinds, &r.time, &r.data); err != nil {
			return nil, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
		}
		if out, err = unpack(runID, r, after, filter, limit, out); err != nil {
			return nil, err
		}
		if limit > 0 && len(out) >= limit {
			break
		}
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

// Last reads the run's rows from its end, through the primary key, to the first that
// holds a record of kind.
func (s *sqlStore) Last(ctx context.Context, runID string, kind Kind) (Record, bool, error) {
	if err := s.settleRun(runID); err != nil {
		return Record{}, false, err
	}
	// Rows are read back from the run's end to the first that holds a record of kind: a
	// kind without a bit of its own shares otherKind with others, so a row with its bit
	// may hold none.
	filter := filterKinds(kind)
	query := `SELECT seq, n, epoch, kind, kinds, time, data FROM toolmesh_records
		WHERE run_id = ? AND ((kinds <> 0 AND (kinds & ?) <> 0) OR (kinds = 0 AND kind = ?)) ORDER BY seq DESC`
	if kindBit(kind) != otherKind {
		query += ` LIMIT 1` // a row with the kind's own bit holds a record of it
	}
	rows, err := s.db.QueryContext(ctx, s.q(query), runID, filter.mask, string(kind))
	if err != nil {
		return Record{}, false, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.n, &r.epoch, &r.kind, &r.kinds, &r.time, &r.data); err != nil {
			return Record{}, false, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
		}
		recs, err := unpack(runID, r, 0, filter, 0, nil)
		switch {
		case err != nil:
			return Record{}, false, err
		case len(recs) > 0:
			return recs[len(recs)-1], true, nil
		case kindBit(kind) != otherKind:
			return Record{}, false, fmt.Errorf("%w: run %s, records %d to %d: the row says it holds a %s record and holds none", ErrDamaged, runID, r.seq, r.seq+max(r.n, 1)-1, kind)
		}
	}
	if err := rows.Err(); err != nil {
		return Record{}, false, fmt.Errorf("runlog: read %s: %w", runID, s.d.why(err))
	}
	if _, err := s.Get(ctx, runID); err != nil {
		return Record{}, false, err
	}
	return Record{}, false, nil
}

// Acquire takes a run whose lease expired, or that owner holds, or that is held (an
// operator's restart tries it again: its note goes).
func (s *sqlStore) Acquire(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error) {
	var l Lease
	err := s.exclusive([]string{runID}, func() (err error) {
		l, err = s.acquire(ctx, runID, owner, ttl)
		return err
	})
	return l, err
}

func (s *sqlStore) acquire(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error) {
	if err := checkID("owner", owner); err != nil {
		return Lease{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Lease{}, fmt.Errorf("runlog: acquire %s: %w", runID, s.d.why(err))
	}
	defer func() { _ = tx.Rollback() }()
	r, err := s.lockRun(ctx, tx, runID)
	if err != nil {
		return Lease{}, err
	}
	now := s.now()
	switch {
	case r.State.Terminal():
		return Lease{}, fmt.Errorf("%w: %s is %s", ErrFinished, runID, r.State)
	case r.State != StateHeld && r.Owner != owner && r.Until.After(now):
		return Lease{}, fmt.Errorf("%w: %s holds %s until %s", ErrLeased, r.Owner, runID, r.Until.Format(time.RFC3339Nano))
	}
	l := Lease{RunID: runID, Owner: owner, Epoch: r.Epoch + 1, Until: time.Unix(0, now.Add(ttl).UnixNano())}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE toolmesh_runs SET owner = ?, epoch = ?, lease_until = ?, updated = ?, state = ?, note = ? WHERE run_id = ?`),
		owner, l.Epoch, l.Until.UnixNano(), now.UnixNano(), string(StateRunning), "", runID); err != nil {
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
	renew := func() (int64, error) {
		res, err := s.db.ExecContext(ctx, s.q(`UPDATE toolmesh_runs SET lease_until = ?, updated = ? WHERE run_id = ? AND owner = ? AND epoch = ? AND state = ?`),
			until.UnixNano(), now.UnixNano(), lease.RunID, lease.Owner, lease.Epoch, string(StateRunning))
		if err != nil {
			return 0, fmt.Errorf("runlog: renew %s: %w", lease.RunID, s.d.why(err))
		}
		return res.RowsAffected()
	}
	n, err := renew()
	if err == nil && n != 1 && s.logged != nil {
		// The run may be in the commit log and not yet in the database: once it is, the
		// renewal finds it.
		if err = s.settleRun(lease.RunID); err == nil {
			n, err = renew()
		}
	}
	if err != nil {
		return Lease{}, err
	}
	if n != 1 {
		if _, gerr := s.Get(ctx, lease.RunID); gerr != nil {
			return Lease{}, gerr
		}
		return Lease{}, fmt.Errorf("%w: run %s, epoch %d", ErrFenced, lease.RunID, lease.Epoch)
	}
	lease.Until = until
	return lease, nil
}

// decided is a run's decision under a key, if it has one.
type decided struct {
	d  Decision
	ok bool
}

func (s *sqlStore) RenewAll(ctx context.Context, leases []Lease, ttl time.Duration, key string) []Renewal {
	if out := checkRenewals(leases); out != nil {
		return out
	}
	out := make([]Renewal, len(leases))
	if len(leases) == 0 {
		return out
	}
	now := s.now()
	until := now.Add(ttl)
	renew := s.d.renewRows
	if renew == nil {
		renew = renewValues
	}
	// A renewed lease is known by its run, owner and epoch (Until zero).
	renewed, err := renew(s, ctx, leases, until, now, key)
	for i, l := range leases {
		d, ok := renewed[Lease{RunID: l.RunID, Owner: l.Owner, Epoch: l.Epoch}]
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("runlog: renew %d leases: %w", len(leases), s.d.why(err))
		case !ok:
			out[i].Err = ErrRenewAlone
		default:
			l.Until = until
			out[i] = Renewal{Lease: l, Decision: d.d, Decided: d.ok}
		}
	}
	return out
}

// renewValues renews leases with one UPDATE of the runs their (run, owner, epoch) values
// name, and reads their decisions under key with one SELECT. A run in the commit log
// and not yet in the database is not renewed: Renew waits for it.
func renewValues(s *sqlStore, ctx context.Context, leases []Lease, until, now time.Time, key string) (map[Lease]decided, error) {
	var b strings.Builder
	args := make([]any, 0, 3+3*len(leases))
	args = append(args, until.UnixNano(), now.UnixNano(), string(StateRunning))
	b.WriteString(`UPDATE toolmesh_runs SET lease_until = ?, updated = ? WHERE state = ? AND (run_id, owner, epoch) IN (VALUES `)
	for i, l := range leases {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?)")
		args = append(args, l.RunID, l.Owner, l.Epoch)
	}
	b.WriteString(`) RETURNING run_id, owner, epoch`)
	rows, err := s.db.QueryContext(ctx, s.q(b.String()), args...)
	if err != nil {
		return nil, err
	}
	renewed := make(map[Lease]decided, len(leases))
	var ids []any
	for rows.Next() {
		var l Lease
		if err := rows.Scan(&l.RunID, &l.Owner, &l.Epoch); err != nil {
			_ = rows.Close()
			return nil, err
		}
		renewed[l] = decided{}
		ids = append(ids, l.RunID)
	}
	if err := rows.Err(); err != nil {
		_ = rows.Close()
		return nil, err
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return renewed, nil
	}
	// The leases are renewed now: a failure to read the decisions leaves them renewed,
	// their decisions unread (read at the next renewal), as Renew and Decision do.
	if err := readDecisions(s, ctx, key, ids, renewed); err != nil {
		slog.Warn("renewing the runs' leases: their decisions could not be read; they are read at the next renewal", "error", s.d.why(err).Error())
	}
	return renewed, nil
}

// readDecisions reads the decisions under key of the runs ids into renewed.
func readDecisions(s *sqlStore, ctx context.Context, key string, ids []any, renewed map[Lease]decided) error {
	q := `SELECT run_id, approve, reason, decided_by, time FROM toolmesh_decisions WHERE call_key = ? AND run_id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	drows, err := s.db.QueryContext(ctx, s.q(q), append([]any{key}, ids...)...)
	if err != nil {
		return err
	}
	defer func() { _ = drows.Close() }()
	byRun := make(map[string]Decision, len(ids))
	for drows.Next() {
		var id string
		var d Decision
		var t int64
		if err := drows.Scan(&id, &d.Approve, &d.Reason, &d.By, &t); err != nil {
			return err
		}
		d.Time = time.Unix(0, t)
		byRun[id] = d
	}
	if err := drows.Err(); err != nil {
		return err
	}
	for l := range renewed {
		if d, ok := byRun[l.RunID]; ok {
			renewed[l] = decided{d: d, ok: true}
		}
	}
	return nil
}

// nextSeqOfRecords is a run's next sequence number as the stores read it: the end of its
// last row of records, or next_seq for a run without records. Their committers write a
// run's row when it starts and when it ends, not at every step, so next_seq is not up to
// date while it runs.
const nextSeqOfRecords = `COALESCE((SELECT r.seq + r.n FROM toolmesh_records r WHERE r.run_id = toolmesh_runs.run_id ORDER BY r.seq DESC LIMIT 1), next_seq)`

// runColumns are a run's columns, next_seq as the dialect reads it.
func (s *sqlStore) runColumns() string {
	next := "next_seq"
	if s.d.nextSeq != "" {
		next = s.d.nextSeq
	}
	return `run_id, state, owner, epoch, lease_until, ` + next + `, created, updated, note`
}

func scanRun(sc interface{ Scan(...any) error }) (Run, error) {
	var r Run
	var state string
	var until, next, created, updated int64
	if err := sc.Scan(&r.ID, &state, &r.Owner, &r.Epoch, &until, &next, &created, &updated, &r.Note); err != nil {
		return Run{}, err
	}
	r.State, r.Records = State(state), next-1
	r.Until, r.Created, r.Updated = time.Unix(0, until), time.Unix(0, created), time.Unix(0, updated)
	return r, nil
}

func (s *sqlStore) Get(ctx context.Context, runID string) (Run, error) {
	if err := s.settleRun(runID); err != nil {
		return Run{}, err
	}
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+s.runColumns()+` FROM toolmesh_runs WHERE run_id = ?`), runID))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return Run{}, fmt.Errorf("runlog: get %s: %w", runID, s.d.why(err))
	}
	return r, nil
}

func (s *sqlStore) list(ctx context.Context, query string, args ...any) ([]Run, error) {
	if err := s.settle(); err != nil {
		return nil, err
	}
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
	query := `SELECT ` + s.runColumns() + ` FROM toolmesh_runs WHERE run_id > ?`
	args := []any{f.After}
	switch f.State {
	case "":
	case StateTerminated, StateReplanRequested: // and runs a journal of an earlier version ended either way
		query += ` AND state IN (?, ?)`
		args = append(args, string(f.State), string(StateEnded))
	default:
		query += ` AND state = ?`
		args = append(args, string(f.State))
	}
	query += ` ORDER BY run_id LIMIT ?`
	return s.list(ctx, query, append(args, listLimit(f.Limit))...)
}

func (s *sqlStore) Expired(ctx context.Context, limit int) ([]Run, error) {
	return s.list(ctx, `SELECT `+s.runColumns()+` FROM toolmesh_runs WHERE state = ? AND lease_until < ? ORDER BY lease_until LIMIT ?`,
		string(StateRunning), s.now().UnixNano(), listLimit(limit))
}

func (s *sqlStore) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := s.settle(); err != nil {
		return 0, err
	}
	rows, err := s.db.QueryContext(ctx, s.q(pruneQuery), before.UnixNano(), listLimit(limit))
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
	return s.deleteEnded(ctx, ids)
}

// deleteEnded deletes those of runs ids that are ended (those found ended when they were
// listed, which another prune may have deleted since, and whose ids may have been taken
// again by runs that go on), a chunk of them at a time, and returns how many it deleted.
func (s *sqlStore) deleteEnded(ctx context.Context, ids []string) (int, error) {
	n := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), pruneChunk)]
		ids = ids[len(chunk):]
		// The runs of a chunk are deleted in one transaction (one sync for all, which
		// lets pruning keep up with runs that end hundreds a second).
		err := s.pruning(chunk, func() ([]string, error) {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			var deleted []string
			for _, id := range chunk {
				// The state is checked again inside the transaction: a run is never deleted
				// while it runs.
				var res sql.Result
				res, err = tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_runs WHERE run_id = ? AND state NOT IN (?, ?)`), id, string(StateRunning), string(StateHeld))
				if err != nil {
					break
				}
				if k, _ := res.RowsAffected(); k != 1 {
					continue
				}
				deleted = append(deleted, id)
				if _, err = tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_records WHERE run_id = ?`), id); err != nil {
					break
				}
				if _, err = tx.ExecContext(ctx, s.q(`DELETE FROM toolmesh_decisions WHERE run_id = ?`), id); err != nil {
					break
				}
			}
			if err != nil {
				_ = tx.Rollback()
				return nil, err
			}
			if f := s.pruneFault; f != nil {
				f()
			}
			if err := tx.Commit(); err != nil {
				return nil, err
			}
			n += len(deleted)
			return deleted, nil
		})
		if err != nil {
			return n, fmt.Errorf("runlog: prune %s to %s: %w", chunk[0], chunk[len(chunk)-1], s.d.why(err))
		}
	}
	return n, nil
}

// pruneQuery reads a page of the oldest runs that ended before a time. Its states are
// literal, as in the predicate of the index that serves it (endedIndex).
const pruneQuery = `SELECT run_id FROM toolmesh_runs WHERE state NOT IN ('running', 'held') AND updated < ? ORDER BY updated, run_id LIMIT ?`

// pruneChunk is how many runs Prune deletes in one transaction.
const pruneChunk = 32

// pruning runs fn, which deletes those of the ended runs ids it still finds ended and
// returns them, with the SQLite committer told: it forgets what it knew of the runs
// deleted once the deletion is committed (a run of the same id may be created again,
// and is created once), and a creation of one of ids meanwhile waits until then
// (submit). The committer is not held back during the deletion (a transaction that
// waits for the applier's copy, then syncs): it held appends back for as long, tens of
// milliseconds, when the deletion ran under its lock. Acquire and Decide (exclusive)
// wait for the deletion before they take the committer's lock, not with it held.
//
// Only the views of the runs deleted are forgotten, and only once the deletion is
// committed: forgetting the view of a run created again (one another prune deleted
// since ids were read), whose writes only the commit log held yet, made the committer
// read the run from the database without them, and accept them again.
func (s *sqlStore) pruning(ids []string, fn func() (deleted []string, err error)) error {
	l := s.logged
	if l == nil {
		_, err := fn()
		return err
	}
	l.pruneMu.Lock()
	defer l.pruneMu.Unlock()
	l.mu.Lock()
	// Once the database holds the runs' writes, it holds the runs as the committer knows
	// them.
	for _, id := range ids {
		if err := l.settledRun(id); err != nil {
			l.mu.Unlock()
			return err
		}
	}
	for _, id := range ids {
		l.pruning[id]++
	}
	l.mu.Unlock()
	deleted, err := fn()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range deleted {
		l.forget(id)
	}
	for _, id := range ids {
		if l.pruning[id]--; l.pruning[id] <= 0 {
			delete(l.pruning, id)
		}
	}
	close(l.unpruned)
	l.unpruned = make(chan struct{})
	return err
}

func (s *sqlStore) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.done.Wait()
		if s.logged != nil {
			s.logged.close()
		}
		if s.writer != nil {
			s.writer.close()
		}
		if s.commitDB != nil {
			_ = s.commitDB.Close()
		}
		s.runRowMu.Lock()
		if s.runRow != nil {
			_ = s.runRow.Close()
		}
		s.runRowMu.Unlock()
	})
	return s.db.Close()
}
