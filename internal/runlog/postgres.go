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
	if err := migrateLocked(ctx, db, s); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.start()
	return s, nil
}

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
