package runlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
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

// benchAppendParallel appends from 32 runs at once, a record per operation: what the
// group commit makes of many runs in flight (every append waits for its commit).
func benchAppendParallel(b *testing.B, s runlog.Store) {
	ctx := context.Background()
	var n atomic.Int64
	data := json.RawMessage(`{"call_id":"call_1_0","tool":"add","outcome":"succeeded","content":"The sum is 42.","worker":"math-1"}`)
	b.ReportAllocs()
	b.SetParallelism(16) // 32 runs on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l, err := s.Create(ctx, fmt.Sprintf("bench-%s-%d", b.Name(), n.Add(1)), "bench", time.Hour)
		if err != nil {
			b.Error(err)
			return
		}
		for seq := int64(1); pb.Next(); seq++ {
			if err := s.Append(ctx, l, []runlog.Record{{Seq: seq, Kind: runlog.KindOutcome, Data: data}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func openSQLite(b *testing.B) runlog.Store {
	s, err := runlog.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func openPostgres(b *testing.B) runlog.Store {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := harness.StartPostgresWith(ctx, harness.PostgresOptions{Durable: true})
	if err != nil {
		b.Skip(err) // a benchmark, not a test: make test runs the PostgreSQL tests
	}
	b.Cleanup(pg.Stop)
	s, err := runlog.OpenPostgres(ctx, pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func openMemory(b *testing.B) runlog.Store {
	s, err := runlog.OpenMemory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func BenchmarkAppendMemory(b *testing.B)           { benchAppend(b, openMemory(b)) }
func BenchmarkAppendParallelMemory(b *testing.B)   { benchAppendParallel(b, openMemory(b)) }
func BenchmarkAppendSQLite(b *testing.B)           { benchAppend(b, openSQLite(b)) }
func BenchmarkAppendPostgres(b *testing.B)         { benchAppend(b, openPostgres(b)) }
func BenchmarkAppendParallelSQLite(b *testing.B)   { benchAppendParallel(b, openSQLite(b)) }
func BenchmarkAppendParallelPostgres(b *testing.B) { benchAppendParallel(b, openPostgres(b)) }

// benchRunsParallel writes whole runs from 32 goroutines at once, as a journaled loop of
// ten tool calls does: its creation with the request, two writes a step for eleven steps
// (each waiting for its commit), and its end. An operation is a run.
func benchRunsParallel(b *testing.B, s runlog.Store) {
	ctx := context.Background()
	var n atomic.Int64
	step := []byte(`{"call_id":"call_1_0","tool":"add","outcome":"succeeded","content":"The sum is 42.","worker":"math-1"}`)
	b.ReportAllocs()
	b.SetParallelism(16) // 32 runs on 2 cores
	if sr, ok := s.(runlog.StatsReporter); ok {
		before := sr.Stats()
		defer func() {
			after := sr.Stats()
			if c := after.Commits - before.Commits; c > 0 {
				b.ReportMetric(float64(after.Writes-before.Writes)/float64(c), "writes/commit")
				b.ReportMetric(float64(after.Committing-before.Committing)/float64(c)/1000, "µs/commit")
			}
		}()
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := s.Create(ctx, fmt.Sprintf("bench-%s-%d", b.Name(), n.Add(1)), "bench", time.Hour, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: step})
			if err != nil {
				b.Error(err)
				return
			}
			seq := int64(2)
			for range 21 {
				recs := []runlog.Record{{Seq: seq, Kind: runlog.KindOutcome, Data: step}, {Seq: seq + 1, Kind: runlog.KindEvent, Data: step}}
				if err := s.Append(ctx, l, recs); err != nil {
					b.Error(err)
					return
				}
				seq += 2
			}
			if err := s.Finish(ctx, l, runlog.StateSucceeded, runlog.Record{Seq: seq, Kind: runlog.KindEnd, Data: step}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRunsParallelMemory(b *testing.B)   { benchRunsParallel(b, openMemory(b)) }
func BenchmarkRunsParallelSQLite(b *testing.B)   { benchRunsParallel(b, openSQLite(b)) }
func BenchmarkRunsParallelPostgres(b *testing.B) { benchRunsParallel(b, openPostgres(b)) }
