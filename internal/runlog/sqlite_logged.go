package runlog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolmesh/toolmesh/internal/failpoint"
)

// The SQLite store commits writes to its commit log, not to the database: a group of
// writes of every run that waits is one entry, appended and fsynced — a write and an
// fsync, whatever the group holds. A write is acknowledged then. An applier copies the
// log's entries to the database a little later, many at a time, in one transaction:
// the writes of one run since the last copy become one row (a step of a run used to cost
// a page write, a system call or two, and a B-tree insert each; now a run's steps share
// them). The database's transactions need no fsync of their own (synchronous=NORMAL):
// the log holds what a crash might take from them, and it is emptied only once a
// checkpoint has put everything in the database file, on disk. At open, the entries the
// database does not hold (it notes the last one it applied) are applied again.
//
// The committer checks each write against its run as the log and the database hold it
// together: a view of each run it wrote (owner, epoch, state, next sequence number),
// read from the database when it has none. Everything else that writes a run's row
// (Acquire) or needs it current (Decide, the reads) takes the committer's lock or waits
// until the applier has caught up with the log (settled).

// applyDelay is how long the applier lets entries gather before it copies them, unless
// someone waits for them (a read of a run asks for the copy at once); applyBytes copies
// them at once when they grow past it. The longer the wait, the more of a run's writes
// become one row, and the more runs are created and ended in one copy (one insert of
// their row where there were an insert and an update) — but past what SQLite's page
// cache holds, a copy's pages spill to the write-ahead log before it commits.
const (
	applyDelay = 100 * time.Millisecond
	applyBytes = 8 << 20
)

// resetBytes is the size past which the log is emptied, once all of it is applied
// (smaller in tests).
var resetBytes = func() *atomic.Int64 {
	var n atomic.Int64
	n.Store(64 << 20)
	return &n
}() // atomic: a test lowers it while a store's applier reads it

// runView is a run as the committer knows it.
type runView struct {
	lockedRun
}

// sqliteLogged is the SQLite store's committer, log and applier.
type sqliteLogged struct {
	s      *sqlStore
	log    *commitLog
	writer *sqliteWriter

	// mu orders the committers' entries and the writes that bypass them; views are the
	// runs they wrote; broken is the error of a log that failed to write or sync, after
	// which nothing more is committed (what is on disk is not known).
	mu     sync.Mutex
	views  map[string]*runView
	broken error
	// brokenNow is broken, for Health, which does not wait for the committer's lock.
	brokenNow atomic.Pointer[error]
	// maxIDs are, for each prefix of run ids the committer met (what comes before
	// "run_": "" or a tenant's "acme/"), the greatest id of the form prefix+"run_"+hex
	// (generated ids, which grow with time) the database holds or the committer created:
	// a run to be created with a greater one of that form is new without a look in the
	// database (lookups counts the looks). Read from the database the first time the
	// prefix comes, at most maxPrefixes of them.
	maxIDs  map[string]string
	lookups int
	// pruning counts, for each run Prune deletes now, the prunes under way: a creation
	// of its id waits until they are done and have forgotten its view (errPruningRun),
	// never checked against the database, which may hold the deletion already. unpruned
	// is closed (and replaced) whenever runs leave pruning.
	pruning  map[string]int
	unpruned chan struct{}
	// pruneMu is held by a prune's deletion, which holds SQLite's writer, and taken
	// before mu by the writes that bypass the committer (exclusive): they wait for the
	// deletion without holding mu, and the committer's appends, meanwhile.
	pruneMu sync.Mutex
	// smu guards written: the entries written and not known durable yet, in order.
	smu     sync.Mutex
	written []logEntry

	amu   sync.Mutex
	acond *sync.Cond
	// queue holds the entries logged and not applied, queued their bytes; logged and
	// applied are the numbers of the last entry logged and applied; urgent says someone
	// waits for them; applyErr is why the last copy failed.
	queue    []logEntry
	queued   int
	logged   uint64
	applied  uint64
	urgent   bool
	stop     bool
	stopped  chan struct{}
	applyErr error
	// applyFault, set by tests, fails a copy with the error it returns.
	applyFault func() error
	// tries counts the applier's copies, failed or not: a reader that finds the last one
	// failed has the applier try again at once and waits for that try.
	tries uint64
	kick  chan struct{}
	// pendingRuns are the runs with writes logged and not applied: the number of the
	// last entry that holds one, so that a read of a run waits for its own writes only.
	pendingRuns map[string]uint64
	// logBroken is set once an entry could not be synced: the entries after it are never
	// applied.
	logBroken error
	// joined is the array the applier joins a run's rows in (join), reused from one row
	// to the next.
	joined []byte
}

