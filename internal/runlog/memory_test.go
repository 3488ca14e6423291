package runlog_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/internal/runlog"
	"github.com/toolmesh/toolmesh/internal/runlog/runlogtest"
)

// The journal in memory behaves as the databases do, but for outliving its process.
func TestMemory(t *testing.T) {
	runlogtest.RunVolatile(t, func(t *testing.T) runlog.Store {
		s, err := runlog.OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// The journal in memory keeps finished runs within a count and a size, the oldest going
// first, whatever the retention says: 2,000 runs of 200 KiB answers grew it to gigabytes.
// Running runs are never dropped.
func TestMemoryBoundsFinishedRuns(t *testing.T) {
	ctx := context.Background()
	s, err := runlog.OpenMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(`"` + strings.Repeat("x", 200<<10) + `"`) // JSON, as journals before held
	live, err := s.Create(ctx, "live", "o", time.Hour, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: big})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		l, err := s.Create(ctx, fmt.Sprintf("r%04d", i), "o", time.Hour, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: big})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Append(ctx, l, []runlog.Record{{Seq: 2, Kind: runlog.KindEnd, Data: big}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, l, runlog.StateSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	var kept int
	for after := ""; ; {
		runs, err := s.List(ctx, runlog.Filter{After: after})
		if err != nil {
			t.Fatal(err)
		}
		kept += len(runs)
		if len(runs) < runlog.MaxList {
			break
		}
		after = runs[len(runs)-1].ID
	}
	// 256 MiB of runs of 400 KiB each, and the running one.
	if kept > (256<<20)/(400<<10)+2 {
		t.Errorf("the journal keeps %d runs; its bound is 256 MiB of finished runs", kept)
	}
	if _, err := s.Get(ctx, "r1999"); err != nil {
		t.Errorf("the newest finished run is gone: %v", err)
	}
	if _, err := s.Get(ctx, "r0000"); err == nil {
		t.Error("the oldest finished run is kept")
	}
	if err := s.Append(ctx, live, []runlog.Record{{Seq: 2, Kind: runlog.KindEvent}}); err != nil {
		t.Errorf("the running run: %v", err)
	}
}

// The journal in memory's bound on bytes bounds the heap its finished runs hold: runs of
// many small records (a run's events) held twice what the bound counted, their records'
// own size, the room of their growing arrays and of their data's arrays uncounted.
func TestMemoryFinishedBytesBoundTheHeap(t *testing.T) {
	const limit = 16 << 20
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	ctx := context.Background()
	s, err := runlog.OpenMemory(ctx, runlog.MemoryLimits{FinishedRuns: 1 << 20, FinishedBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	// Four times the bound, in runs of 66 records written six at a time, as a run's
	// steps write them; half of them in an array with room to spare, as an event is
	// encoded (its key, then its wire form, in an array made for most events).
	small := []byte(`{"k":"call-finished/loop_5989fcceef79cc4a/1/call_1_0#1"}`)
	for i := 0; i < 4*limit/(66*100); i++ {
		l, err := s.Create(ctx, fmt.Sprintf("run_%06d", i), "o", time.Hour, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: small})
		if err != nil {
			t.Fatal(err)
		}
		for seq := int64(2); seq < 66; seq += 6 {
			batch := make([]runlog.Record, min(6, 66-seq))
			for k := range batch {
				data := bytes.Clone(small)
				if k%2 == 0 {
					data = append(make([]byte, 0, 219), make([]byte, 150)...)
				}
				batch[k] = runlog.Record{Seq: seq + int64(k), Kind: runlog.KindEvent, Data: data}
			}
			if err := s.Append(ctx, l, batch); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Finish(ctx, l, runlog.StateSucceeded, runlog.Record{Seq: 66, Kind: runlog.KindEnd, Data: small}); err != nil {
			t.Fatal(err)
		}
	}
	if held := heap() - before; held > limit*9/8 {
		t.Errorf("the finished runs hold %.1f MiB of heap; the bound is %d MiB", float64(held)/(1<<20), limit>>20)
	}
	runtime.KeepAlive(s)
}

// Note makes any text a note every store keeps: UTF-8 without NUL bytes, at most
// MaxReasonBytes, cut at a character's start.
func TestNote(t *testing.T) {
	long := strings.Repeat("é", runlog.MaxReasonBytes) // two bytes each
	for _, c := range []struct{ in, want string }{
		{"record 7 is damaged", "record 7 is damaged"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"nul \x00 byte", "nul \uFFFD byte"},
		{long[:runlog.MaxReasonBytes+1], long[:runlog.MaxReasonBytes]},
		{"x" + long, "x" + long[:runlog.MaxReasonBytes-2]},
	} {
		got := runlog.Note(c.in)
		if got != c.want || !utf8.ValidString(got) || len(got) > runlog.MaxReasonBytes {
			t.Errorf("Note(%.40q...) = %.40q... (%d bytes), want %.40q... (%d bytes)", c.in, got, len(got), c.want, len(c.want))
		}
	}
}
