package runlog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
