package runlog

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestLegacyEndedListsAsTerminated: a run an earlier version ended "ended" (a replan or
// a termination) is found by a filter on StateTerminated and reads as terminated, in
// every store.
func TestLegacyEndedListsAsTerminated(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stores := map[string]func() (Store, error){
		"memory": func() (Store, error) { return OpenMemory(ctx) },
		"sqlite": func() (Store, error) { return OpenSQLite(ctx, filepath.Join(t.TempDir(), "journal.db")) },
		"postgres": func() (Store, error) {
			pg := reviewPG(t)
			return OpenPostgres(ctx, pg.DSN)
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			s, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for id, state := range map[string]State{"old": StateEnded, "new": StateTerminated, "plan": StateReplanRequested, "ok": StateSucceeded} {
				l, err := s.Create(ctx, id, "o", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Finish(ctx, l, state); err != nil {
					t.Fatal(err)
				}
			}
			runs, err := s.List(ctx, Filter{State: StateTerminated})
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range runs {
				ids = append(ids, r.ID)
				if r.State.Current() != StateTerminated {
					t.Errorf("run %s is %q, which reads as %q", r.ID, r.State, r.State.Current())
				}
			}
			if len(ids) != 2 || ids[0] != "new" || ids[1] != "old" {
				t.Errorf("terminated runs %v, want [new old]", ids)
			}
			if runs, _ := s.List(ctx, Filter{State: StateReplanRequested}); len(runs) != 2 || runs[0].ID != "old" || runs[1].ID != "plan" {
				t.Errorf("replanned runs %v, want [old plan]: a legacy ended run may be either", runs)
			}
		})
	}
}
