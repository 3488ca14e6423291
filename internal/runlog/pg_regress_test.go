package runlog

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolmesh/toolmesh/internal/harness"
)

func reviewPG(t *testing.T) *harness.Postgres {
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

// lostStatementPreparedAgain: a commit whose prepared statement the server no longer has
// fails, and the next prepares it again and succeeds.
func lostStatementPreparedAgain(t *testing.T, admin *sql.DB, dsn string) {
	if _, err := admin.Exec("CREATE SCHEMA lost"); err != nil {
		t.Fatal(err)
	}
	st := openOneConnPG(t, withSearchPath(dsn, "lost"))
	ctx := context.Background()
	l, err := st.Create(ctx, "run-lost", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, l, []Record{{Seq: 1, Kind: KindEvent, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	// The server forgets the statement behind pgx's back, as a pooler that moved the
	// connection, or an operator's DISCARD, would have it.
	if err := st.onConn(ctx, func(c *pgx.Conn) error {
		_, err := c.PgConn().Exec(ctx, "DEALLOCATE "+pgCommitName).ReadAll()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, l, []Record{{Seq: 2, Kind: KindEvent, Data: []byte("b")}}); err == nil {
		t.Fatal("the commit after the statement was lost passed: the test did not lose it")
	}
	if err := st.Append(ctx, l, []Record{{Seq: 2, Kind: KindEvent, Data: []byte("b")}}); err != nil {
		t.Fatalf("the commit after a failed one still fails: %v", err)
	}
	recs, err := st.Read(ctx, "run-lost", 0, 10)
	if err != nil || len(recs) != 2 || string(recs[1].Data) != "b" {
		t.Fatalf("read back %d records (%v)", len(recs), err)
	}
}

// execModePreparesNothing: with a DSN's default_query_exec_mode other than
// cache_statement, the commit leaves no statement prepared on its connection.
func execModePreparesNothing(t *testing.T, admin *sql.DB, dsn string) {
	if _, err := admin.Exec("CREATE SCHEMA execmode"); err != nil {
		t.Fatal(err)
	}
	st := openOneConnPG(t, withSearchPath(dsn, "execmode")+"&default_query_exec_mode=exec")
	ctx := context.Background()
	l, err := st.Create(ctx, "run-exec", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Append(ctx, l, []Record{{Seq: 1, Kind: KindEvent, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	var prepared int
	if err := st.onConn(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&prepared)
	}); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("%d statements are prepared on the commit's connection, which a pooler in transaction mode would not find again", prepared)
	}
}

// simpleProtocolCommits: with default_query_exec_mode=simple_protocol, commits go
// through a proxy that takes only the simple protocol (it drops a connection that sends a
// Parse message), and read back.
func simpleProtocolCommits(t *testing.T, admin *sql.DB, dsn string) {
	if _, err := admin.Exec("CREATE SCHEMA simple"); err != nil {
		t.Fatal(err)
	}
	proxied, parsed := simpleOnlyProxy(t, dsn)
	st := openOneConnPG(t, withSearchPath(proxied, "simple")+"&default_query_exec_mode=simple_protocol")
	ctx := context.Background()
	l, err := st.Create(ctx, "run-simple", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		if err := st.Append(ctx, l, []Record{{Seq: seq, Kind: KindEvent, Data: []byte{0, byte(seq), 0xff}}}); err != nil {
			t.Fatalf("record %d: %v (the proxy saw %d Parse messages)", seq, err, parsed.Load())
		}
	}
	if recs, err := st.Read(ctx, "run-simple", 0, 10); err != nil || len(recs) != 3 || recs[2].Data[1] != 3 {
		t.Fatalf("read back %v (%v)", recs, err)
	}
}

// simpleOnlyProxy is a proxy to the PostgreSQL server of dsn that passes the simple
// protocol only: a client's Parse message (the extended protocol's first) ends its
// connection, and is counted. It returns dsn through the proxy.
func simpleOnlyProxy(t *testing.T, dsn string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	parsed := &atomic.Int64{}
	server := u.Host
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go proxySimple(c, server, parsed)
		}
	}()
	u.Host = lis.Addr().String()
	return u.String(), parsed
}

// proxySimple relays c to the server at addr, message by message from the client once
// its startup message has passed, until the client sends a Parse message.
func proxySimple(c net.Conn, addr string, parsed *atomic.Int64) {
	defer func() { _ = c.Close() }()
	s, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer func() { _ = s.Close() }()
	go func() { _, _ = io.Copy(c, s) }()
	r := bufio.NewReader(c)
	relay := func(n int) bool {
		_, err := io.CopyN(s, r, int64(n))
		return err == nil
	}
	var head [5]byte
	if _, err := io.ReadFull(r, head[:4]); err != nil { // the startup message: its length, then the rest
		return
	}
	n := int(binary.BigEndian.Uint32(head[:4]))
	if _, err := s.Write(head[:4]); err != nil || n < 4 || !relay(n-4) {
		return
	}
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		if head[0] == 'P' {
			parsed.Add(1)
			return
		}
		n := int(binary.BigEndian.Uint32(head[1:]))
		if _, err := s.Write(head[:]); err != nil || n < 4 || !relay(n-4) {
			return
		}
	}
}

// openOneConnPG opens the PostgreSQL store of dsn committing on one connection.
func openOneConnPG(t *testing.T, dsn string) *sqlStore {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	st := s.(*sqlStore)
	st.commitDB.SetMaxOpenConns(1)
	return st
}

func withSearchPath(dsn, schema string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "search_path=" + schema
}

// openTwoAtOnce opens two stores on schema at once, as two replicas starting together,
// and returns how many refused to start.
func openTwoAtOnce(t *testing.T, dsn, schema string) (failed int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for k := range 2 {
		wg.Go(func() {
			s, err := OpenPostgres(context.Background(), withSearchPath(dsn, schema))
			errs[k] = err
			if err == nil {
				_ = s.Close()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			failed++
			t.Logf("schema %s: %v", schema, err)
		}
	}
	return failed
}

func TestPostgres(t *testing.T) {
	pg := reviewPG(t)
	admin, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	t.Run("a busy run is tried again, then left to Renew", func(t *testing.T) { busyRunRenewedWithItsBatch(t, admin, pg.DSN) })

	t.Run("two replicas start on an empty database", func(t *testing.T) {
		failed := 0
		for i := range 10 {
			schema := fmt.Sprintf("fresh%d", i)
			if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
				t.Fatal(err)
			}
			failed += openTwoAtOnce(t, pg.DSN, schema)
		}
		if failed > 0 {
			t.Errorf("%d of 20 replicas starting two at a time on an empty database refused to start", failed)
		}
	})

	t.Run("two replicas upgrade a version 1 journal at once", func(t *testing.T) {
		failed := 0
		for i := range 10 {
			schema := fmt.Sprintf("old%d", i)
			for _, st := range []string{
				"CREATE SCHEMA " + schema,
				"CREATE TABLE " + schema + ".toolmesh_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
				"INSERT INTO " + schema + ".toolmesh_meta VALUES ('schema_version', '1')",
				"CREATE TABLE " + schema + ".toolmesh_runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL, lease_until BIGINT NOT NULL, next_seq BIGINT NOT NULL, created BIGINT NOT NULL, updated BIGINT NOT NULL)",
				"CREATE TABLE " + schema + ".toolmesh_records (run_id TEXT NOT NULL, seq BIGINT NOT NULL, epoch BIGINT NOT NULL, kind TEXT NOT NULL, time BIGINT NOT NULL, data BYTEA, PRIMARY KEY (run_id, seq))",
			} {
				if _, err := admin.Exec(st); err != nil {
					t.Fatal(err)
				}
			}
			failed += openTwoAtOnce(t, pg.DSN, schema)
		}
		if failed > 0 {
			t.Errorf("%d of 20 replicas upgrading two at a time refused to start", failed)
		}
	})

	t.Run("racing appends of one run fail alone", func(t *testing.T) { racingAppendsFailAlone(t, pg.DSN) })

	t.Run("a commit statement the server lost is prepared again", func(t *testing.T) { lostStatementPreparedAgain(t, admin, pg.DSN) })
	t.Run("a DSN's exec mode other than cache_statement prepares nothing", func(t *testing.T) { execModePreparesNothing(t, admin, pg.DSN) })
	t.Run("a DSN's simple protocol commits", func(t *testing.T) { simpleProtocolCommits(t, admin, pg.DSN) })

	t.Run("refusals whose runs cannot be read", func(t *testing.T) { refusalsUnread(t, pg.DSN) })

	t.Run("groups of two replicas lock runs in opposite orders", func(t *testing.T) { oppositeOrders(t, pg.DSN) })
}

// oppositeOrders: the groups of two replicas lock the same runs in opposite orders; the
// stale owner's group must not fail the live owner's.
func oppositeOrders(t *testing.T, dsn string) {
	ctx := context.Background()
	a, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sa, sb := a.(*sqlStore), b.(*sqlStore)
	other := 0
	for i := range 40 {
		x, y := fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i)
		// Replica a drove both runs and paused; replica b took them over.
		la, _ := a.Create(ctx, x, "a", -time.Second)
		la2, _ := a.Create(ctx, y, "a", -time.Second)
		lb, err := b.Acquire(ctx, x, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		lb2, err := b.Acquire(ctx, y, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rec := func(l Lease) *write {
			recs := []Record{{Seq: 1, Kind: KindEvent}}
			return &write{lease: l, records: recs, row: packRow(recs, l.Epoch, time.Now()), done: make(chan error, 1)}
		}
		var ea, eb []error
		var wg sync.WaitGroup
		wg.Go(func() { ea = sa.commitGroup([]*write{rec(la), rec(la2)}) })
		wg.Go(func() { eb = sb.commitGroup([]*write{rec(lb2), rec(lb)}) })
		wg.Wait()
		for _, err := range eb {
			if err != nil {
				other++
				t.Logf("iteration %d: the live owner's append failed: %v (the stale owner's: %v)", i, err, ea)
				break
			}
		}
	}
	if other > 0 {
		t.Errorf("in %d of 40 tries, the group of the live owner failed because of a stale owner's group", other)
	}
}

// racingAppendsFailAlone: writers race for each sequence number of run x while run y
// appends beside them. The two committers must not commit two writes of x at once,
// whose second would fail its whole group (y's write with it) on the records' key.
func racingAppendsFailAlone(t *testing.T, dsn string) {
	ctx := context.Background()
	st, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lx, err := st.Create(ctx, "race-x", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ly, err := st.Create(ctx, "race-y", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 40; seq++ {
		errs := make([]error, 6)
		var ey error
		var wg sync.WaitGroup
		for k := range errs {
			wg.Go(func() { errs[k] = st.Append(ctx, lx, []Record{{Seq: seq, Kind: KindEvent}}) })
		}
		wg.Go(func() { ey = st.Append(ctx, ly, []Record{{Seq: seq, Kind: KindEvent}}) })
		wg.Wait()
		if ey != nil {
			t.Fatalf("record %d of run y, beside the race for run x: %v", seq, ey)
		}
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ErrConflict):
				t.Fatalf("record %d of run x, lost race: %v, want ErrConflict", seq, err)
			}
		}
		if won != 1 {
			t.Fatalf("record %d of run x written %d times", seq, won)
		}
	}
}

// busyRunRenewedWithItsBatch: a run whose row another transaction holds (its commit
// under way, or a connection stuck in a transaction) does not hold back the renewal of
// the others. RenewAll skips it and tries it again a moment later, twice: still held, it
// is left to Renew (ErrRenewAlone); freed meanwhile (a commit holds it about a
// millisecond), it is renewed with its batch.
func busyRunRenewedWithItsBatch(t *testing.T, admin *sql.DB, dsn string) {
	if _, err := admin.Exec("CREATE SCHEMA renewretry"); err != nil {
		t.Fatal(err)
	}
	dsn = withSearchPath(dsn, "renewretry")
	s := openOneConnPG(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leases []Lease
	for _, id := range []string{"busy-0", "busy-1", "busy-2"} {
		l, err := s.Create(ctx, id, "o1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	holder, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	for _, freed := range []bool{false, true} {
		tx, err := holder.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM toolmesh_runs WHERE run_id = 'busy-1' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		var left []int
		s.renewTried = func(try int, l []Lease) {
			left = append(left, len(l))
			if try == 0 && freed {
				_ = tx.Rollback() // the transaction that held the row ends
			}
		}
		// A statement that waited for the row would wait out this deadline.
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		got := s.RenewAll(rctx, leases, time.Hour, "cancel")
		rcancel()
		_ = tx.Rollback()
		want := []int{1, 1, 1}
		if freed {
			want = []int{1, 0}
		}
		for i, r := range got {
			switch {
			case i == 1 && !freed && !errors.Is(r.Err, ErrRenewAlone):
				t.Errorf("the run still busy: %v, want ErrRenewAlone", r.Err)
			case (i != 1 || freed) && (r.Err != nil || time.Until(r.Lease.Until) < 50*time.Minute):
				t.Errorf("freed %v, lease %d: %+v, want it renewed with its batch", freed, i, r)
			}
		}
		if !slices.Equal(left, want) {
			t.Errorf("freed %v: the leases left after each try: %v, want %v", freed, left, want)
		}
	}
	if l, err := s.Renew(ctx, leases[1], time.Hour); err != nil || time.Until(l.Until) < 50*time.Minute {
		t.Errorf("the busy run renewed alone once free: %+v, %v", l, err)
	}
}

// A group of writes is bounded by its bytes as well as by its writes: a write may hold
// MaxAppendBytes, and 65 such writes, valid each, made one PostgreSQL message over its
// 1 GiB limit, failing every write of the group. With the bound lowered, writes larger
// than a group's share commit in several groups, every one of them, and a write larger
// than the bound alone commits in a group of its own.
func TestGroupsBoundedByBytes(t *testing.T) {
	was := maxGroupBytes
	maxGroupBytes = 256 << 10
	t.Cleanup(func() { maxGroupBytes = was })
	pg := reviewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pgStore, err := OpenPostgres(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pgStore.Close() })
	_, sqlite := openLogged(t)
	for _, s := range []*sqlStore{pgStore.(*sqlStore), sqlite} {
		t.Run(s.d.name, func(t *testing.T) {
			const runs = 24
			data := make([]byte, 100<<10)
			var leases []Lease
			for i := range runs + 1 {
				l, err := s.Create(ctx, fmt.Sprintf("gb-%d", i), "o", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
			}
			before := s.Stats()
			errs := make([]error, runs+1)
			var wg sync.WaitGroup
			for i, l := range leases[:runs] {
				wg.Go(func() {
					errs[i] = s.Append(ctx, l, []Record{{Seq: 1, Kind: KindOutcome, Data: data}, {Seq: 2, Kind: KindOutcome, Data: data}})
				})
			}
			wg.Go(func() { // larger than the bound alone
				errs[runs] = s.Append(ctx, leases[runs], []Record{{Seq: 1, Kind: KindOutcome, Data: make([]byte, 300<<10)}})
			})
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("write %d: %v", i, err)
				}
			}
			after := s.Stats()
			// Each append of 200 KiB fills a group of 256 KiB alone.
			if commits := after.Commits - before.Commits; commits < runs {
				t.Errorf("%d appends of 200 KiB in %d commits; want a commit each, under a bound of 256 KiB", runs, commits)
			}
		})
	}
}

// A replica stopped inside a transaction that locks a run's row (SIGSTOP in a take-over,
// say) holds the row until the server ends its session, after idleInTransaction: the
// other replica's groups of writes with a write of that run wait that long at most and
// fail none of their writes. Before, they waited until the stopped replica's connection
// died, failing whole after a minute.
func TestStoppedReplicaLockBounded(t *testing.T) {
	pg := reviewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func() *sqlStore {
		s, err := OpenPostgres(ctx, pg.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s.(*sqlStore)
	}
	a, b := open(), open()
	lx, err := b.Create(ctx, "x", "b", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var others []Lease
	for i := range 8 {
		l, err := b.Create(ctx, fmt.Sprintf("y%d", i), "b", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, l)
	}
	// Replica a locks x's row, as its Acquire does, and stops there.
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM toolmesh_runs WHERE run_id = 'x' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(others)+1)
	wg.Go(func() { errs[0] = b.Append(ctx, lx, []Record{{Seq: 1, Kind: KindEvent}}) })
	time.Sleep(50 * time.Millisecond) // x's write in a group first
	for i, l := range others {
		wg.Go(func() {
			for seq := int64(1); seq <= 3; seq++ {
				if err := b.Append(ctx, l, []Record{{Seq: seq, Kind: KindEvent}}); err != nil {
					errs[i+1] = err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if took > idleInTransaction+10*time.Second {
		t.Errorf("the writes took %v with a row locked by a stopped replica; want about %v at most", took, idleInTransaction)
	}
	t.Logf("the writes took %v", took)
}

// A DSN that sets idle_in_transaction_session_timeout in its options keeps it: the store
// sets its own only where the DSN says nothing of it.
func TestDSNOptionsKeepTheirTimeout(t *testing.T) {
	pg := reviewPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sep := "?"
	if strings.Contains(pg.DSN, "?") {
		sep = "&"
	}
	for dsn, want := range map[string]string{
		pg.DSN: "5s",
		pg.DSN + sep + "options=-c%20idle_in_transaction_session_timeout%3D0": "0",
		pg.DSN + sep + "idle_in_transaction_session_timeout=7s":               "7s",
	} {
		st, err := OpenPostgres(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		err = st.(*sqlStore).db.QueryRowContext(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&v)
		if err != nil || v != want {
			t.Errorf("%s: idle_in_transaction_session_timeout = %q, %v; want %q", dsn, v, err, want)
		}
		// Only the committers' connections plan without sequential scans, however many
		// connections the other pool opens.
		for db, want := range map[*sql.DB]string{st.(*sqlStore).db: "on", st.(*sqlStore).commitDB: "off"} {
			var held []*sql.Conn
			for range 2 { // the pool's idle connections (two at most) taken: the query opens a new one
				c, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			if err := db.QueryRowContext(ctx, `SHOW enable_seqscan`).Scan(&v); err != nil || v != want {
				t.Errorf("enable_seqscan = %q, %v; want %q", v, err, want)
			}
			for _, c := range held {
				_ = c.Close()
			}
		}
		_ = st.Close()
	}
}

// Once a group has no room left for a write, every later write waits for the next
// group: a later write of the same run committed before it failed (its records no
// longer followed the run's last).
func TestByteBoundKeepsARunsOrder(t *testing.T) {
	was := maxGroupBytes
	maxGroupBytes = 256 << 10
	t.Cleanup(func() { maxGroupBytes = was })
	ctx, s := openLogged(t)
	mk := func(id string) Lease {
		l, err := s.Create(ctx, id, "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, c, z := mk("a"), mk("c"), mk("z")
	small, big := make([]byte, 1<<10), make([]byte, 200<<10)
	rec := func(seq int64, d []byte) []Record { return []Record{{Seq: seq, Kind: KindEvent, Data: d}} }
	s.logged.mu.Lock() // the committer stops in its next group, [z1], while the others queue
	zdone := make(chan error, 1)
	go func() { zdone <- s.Append(ctx, z, rec(1, small)) }()
	time.Sleep(100 * time.Millisecond)
	order := []struct {
		name string
		l    Lease
		recs []Record
	}{{"a1", a, rec(1, small)}, {"c1", c, rec(1, small)}, {"c2", c, rec(2, big)}, {"a2", a, rec(2, big)}, {"a3", a, rec(3, small)}}
	errs := make([]chan error, len(order))
	for i, x := range order {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- s.Append(ctx, x.l, x.recs) }()
		time.Sleep(30 * time.Millisecond) // queued in this order
	}
	s.logged.mu.Unlock()
	if err := <-zdone; err != nil {
		t.Fatal(err)
	}
	for i, x := range order {
		if err := <-errs[i]; err != nil {
			t.Errorf("%s: %v", x.name, err)
		}
	}
}

// refusalsUnread: the commit refuses a creation (the run exists) and an append (a stale
// lease), and the rows that say why cannot be read. The creation fails with ErrExists
// and the append with an error that is not a reason it was given (it said ErrNotFound
// of both, so a run whose append a replica could not explain stopped for good, and a
// creation sent again was answered as if its outcome were unknown).
func refusalsUnread(t *testing.T, dsn string) {
	ctx := context.Background()
	st, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*sqlStore)
	id := fmt.Sprintf("unread-%d", time.Now().UnixNano())
	l, err := s.Create(ctx, id, "a", time.Minute, Record{Seq: 1, Kind: KindRequest})
	if err != nil {
		t.Fatal(err)
	}
	stale := l
	stale.Epoch++
	recs := []Record{{Seq: 2, Kind: KindEvent}}
	create := &write{kind: writeCreate, lease: l, records: []Record{{Seq: 1, Kind: KindRequest}}, done: make(chan error, 1)}
	create.row = packRow(create.records, l.Epoch, time.Now())
	appendW := &write{lease: stale, records: recs, row: packRow(recs, stale.Epoch, time.Now()), done: make(chan error, 1)}
	_ = s.db.Close() // the rows are read on the store's main pool; the commit has its own
	errs := s.d.commitGroup(s, []*write{create, appendW})
	if !errors.Is(errs[0], ErrExists) {
		t.Errorf("the refused creation: %v, want ErrExists", errs[0])
	}
	if errs[1] == nil || errors.Is(errs[1], ErrNotFound) || errors.Is(errs[1], ErrFenced) || errors.Is(errs[1], ErrConflict) ||
		!strings.Contains(errs[1].Error(), "cannot be read") {
		t.Errorf("the refused append: %v, want an error saying its run cannot be read", errs[1])
	}
}
