package runlog_test

import (
	"context"
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
