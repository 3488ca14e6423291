package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestEffectsOpenConcurrently: replicas that start together open one effects file at the
// same moment; none may fail with "database is locked" (the busy timeout must be in force
// before the switch to WAL, which takes an exclusive lock).
func TestEffectsOpenConcurrently(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("effects-%d.db", round))
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				fe, err := openEffects(path)
				if err != nil {
					errs <- err
					return
				}
				_ = fe.db.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
