package runlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver, "pgx"
)

// OpenPostgres opens the journal in the PostgreSQL database of dsn (a URL or key=value
// string, as pgx takes it), creating its tables when missing. Several orchestrators may
// share it: appends lock the run's row, so the lease's epoch fences a stale owner.
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("runlog: open PostgreSQL: %w", err)
	}
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
		tables:    `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`,
		unique: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe) && pe.Code == "23505"
		},
	}}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.start()
	return s, nil
}