// startLogged opens the log next to the database, applies what the database lacks of
// it, empties it, and starts the applier.
func startLogged(ctx context.Context, s *sqlStore, w *sqliteWriter, path string) (*sqliteLogged, error) {
	log, entries, err := openCommitLog(path + "-commits")
	if err != nil {
		return nil, err
	}
	l := &sqliteLogged{s: s, log: log, writer: w, views: map[string]*runView{}, maxIDs: map[string]string{}, pruning: map[string]int{}, unpruned: make(chan struct{}), pendingRuns: map[string]uint64{}, stopped: make(chan struct{}), kick: make(chan struct{}, 1)}
	l.acond = sync.NewCond(&l.amu)
	var applied uint64
	var v string
	if err := s.db.QueryRowContext(ctx, `SELECT value FROM toolmesh_meta WHERE key = 'log_applied'`).Scan(&v); err == nil {
		_, _ = fmt.Sscan(v, &applied)
	}
	var missing []logEntry
	for _, e := range entries {
		if e.id > applied {
			missing = append(missing, e)
		}
	}
	if len(missing) > 0 {
		if err := l.applyEntries(missing); err != nil {
			_ = log.close()
			return nil, fmt.Errorf("runlog: applying the commit log %s: %w", log.path, err)
		}
		applied = missing[len(missing)-1].id
	}
	log.last = max(log.last, applied)
	l.logged, l.applied = log.last, log.last
	if err := l.checkpoint(); err != nil {
		_ = log.close()
		return nil, err
	}
	go l.run()
	return l, nil
}

