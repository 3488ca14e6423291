package runlog

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPruneReadsOnlyEndedRuns: the query with which Prune takes a page of the oldest
// ended runs is served by an index of the ended runs in that order, on SQLite and on
// PostgreSQL, in a new journal and in one written before the index was (it is added at
// open). Without it each page read every run of the journal and sorted those that ended,
// and a journal that keeps a week of runs holds millions.
func TestPruneReadsOnlyEndedRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []any{time.Now().UnixNano(), 256}

	t.Run("SQLite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "journal.db")
		st, err := OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		s := st.(*sqlStore)
		sqlitePlanUsesIndex(ctx, t, s.db, args)
		// A journal of an earlier version has no such index: the next open adds it.
		if _, err := s.db.ExecContext(ctx, `DROP INDEX `+endedIndex); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st, err = OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = st.Close() }()
		sqlitePlanUsesIndex(ctx, t, st.(*sqlStore).db, args)
	})

	t.Run("PostgreSQL", func(t *testing.T) {
		pg := reviewPG(t)
		st := openIndexed(ctx, t, pg.DSN)
		s := st.(*sqlStore)
		pgPlanUsesIndex(ctx, t, s, args)
		// An unusable index (what a failed concurrent build leaves) is built again, as is
		// a missing one.
		if _, err := s.db.ExecContext(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass`, endedIndex); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st = openIndexed(ctx, t, pg.DSN)
		pgPlanUsesIndex(ctx, t, st.(*sqlStore), args)

		// A journal of an earlier version opened while other replicas write: the open
		// does not wait for the build, nor do the writes; the build waits for the writes'
		// transactions (here one left open) and is done once they end. It blocked both.
		if _, err := st.(*sqlStore).db.ExecContext(ctx, `DROP INDEX `+endedIndex); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		admin, err := sql.Open("pgx", pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		writing, err := admin.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writing.ExecContext(ctx, `INSERT INTO toolmesh_runs (run_id, state, owner, epoch, lease_until, next_seq, created, updated) VALUES ('w', 'running', 'o', 1, 0, 1, 0, 0)`); err != nil {
			t.Fatal(err)
		}
		octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
		defer ocancel()
		st, err = OpenPostgres(octx, pg.DSN)
		if err != nil {
			t.Fatalf("opening while another replica's transaction writes the runs: %v", err)
		}
		defer func() { _ = st.Close() }()
		if _, err := st.Create(octx, "during-the-build", "a", time.Minute); err != nil {
			t.Fatalf("a run created while the index is built: %v", err)
		}
		if err := writing.Rollback(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-st.(*sqlStore).indexed:
		case <-ctx.Done():
			t.Fatal("the index was not built once the writing transaction ended")
		}
		pgPlanUsesIndex(ctx, t, st.(*sqlStore), args)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		pgIndexBuiltAfterBuilderStops(ctx, t, pg.DSN, args)
	})
}

// pgIndexBuiltAfterBuilderStops: a replica that finds another building the index looks
// again. Here the builder stops during its build (its lock gone with its session, the
// index left unusable), and the replica builds it. It used to give up at its first look
// and leave the index unusable until a replica started again.
func pgIndexBuiltAfterBuilderStops(ctx context.Context, t *testing.T, dsn string, args []any) {
	t.Helper()
	defer func(d time.Duration) { indexRetry = d }(indexRetry)
	indexRetry = 50 * time.Millisecond
	builder, err := sql.Open("pgx", dsn) // the builder replica: one session
	if err != nil {
		t.Fatal(err)
	}
	defer builder.Close()
	builder.SetMaxOpenConns(1)
	if _, err := builder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, int64(indexLock)); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.ExecContext(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass`, endedIndex); err != nil {
		t.Fatal(err)
	}
	st, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	select {
	case <-st.(*sqlStore).indexed:
		t.Fatal("the replica stopped looking at the index while another held the lock to build it")
	case <-time.After(5 * indexRetry):
	}
	if err := builder.Close(); err != nil { // its session ends, and its lock with it
		t.Fatal(err)
	}
	select {
	case <-st.(*sqlStore).indexed:
	case <-ctx.Done():
		t.Fatal("the index left unusable by a builder that stopped was not built again")
	}
	pgPlanUsesIndex(ctx, t, st.(*sqlStore), args)
}

// openIndexed opens a PostgreSQL store and waits until it has built the indexes it
// lacked.
func openIndexed(ctx context.Context, t *testing.T, dsn string) Store {
	t.Helper()
	st, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	select {
	case <-st.(*sqlStore).indexed:
	case <-ctx.Done():
		t.Fatal("the journal's indexes were not built")
	}
	return st
}

func sqlitePlanUsesIndex(ctx context.Context, t *testing.T, db *sql.DB, args []any) {
	t.Helper()
	rows, err := db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+pruneQuery, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "; ")
	if !strings.Contains(text, "INDEX "+endedIndex) || strings.Contains(text, "TEMP B-TREE") {
		t.Errorf("the prune query's plan: %s; want a search of %s, without a sort", text, endedIndex)
	}
}

func pgPlanUsesIndex(ctx context.Context, t *testing.T, s *sqlStore, args []any) {
	t.Helper()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A small table is read whole, or its matches sorted, at least as cheaply: the
	// planner is told to avoid both, as it would on its own for a large table where a
	// page is a sliver of it. Where no index serves the query, it still reads and sorts.
	for _, set := range []string{`SET enable_seqscan = off`, `SET enable_bitmapscan = off`, `SET enable_sort = off`} {
		if _, err := conn.ExecContext(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.QueryContext(ctx, `EXPLAIN `+s.q(pruneQuery), args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "; ")
	if !strings.Contains(text, endedIndex) || strings.Contains(text, "Sort") {
		t.Errorf("the prune query's plan: %s; want a scan of %s, without a sort", text, endedIndex)
	}
}

// A replica whose build of the index failed waits longer at each failure before it
// tries again (a build that fails late has read the whole table), up to an hour; one
// that waits for another's build looks again every indexRetry.
func TestIndexBuildBacksOff(t *testing.T) {
	defer func(d time.Duration) { indexRetry = d }(indexRetry)
	indexRetry = time.Minute
	var got []time.Duration
	for f := range 10 {
		got = append(got, indexWait(f))
	}
	want := []time.Duration{time.Minute, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour}
	if !slices.Equal(got, want) {
		t.Errorf("waits after 0..9 failures: %v; want %v", got, want)
	}
}
