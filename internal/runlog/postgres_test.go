package runlog_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

// startPostgres starts a private PostgreSQL server for the test (make test installs
// Debian's postgresql when it is missing).
func startPostgres(t *testing.T) *harness.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg, err := harness.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	return pg
}

func TestPostgres(t *testing.T) {
	pg := startPostgres(t)
	runlogtest.Run(t, func(t *testing.T) runlog.Store {
		t.Helper()
		s, err := runlog.OpenPostgres(context.Background(), pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	t.Run("survives crashes", func(t *testing.T) { crashTest(t, "pg:"+pg.DSN) })
}

// A PostgreSQL that is down at start is refused with the reason; one that goes away
// while the journal is open fails appends with an error, and loses nothing that was
// acknowledged before.
func TestPostgresGoesAway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := runlog.OpenPostgres(ctx, "postgres://toolmesh@127.0.0.1:1/toolmesh?sslmode=disable&connect_timeout=2"); err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Errorf("a server that is down: %v", err)
	}
	pg := startPostgres(t)
	s, err := runlog.OpenPostgres(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := s.Create(ctx, "away-1", "o1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, l, []runlog.Record{{Seq: 1, Kind: runlog.KindRequest}}); err != nil {
		t.Fatal(err)
	}
	pg.Kill()
	actx, acancel := context.WithTimeout(ctx, 15*time.Second)
	defer acancel()
	err = s.Append(actx, l, []runlog.Record{{Seq: 2, Kind: runlog.KindEvent}})
	if err == nil || errors.Is(err, runlog.ErrConflict) || actx.Err() != nil {
		t.Errorf("append to a server that went away: %v (context %v)", err, actx.Err())
	}
}

// TestPostgresRenewAllSkipsBusyRuns: a run whose row another transaction holds (its
// commit under way, or a connection stuck in a transaction) does not hold back the
// renewal of the others: RenewAll renews them at once and leaves it to Renew.
func TestPostgresRenewAllSkipsBusyRuns(t *testing.T) {
	pg := startPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := runlog.OpenPostgres(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var leases []runlog.Lease
	for _, id := range []string{"busy-0", "busy-1", "busy-2"} {
		l, err := s.Create(ctx, id, "o1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	admin, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close() }()
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM toolmesh_runs WHERE run_id = 'busy-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	got := s.RenewAll(rctx, leases, time.Hour, "cancel")
	for i, r := range got {
		switch {
		case i == 1 && !errors.Is(r.Err, runlog.ErrRenewAlone):
			t.Errorf("the busy run: %v, want ErrRenewAlone", r.Err)
		case i != 1 && (r.Err != nil || time.Until(r.Lease.Until) < 50*time.Minute):
			t.Errorf("lease %d: %+v, want it renewed", i, r)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Renew(ctx, leases[1], time.Hour); err != nil || time.Until(l.Until) < 50*time.Minute {
		t.Errorf("the busy run renewed alone once free: %+v, %v", l, err)
	}
}