// view is run id as the committer knows it; found false when there is none.
func (l *sqliteLogged) view(id string) (*runView, bool, error) {
	if v, ok := l.views[id]; ok {
		return v, true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if prefix, ok := idPrefix(id); ok {
		greatest, known, err := l.greatest(ctx, prefix)
		if err != nil {
			return nil, false, err
		}
		if known && id > greatest {
			return nil, false, nil // greater than any id of its form the database holds
		}
	}
	l.lookups++
	r, err := l.s.readRunRow(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v := &runView{lockedRun: r}
	l.views[id] = v
	return v, true, nil
}

// maxPrefixes bounds the prefixes of run ids whose greatest id the committer keeps.
const maxPrefixes = 1024

// idPrefix is what comes before "run_" in a run id of the form the orchestrator
// generates (a tenant's "acme/", or ""): "run_" and hexadecimal digits after the last
// "/"; ok false for an id of another form.
func idPrefix(id string) (prefix string, ok bool) {
	i := strings.LastIndexByte(id, '/') + 1
	rest, found := strings.CutPrefix(id[i:], "run_")
	if !found || rest == "" {
		return "", false
	}
	for _, c := range []byte(rest) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return id[:i], true
}

// greatest is the greatest id of prefix's form the database holds or the committer
// created, read from the database the first time prefix comes (ids sort by their bytes:
// those of the form lie between prefix+"run_0" and prefix+"run_g"); known false when
// the committer keeps too many prefixes to keep this one. l.mu is held.
func (l *sqliteLogged) greatest(ctx context.Context, prefix string) (string, bool, error) {
	if m, ok := l.maxIDs[prefix]; ok {
		return m, true, nil
	}
	if len(l.maxIDs) >= maxPrefixes {
		return "", false, nil
	}
	var m sql.NullString
	if err := l.s.db.QueryRowContext(ctx, `SELECT max(run_id) FROM toolmesh_runs WHERE run_id >= ? AND run_id < ?`, prefix+"run_0", prefix+"run_g").Scan(&m); err != nil {
		return "", false, fmt.Errorf("runlog: reading the journal's runs: %w", sqliteExplain(err))
	}
	l.maxIDs[prefix] = m.String
	return m.String, true, nil
}

// commitGroup checks each write against its run, logs those that pass as one entry
// and hands it to the applier.
func (l *sqliteLogged) commitGroup(group []*write) []error {
	errs := make([]error, len(group))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	l.mu.Lock()
	if l.broken != nil {
		l.mu.Unlock()
		return fail(l.broken)
	}
	accepted := l.acceptLocked(group, errs)
	if len(accepted) == 0 {
		l.mu.Unlock()
		return errs
	}
	id := l.log.last + 1
	failpoint.Hit(failpoint.StoreBeforeCommit)
	started := time.Now()
	err := l.log.write(id, accepted)
	l.s.logging.Add(int64(time.Since(started)))
	if err != nil {
		if err, ok := noRoom(err); ok {
			// Nothing of the entry stays; the writes fail, and the next ones are tried
			// again as if it never was. The log starts again from its start if the
			// database holds all of it: its room there is taken already.
			_ = l.resetLocked() // on a full disk it may fail as well: tried at the next
			l.mu.Unlock()
			return fail(fmt.Errorf("runlog: the commit log could not be written: %w", err))
		}
		l.broken = fmt.Errorf("runlog: the commit log could not be written: %w", err)
		b := l.broken
		l.brokenNow.Store(&b)
		l.mu.Unlock()
		return fail(l.broken)
	}
	l.applyLocked(accepted)
	l.amu.Lock()
	for _, w := range accepted {
		l.pendingRuns[w.lease.RunID] = id
	}
	l.amu.Unlock()
	l.sweep()
	l.smu.Lock()
	l.written = append(l.written, logEntry{id: id, writes: accepted})
	l.smu.Unlock()
	l.mu.Unlock()

	// The sync runs outside the lock: another committer writes its entry meanwhile, and
	// syncs it with ours or after. A sync makes durable every entry written before it
	// began (fdatasync covers the file), this one and those before it.
	started = time.Now()
	err = l.log.sync()
	l.s.logging.Add(int64(time.Since(started)))
	if err != nil {
		broken := fmt.Errorf("runlog: the commit log could not be synced: %w", sqliteExplain(err))
		// Whoever waits for the entry (holding mu, perhaps) learns it never comes.
		l.amu.Lock()
		l.logBroken = broken
		l.acond.Broadcast()
		l.amu.Unlock()
		l.mu.Lock()
		l.broken = broken
		b := l.broken
		l.brokenNow.Store(&b)
		l.mu.Unlock()
		return fail(broken)
	}
	l.durable(id)
	failpoint.Hit(failpoint.StoreAfterCommit)
	return errs
}

// errPruningRun refuses the creation of a run Prune deletes now: its writer submits it
// again once the deletion is done (whenPruned).
var errPruningRun = errors.New("runlog: the run is being deleted")

// whenPruned is closed once no prune deletes run id.
func (l *sqliteLogged) whenPruned(id string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pruning[id] == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	return l.unpruned
}

// errUnreadableRun is the cause of a write refused because its run's row cannot be read:
// the run's failure, not the store's (Health).
var errUnreadableRun = errors.New("the run's row cannot be read")

// acceptLocked checks each write of group against its run's view, saying in errs why
// one is refused, and returns those accepted. A run whose row cannot be read fails its
// own write, not the others' of the group. l.mu is held.
func (l *sqliteLogged) acceptLocked(group []*write, errs []error) []*write {
	var accepted []*write
	for i, w := range group {
		if w.kind == writeCreate && l.pruning[w.lease.RunID] > 0 {
			errs[i] = errPruningRun
			continue
		}
		v, found, err := l.view(w.lease.RunID)
		if err != nil {
			errs[i] = fmt.Errorf("runlog: commit: %w: %w", errUnreadableRun, err)
			continue
		}
		var r lockedRun
		if found {
			r = v.lockedRun
		}
		if errs[i] = w.check(r, found); errs[i] != nil {
			continue
		}
		accepted = append(accepted, w)
	}
	return accepted
}

// applyLocked brings the views of the accepted writes' runs up to date. l.mu is held.
func (l *sqliteLogged) applyLocked(accepted []*write) {
	for _, w := range accepted {
		v := l.views[w.lease.RunID]
		if v == nil {
			v = &runView{}
			l.views[w.lease.RunID] = v
		}
		switch w.kind {
		case writeCreate:
			if prefix, ok := idPrefix(w.lease.RunID); ok {
				if m, known := l.maxIDs[prefix]; known {
					l.maxIDs[prefix] = max(m, w.lease.RunID)
				}
			}
			v.lockedRun = lockedRun{state: StateRunning, owner: w.lease.Owner, epoch: w.lease.Epoch, until: w.lease.Until.UnixNano(), nextSeq: w.next(1)}
		case writeAppend:
			v.nextSeq = w.next(v.nextSeq)
		case writeFinish, writeHold:
			v.nextSeq, v.state, v.until = w.next(v.nextSeq), w.state, 0
		}
	}
}

// durable hands the entries up to id, synced now, to the applier.
func (l *sqliteLogged) durable(id uint64) {
	l.smu.Lock()
	defer l.smu.Unlock()
	n := 0
	for n < len(l.written) && l.written[n].id <= id {
		n++
	}
	done := l.written[:n:n]
	l.written = l.written[n:]
	for _, e := range done {
		l.enqueue(e)
	}
}

// sweepViews is how many views the committer keeps before it sweeps.
var sweepViews = 4096

// sweep forgets the views of ended runs once they are many and the database holds
// their ends: the view of a run whose writes are still only in the log is all the
// committer knows of it (its end, a hold), and stays. l.mu is held.
func (l *sqliteLogged) sweep() {
	if len(l.views) < sweepViews {
		return
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	for id, v := range l.views {
		if _, pending := l.pendingRuns[id]; v.state != StateRunning && !pending {
			delete(l.views, id)
		}
	}
}

// forget drops the view of run id, which was written around the committer; the next
// write reads it again.
func (l *sqliteLogged) forget(id string) { delete(l.views, id) }

// enqueue hands a durable entry to the applier, in order.
func (l *sqliteLogged) enqueue(e logEntry) {
	l.amu.Lock()
	l.queue = append(l.queue, e)
	l.logged = e.id
	for _, w := range e.writes {
		if w.row != nil {
			l.queued += cap(w.row.data) // what the row holds of memory until it is copied
		}
	}
	kick := l.queued >= applyBytes || len(l.queue) == 1
	l.amu.Unlock()
	if kick {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

// settled waits until the database holds everything logged so far, synced (the
// applier's last error when it could not copy it).
func (l *sqliteLogged) settled() error {
	l.smu.Lock()
	target := uint64(0)
	if len(l.written) > 0 {
		target = l.written[len(l.written)-1].id
	}
	l.smu.Unlock()
	l.amu.Lock()
	defer l.amu.Unlock()
	target = max(target, l.logged)
	return l.waitApplied(target)
}

// settledRun waits until the database holds every write of run id logged so far:
// settled for one run, which does not wait for the others' writes.
func (l *sqliteLogged) settledRun(id string) error {
	l.amu.Lock()
	defer l.amu.Unlock()
	target := l.pendingRuns[id]
	return l.waitApplied(target)
}

// waitApplied waits until the applier has applied entry target. l.amu is held. After a
// failed copy it has the applier try again at once (rather than when its backoff ends)
// and waits for that one try: a journal whose disk has room again serves its reads then.
func (l *sqliteLogged) waitApplied(target uint64) error {
	if l.applied < target && l.applyErr != nil && l.logBroken == nil && !l.stop {
		tried := l.tries
		l.urgent = true
		select {
		case l.kick <- struct{}{}:
		default:
		}
		for l.tries == tried && l.logBroken == nil && !l.stop {
			l.acond.Wait()
		}
	}
	for l.applied < target && l.applyErr == nil && l.logBroken == nil && !l.stop {
		l.urgent = true
		select {
		case l.kick <- struct{}{}:
		default:
		}
		l.acond.Wait()
	}
	if l.applied < target {
		if l.applyErr != nil {
			return l.applyErr
		}
		if l.logBroken != nil {
			return l.logBroken
		}
		return errors.New("runlog: the store is closed")
	}
	return nil
}

// run is the applier: it copies the queued entries to the database, some applyDelay
// after the first arrives (at once when someone waits or they are large), until stop.
func (l *sqliteLogged) run() {
	defer close(l.stopped)
	backoff := 100 * time.Millisecond
	for {
		<-l.kick
		l.amu.Lock()
		if !l.urgent && !l.stop && l.queued < applyBytes {
			l.amu.Unlock()
			t := time.NewTimer(applyDelay)
			select {
			case <-t.C:
			case <-l.kick: // someone waits
			}
			t.Stop()
			l.amu.Lock()
		}
		batch := l.queue
		l.queue, l.queued, l.urgent = nil, 0, false
		stop := l.stop
		l.amu.Unlock()
		if len(batch) > 0 {
			err := l.applyEntries(batch)
			l.amu.Lock()
			if err != nil {
				// Logged, so not lost: it is copied again (at the latest at the next open).
				l.queue = append(batch, l.queue...)
				for _, e := range batch {
					for _, w := range e.writes {
						if w.row != nil {
							l.queued += cap(w.row.data)
						}
					}
				}
				l.applyErr = fmt.Errorf("runlog: copying the commit log to the database: %w", sqliteExplain(err))
				l.tries++
				l.acond.Broadcast()
				l.amu.Unlock()
				if stop {
					return // the next open copies it
				}
				slog.Warn("the journal's commit log could not be copied to its database; it is tried again", "error", err.Error())
				l.backOff(backoff)
				backoff = min(2*backoff, 5*time.Second)
				select {
				case l.kick <- struct{}{}:
				default:
				}
				continue
			}
			backoff = 100 * time.Millisecond
			l.applied, l.applyErr = batch[len(batch)-1].id, nil
			l.tries++
			for _, e := range batch {
				for _, w := range e.writes {
					if l.pendingRuns[w.lease.RunID] == e.id {
						delete(l.pendingRuns, w.lease.RunID)
					}
				}
			}
			l.acond.Broadcast()
			more := len(l.queue) > 0
			l.amu.Unlock()
			if more {
				select {
				case l.kick <- struct{}{}:
				default:
				}
			}
			l.tryReset()
		}
		if stop {
			return
		}
	}
}

// backOff waits d before the applier tries a failed copy again, or less when someone
// kicks it (a reader waiting for the copy, the store closing).
func (l *sqliteLogged) backOff(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.kick:
	}
}

// tryReset empties the log once it is longer than resetBytes and the database holds all
// of it on disk, when no commit is under way (the applier never waits for the committer,
// which may wait for it).
func (l *sqliteLogged) tryReset() {
	// The checkpoint needs SQLite's writer, which a prune's deletion may hold for a
	// while: it is left for the next time rather than waited for with mu (and every
	// append) held. pruneMu comes before mu, as in exclusive.
	if !l.pruneMu.TryLock() {
		return
	}
	defer l.pruneMu.Unlock()
	if !l.mu.TryLock() {
		return
	}
	defer l.mu.Unlock()
	if l.log.end <= resetBytes.Load() { // the log's end is the committer's, under mu
		return
	}
	if err := l.resetLocked(); err != nil {
		slog.Warn("the journal's commit log could not be emptied", "error", err.Error())
	}
}

// resetLocked empties the log if the database holds all of it and no commit is under
// way. l.mu is held.
func (l *sqliteLogged) resetLocked() error {
	if l.log.end == 0 {
		return nil
	}
	l.smu.Lock()
	inFlight := len(l.written) > 0
	l.smu.Unlock()
	l.amu.Lock()
	all := l.applied == l.logged && !inFlight
	l.amu.Unlock()
	if !all {
		return nil
	}
	return l.checkpoint()
}

// checkpoint puts the database's write-ahead log in its file, on disk, and empties the
// commit log: the database holds all of it. Nothing may be logged meanwhile.
func (l *sqliteLogged) checkpoint() error {
	var busy, walPages, moved int64
	err := l.writer.conn.Raw(func(dc any) error {
		return l.writer.queryRow(dc, `PRAGMA wal_checkpoint(TRUNCATE)`, &busy, &walPages, &moved)
	})
	if err != nil {
		return fmt.Errorf("runlog: checkpointing the journal: %w", sqliteExplain(err))
	}
	if busy != 0 || walPages != moved {
		// A reader held the write-ahead log: the database file may not hold all of it, so
		// the commit log stays as it is.
		return fmt.Errorf("runlog: checkpointing the journal: blocked by a reader (%d of %d pages copied)", moved, walPages)
	}
	if err := l.log.rewind(); err != nil {
		return fmt.Errorf("runlog: emptying the commit log: %w", err)
	}
	return nil
}

// applyEntries copies entries to the database in one transaction, with the number of
// the last, and the writes of a run that follow one another as one row.
func (l *sqliteLogged) applyEntries(entries []logEntry) error {
	if f := l.applyFault; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	var writes []*write
	for _, e := range entries {
		writes = append(writes, e.writes...)
	}
	// A run's rows, joined while they follow one another: the row of each run that
	// is still open, by run.
	open := map[string]*rowRun{}
	var runs []*rowRun
	for _, w := range writes {
		if w.row == nil {
			continue
		}
		if g := open[w.lease.RunID]; g != nil && g.take(w.row) {
			continue
		}
		g := newRowRun(w.lease.RunID, w.row)
		open[w.lease.RunID] = g
		runs = append(runs, g)
	}
	now := l.s.now().UnixNano()
	return l.writer.conn.Raw(func(dc any) error {
		bt := dc.(driver.ConnBeginTx)
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
		w := l.writer
		for _, op := range runOpsOf(writes) {
			if err := op.exec(w, dc, now); err != nil {
				return err
			}
		}
		for _, g := range runs {
			r := join(l.joined, g.rows...)
			if r != g.rows[0] && cap(r.data) <= maxJoined {
				// A row join made, in the applier's array or one it grew: the statement
				// copies its data, and the next joined row may take the array.
				l.joined = r.data
			}
			if r.data == nil && r.n > 0 {
				return fmt.Errorf("run %s, records %d to %d: the row was given back before its copy", g.run, r.first, r.first+r.n-1)
			}
			if _, err := w.exec(dc, sqliteInsertRow, g.run, r.first, r.n, r.epoch, r.kind, r.kinds, r.time, r.data); err != nil {
				return err
			}
		}
		if _, err := w.exec(dc, `INSERT INTO toolmesh_meta (key, value) VALUES ('log_applied', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
			fmt.Sprint(entries[len(entries)-1].id)); err != nil {
			return err
		}
		failpoint.Hit(failpoint.StoreBeforeApply)
		done = true
		if err := tx.Commit(); err != nil {
			return err
		}
		// The database holds the rows now, and nothing reads them after this copy.
		for _, w := range writes {
			if w.row != nil {
				w.row.release()
			}
		}
		return nil
	})
}

// maxJoined bounds the array the applier keeps for the rows it joins.
const maxJoined = 1 << 20

// close copies what is left of the log to the database, empties the log and stops the
// applier.
func (l *sqliteLogged) close() {
	l.amu.Lock()
	l.stop = true
	l.amu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	<-l.stopped
	l.amu.Lock()
	l.acond.Broadcast()
	all := len(l.queue) == 0
	l.amu.Unlock()
	if all {
		_ = l.checkpoint()
	}
	_ = l.log.close()
}

// runOp is what a copy writes to a run's row: a creation, an end, or both at once for a
// run created and ended in the same copy (one insert where there were an insert and an
// update).
type runOp struct {
	w   *write
	end *write // the end of a run created by w, in the same copy
}

// runOpsOf are the writes to runs' rows of a copy's writes, in order, each creation
// joined with its run's end when the copy holds both.
func runOpsOf(writes []*write) []*runOp {
	var ops []*runOp
	created := map[string]*runOp{}
	for _, wr := range writes {
		switch wr.kind {
		case writeCreate:
			op := &runOp{w: wr}
			ops = append(ops, op)
			created[wr.lease.RunID] = op
		case writeFinish, writeHold:
			if op := created[wr.lease.RunID]; op != nil && op.end == nil {
				op.end = wr
				continue
			}
			ops = append(ops, &runOp{w: wr})
		}
	}
	return ops
}

// exec writes op to the database.
func (op *runOp) exec(w *sqliteWriter, dc any, now int64) error {
	wr, lease := op.w, op.w.lease
	var err error
	switch {
	case wr.kind == writeCreate && op.end != nil:
		end := op.end
		next := end.next(0)
		if next == 0 {
			next = wr.next(1)
		}
		_, err = w.exec(dc, sqliteCreateEnded, lease.RunID, string(end.state), lease.Owner, lease.Epoch, next, end.note, now, now)
	case wr.kind == writeCreate:
		_, err = w.exec(dc, sqliteCreate, lease.RunID, lease.Owner, lease.Epoch, lease.Until.UnixNano(), wr.next(1), now, now)
	default:
		next := wr.next(0)
		if next == 0 {
			_, err = w.exec(dc, `UPDATE toolmesh_runs SET state = ?, lease_until = 0, note = ?, updated = ? WHERE run_id = ?`, string(wr.state), wr.note, now, lease.RunID)
		} else {
			_, err = w.exec(dc, sqliteEnd, next, string(wr.state), wr.note, now, lease.RunID)
		}
	}
	return err
}
