package runlog_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/harness"
	"github.com/toolmesh/toolmesh/internal/runlog"
)

// benchAppend appends one record per operation (what a loop writes per step), of about
// the size of a tool outcome.
func benchAppend(b *testing.B, s runlog.Store) {
	ctx := context.Background()
	l, err := s.Create(ctx, "bench-"+b.Name(), "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	data := json.RawMessage(`{"call_id":"call_1_0","tool":"add","outcome":"succeeded","content":"The sum is 42.","worker":"math-1"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := s.Append(ctx, l, []runlog.Record{{Seq: int64(i + 1), Kind: runlog.KindOutcome, Data: data}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendSQLite(b *testing.B) {
	s, err := runlog.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	benchAppend(b, s)
}

func BenchmarkAppendPostgres(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := harness.StartPostgres(ctx)
	if err != nil {
		b.Skip(err) // a benchmark, not a test: make test runs the PostgreSQL tests
	}
	defer pg.Stop()
	s, err := runlog.OpenPostgres(ctx, pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	benchAppend(b, s)
}
