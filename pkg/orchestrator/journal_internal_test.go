package orchestrator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/config"
	"github.com/toolmesh/toolmesh/internal/runlog"
)

// The journal in memory keeps at most loop.retain_runs finished runs, none for 0: the
// journal's own zero, its default, kept a thousand.
func TestMemoryJournalKeepsRetainRuns(t *testing.T) {
	for _, retain := range []int{0, 3} {
		t.Run(fmt.Sprint(retain), func(t *testing.T) {
			cfg := config.Default()
			cfg.Loop.RetainRuns = retain
			store, err := openJournal(cfg.Journal, cfg.Loop.RetainRuns, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			ctx := context.Background()
			for i := range 20 {
				l, err := store.Create(ctx, fmt.Sprintf("r%02d", i), "me", time.Minute, runlog.Record{Seq: 1, Kind: runlog.KindRequest, Data: []byte("{}")})
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Finish(ctx, l, runlog.StateSucceeded); err != nil {
					t.Fatal(err)
				}
			}
			runs, err := store.List(ctx, runlog.Filter{})
			if err != nil || len(runs) != retain {
				t.Errorf("loop.retain_runs %d: the journal keeps %d finished runs (%v)", retain, len(runs), err)
			}
		})
	}
}
